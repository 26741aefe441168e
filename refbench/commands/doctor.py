"""`refbench doctor`: what refbench finds, where, which versions, and what each missing piece
disables, with the command that fixes it. Changes nothing.

Exit code 0 when a run on the embedded MinIO can go ahead, 2 when something it needs is missing.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

from .. import __version__, builds as bl, hyperfine, paths, profile, tools
from ..backends import sandbox, snapshot
from ..config import load_config
from ..errors import EXIT_ERROR, EXIT_OK, RefbenchError

OK, WARN, MISSING = "ok", "warn", "MISSING"


def _first_line(argv: list[str]) -> str | None:
    try:
        # the program itself: for go, no GOTOOLCHAIN switch to a toolchain a restored module cache
        # holds, which a go.mod in the current directory could ask for (review35l L2)
        p = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd="/",
                           env={**tools.child_env(), "GOTOOLCHAIN": "local"})  # a build's environment: no token
    except (OSError, subprocess.SubprocessError):
        return None
    lines = (p.stdout or p.stderr).strip().splitlines()
    return lines[0].strip() if lines else None


def checks() -> list[tuple[str, str, str, bool]]:
    """(status, tool, what was found / what it disables and how to fix it, required)."""
    setup = "run `refbench setup`" + (" (`make setup` in this checkout)" if paths.CHECKOUT else "")
    out = []

    hf = hyperfine.locate()
    info = hyperfine.HyperfineInfo.probe(hf) if hf else None
    if not hf:
        out.append((MISSING, "hyperfine", f"nothing can be measured: {setup} (builds hyperfine "
                    f"{hyperfine.PINNED_VERSION} with cargo), or apt-get install hyperfine", True))
    elif info is None:
        out.append((MISSING, "hyperfine", f"{hf} does not say its version: {setup}", True))
    else:
        out.append(hyperfine_check(info, setup))
    go = tools.find_tool("go")
    gov = _first_line([go, "version"]) if go else None
    out.append((OK, "go", f"{gov} at {go}", True) if go else
               (MISSING, "go", f"no builds: {setup} (fetches a Go toolchain from the Go module proxy) or install Go", True))

    git = shutil.which("git")
    out.append((OK, "git", f"{_first_line([git, '--version'])} at {git}", True) if git else
               (MISSING, "git", "no --source git builds (only --source module): apt-get install git", True))

    minio = tools.find_tool("minio")
    out.append((OK, "minio", f"at {minio} (embedded S3 server)", False) if minio else
               (MISSING, "minio", f"S3 targets need -b BUCKET (no embedded MinIO): {setup}", False))

    restore = tools.find_tool("refbench-s3restore")
    out.append((OK, "refbench-s3restore", f"at {restore} (remove steps restore objects in batches)", False)
               if restore else
               (WARN, "refbench-s3restore", "remove steps restore their objects by one server-side copy per "
                f"object (7-25x the cost of the remove): {setup}", False))

    shaper = tools.find_tool("toxiproxy-server")
    out.append((OK, "toxiproxy-server", f"at {shaper} (network profiles: lan, region, ...)", False) if shaper else
               (WARN, "toxiproxy-server", "S3 steps under a network profile other than loopback (the bundled "
                f"region steps, --network lan|region) are refused: {setup}", False))

    gtime = next((p for p in ("/usr/bin/time", shutil.which("gtime")) if p and os.access(p, os.X_OK)), None)
    if gtime:
        out.append((OK, "GNU time", f"at {gtime}", False))
    elif info and "memory" in info.metrics():
        out.append((OK, "GNU time", "not needed: hyperfine reports peak memory", False))
    else:
        out.append((WARN, "GNU time", "peak RSS is n/a: apt-get install time (or get hyperfine 1.20+)", False))

    why = sandbox.unavailable()
    out.append((OK, "network namespace", "kubo's online daemon runs in one of the run's own, loopback only",
                False) if why is None else
               (WARN, "network namespace", f"none can be made here ({why}): kubo's online scenarios are refused "
                "(--daemon offline runs them without networking). apt-get install iproute2 util-linux where ip, "
                "unshare or nsenter is missing; otherwise run as root, or allow unprivileged user namespaces "
                "(sysctl kernel.unprivileged_userns_clone=1)", False))
    why = snapshot.overlay_unavailable()
    out.append((OK, "overlay", "cached IPFS repo states are restored before every run (kubo's GC scenario)", False)
               if why is None else
               (WARN, "overlay", f"cannot restore a cached IPFS state here ({why}): kubo's garbage collection "
                "scenario is refused; it needs overlayfs in a mount namespace (Linux 5.11+ without root): apt-get install "
                "iproute2 util-linux where they are missing, else leave it out with --only", False))
    perf_ok, perf_text = profile.perf_status()
    out.append((OK, "perf", f"{perf_text}: CPU profiles of the steps that move", False) if perf_ok else
               (WARN, "perf", f"{perf_text}: no CPU profiles (--profile, and of steps that move); the comparison "
                "and the request accounting still work. apt-get install linux-perf (`make setup` does)", False))

    curl = shutil.which("curl")
    out.append((OK, "curl", f"at {curl}", False) if curl else
               (WARN, "curl", "kubo's concurrent HTTP API scenario cannot run: apt-get install curl", False))

    cargo = shutil.which("cargo") or hyperfine._home_cargo()
    if not (info and info.schema == 2):
        out.append((OK, "cargo", f"at {cargo} (`refbench setup` can build hyperfine {hyperfine.PINNED_VERSION})", False)
                   if cargo else
                   (WARN, "cargo", f"cannot build hyperfine {hyperfine.PINNED_VERSION}: install Rust (rustup, or "
                    "apt-get install cargo), then run `refbench setup`", False))
    return out


def hyperfine_check(info: hyperfine.HyperfineInfo, setup: str) -> tuple[str, str, str, bool]:
    """What the hyperfine found measures per run, and why a metric gets no verdict with it."""
    have = ", ".join(info.metrics())
    where = f"{info.version_text} at {info.path}"
    if info.schema == 2:
        counters = "" if info.counts_instructions else (
            "; instructions: not counted here (the kernel refuses hyperfine the hardware counter: "
            "perf_event_paranoid, or no PMU in a VM)")
        return OK, "hyperfine", f"{where}: each run's own {have}{counters}", True
    return (WARN, "hyperfine", f"{where}: measures {have} only. 1.x reports peak memory as a running "
            f"maximum across every command of a call (so memory gets no verdict and shows n/a), CPU time per "
            f"run only in interleaved rounds, no instructions: {setup} with cargo and rustup installed "
            f"(builds {hyperfine.PINNED_VERSION})", True)


def where() -> list[tuple[str, str]]:
    scen = paths.default_scenarios()
    rows = [("refbench", f"{__version__} ({'checkout ' + str(paths.CHECKOUT) if paths.CHECKOUT else 'installed at ' + str(paths.PACKAGE_DIR)})"),
            ("scenarios", f"{scen}" + (" (./refbench.toml)" if scen.name == paths.USER_SCENARIOS else " (bundled; "
                                       f"put your own in ./{paths.USER_SCENARIOS} or pass --scenarios)")),
            ("builds dir", f"{paths.default_builds_dir()} (--builds-dir or REFBENCH_BUILDS_DIR to move it)"),
            ("tools dir", f"{paths.tools_bin()} (pinned tools only, hash-checked; then PATH)"),
            ("cache", str(paths.cache_root()))]
    co = bl.go_checkout()
    if co:
        try:
            t = load_config(scen).target_for_module(co.module)
        except RefbenchError:
            t = None
        rows.append(("checkout", f"{co.root} (module {co.module}) -> " + (
            f"target {t.name}, built from this checkout; PR refs from {co.remote or 'its origin'}" if t else
            "no declared target has this module: pass -t and --repo, or declare it in ./refbench.toml")))
    return rows


def parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog="refbench doctor", description=__doc__.split("\n\n")[0])


def main(argv: list[str]) -> int:
    parser().parse_args(argv)
    for k, v in where():
        print(f"{k + ':':12} {v}")
    print()
    rows = checks()
    width = max(len(t) for _, t, _, _ in rows)
    for status, tool, text, _ in rows:
        print(f"{status:8} {tool:{width}}  {text}")
    bad = [t for s, t, _, req in rows if s == MISSING and req]
    if bad:
        print(f"\nrefbench cannot run comparisons until {', '.join(bad)} {'is' if len(bad) == 1 else 'are'} installed",
              file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK
