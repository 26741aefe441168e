#!/usr/bin/env python3
"""`make demo` from nothing, phase by phase (issue 53): a fresh clone of this checkout run with a
HOME of its own and empty caches (no ~/.cache, ~/.local, ~/go; the machine's Go and Node only),
as a new user's first command and a hosted runner's first job start. Prints each phase's
seconds (the venv and its dependencies, each tool set-up installs, each ref's build, the servers
built on first use, fixtures, measuring) and whether every step was decided; with --repeat N the
demo's comparison runs N-1 more times in the same clone (warm), and the note counts how many runs
decided every step.

    .venv/bin/python benchmarks/first_answer.py [--repeat 3] [--keep] [--demo-args "..."]

Its last line is `demo: N s` (the first, cold run, set-up included).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (phase, the line that starts it, the line that ends it): set-up's and the run's own words
PHASES = (
    ("venv and Python dependencies", r"^setup: creating \.venv", r"^setup: go version"),
    ("hyperfine (pinned wheel)", r"^setup: fetching the pinned hyperfine", r"^setup: hyperfine \S+ at"),
    ("refbench-s3restore", r"^setup: building refbench-s3restore", r"^setup: (tools linked|MinIO and toxiproxy)"),
    ("set-up, all", r"^setup: creating \.venv", r"^setup: ready"),
)
_BUILD_START = re.compile(r"(?:^|\] )building (\S+) \(")  # a run's lines carry its "[refbench 0.7s]" prefix
_BUILD_END = re.compile(r"(?:^|\])\s+(\S+): (built in|cached)")
_FIRST_USE = re.compile(r"building (\S+) \S+ with go\S* .*\(first use")
_FIRST_USE_END = re.compile(r"(?:^|\] )(\S+) built in (\d+) s \(first use\)")


def fresh_env(home: Path) -> dict[str, str]:
    """The machine's environment with nothing of a user's: a new HOME, no XDG or Go cache settings."""
    drop = ("XDG_", "GOPATH", "GOCACHE", "GOMODCACHE", "GOFLAGS", "GOTOOLCHAIN", "REFBENCH_", "VIRTUAL_ENV",
            "PIP_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    # the machine image's Python (pyenv), Rust (rustup) and Go stay where the image put them, under
    # the old HOME; what a user's work fills (~/.cache, ~/go, ~/.local) is new and empty
    old = os.path.expanduser("~")
    env.update(HOME=str(home), PYENV_ROOT=os.environ.get("PYENV_ROOT", f"{old}/.pyenv"),
               CARGO_HOME=os.environ.get("CARGO_HOME", f"{old}/.cargo"),
               RUSTUP_HOME=os.environ.get("RUSTUP_HOME", f"{old}/.rustup"))
    env["PATH"] = ":".join(p for p in env.get("PATH", "").split(":") if p and p != f"{old}/go/bin")
    return env


def timed_lines(argv: list[str], cwd: Path, env: dict) -> tuple[int, list[tuple[float, str]]]:
    """Run argv, echoing its output, and keep each line with the seconds since the start."""
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            bufsize=1)
    lines = []
    for line in proc.stdout:
        lines.append((time.monotonic() - t0, line.rstrip("\n")))
        print(f"[{lines[-1][0]:7.1f}] {line}", end="", flush=True)
    return proc.wait(), lines + [(time.monotonic() - t0, "")]


def phases(lines: list[tuple[float, str]]) -> list[tuple[str, float]]:
    """Each phase's seconds, read off the timed lines."""
    def first(pattern: str, after: float = -1.0) -> float | None:
        return next((t for t, line in lines if t >= after and re.search(pattern, line)), None)
    out = []
    for name, start, end in PHASES:
        t0 = first(start)
        t1 = first(end, t0) if t0 is not None else None
        if t0 is not None and t1 is not None:
            out.append((name, t1 - t0))
    starts: dict[str, float] = {}
    for t, line in lines:
        if m := _BUILD_START.search(line):
            starts[m.group(1)] = t
        elif (m := _BUILD_END.search(line)) and m.group(1) in starts:
            out.append((f"build {m.group(1)}", t - starts.pop(m.group(1))))
        elif m := _FIRST_USE.search(line):
            starts[f"first use {m.group(1)}"] = t
        elif m := _FIRST_USE_END.search(line):
            out.append((f"{m.group(1)}, built on first use (beside the builds)", float(m.group(2))))
    built = max((t for t, line in lines if _BUILD_END.search(line)), default=None)
    served = first(r"\] backend: ")
    if built is not None and served is not None:
        out.append(("after the builds, waiting for the servers built on first use", max(0.0, served - built)))
        out.append(("from the server's start to the summary (measuring)", lines[-1][0] - served))
    return out


def decided(results: Path) -> tuple[int, int, list[str]]:
    """(steps decided on wall time, steps, the undecided ones) of a results file."""
    doc = json.loads(results.read_text())
    steps, open_ = 0, []
    for sc in doc["scenarios"]:
        for st in sc["steps"]:
            for c in st.get("comparisons") or ():
                if c.get("metric", "wall") != "wall":
                    continue
                steps += 1
                if c["verdict"] not in ("faster", "slower", "no significant change", "identical binary"):
                    open_.append(f"{sc['name']} / {st['name']}: {c['verdict']}")
    return steps - len(open_), steps, open_


def run_phases(results: Path) -> list[tuple[str, float]]:
    t = json.loads(results.read_text()).get("timing") or {}
    return [("fixtures", t.get("fixture_seconds") or 0.0), ("measuring (hyperfine)", t.get("hyperfine_seconds") or 0.0),
            ("measuring, all (rounds, probes, untimed commands)",
             (t.get("wall_seconds") or 0) - (t.get("build_seconds") or 0) - (t.get("fixture_seconds") or 0))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=1, help="runs of the demo's comparison in all (the first cold)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--demo-args", help="DEMO_ARGS for make demo (default: the Makefile's)")
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="refbench-first-answer-"))
    try:
        home, clone = scratch / "home", scratch / "refbench"
        home.mkdir()
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        env = fresh_env(home)
        make = ["make", "demo"] + ([f"DEMO_ARGS={args.demo_args}"] if args.demo_args else [])
        code, lines = timed_lines(make, clone, env)
        total = lines[-1][0]
        rows = phases(lines)
        results = clone / "results.json"
        report = []
        if code == 0 and results.is_file():
            rows += run_phases(results)
            report.append(decided(results))
        demo = shlex.split(args.demo_args or re.search(r"^DEMO_ARGS \?= (.*)$", (clone / "Makefile").read_text(),
                                                       re.M).group(1))
        for i in range(1, args.repeat if code == 0 else 0):
            extra = ["--json", f"results-{i}.json", "-o", f"summary-{i}.md"]
            rc = subprocess.run([str(clone / "bench.py"), *demo, *extra], cwd=clone, env=env).returncode
            if rc == 0:
                report.append(decided(clone / f"results-{i}.json"))
        print()
        for name, seconds in rows:
            print(f"{name:55s} {seconds:7.1f} s")
        for i, (n, of, open_) in enumerate(report):
            print(f"run {i + 1}: decided {n} of {of} steps" + (f"; undecided: {'; '.join(open_)}" if open_ else ""))
        if len(report) > 1:
            print(f"every step decided in {sum(n == of for n, of, _ in report)} of {len(report)} runs")
        print(f"exit {code}")
        print(f"demo: {total:.0f} s")
        return code
    finally:
        done_with(scratch, args.keep)


def remove_tree(path: Path) -> None:
    """rm -rf, Go's read-only module cache included."""
    subprocess.run(["chmod", "-R", "u+w", str(path)], capture_output=True)
    shutil.rmtree(path, ignore_errors=True)


def done_with(scratch: Path, keep: bool) -> None:
    """The scratch directory kept (and named) or removed."""
    if keep:
        print(f"kept {scratch}")
    else:
        remove_tree(scratch)


if __name__ == "__main__":
    sys.exit(main())
