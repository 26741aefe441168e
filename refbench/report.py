"""Render results: results.json (the machine-readable truth) and every view rendered from it."""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import jinja2
from tabulate import tabulate

from . import __version__, paths, results
from .progress import fmt_duration
from .stats import MARKERS, VERDICTS

SCHEMA = "refbench/results"
SCHEMA_VERSION = 1
# hidden first line of a PR comment, so a bot can find and update its own comment
COMMENT_MARKER = "<!-- refbench:pr-comment -->"
TEMPLATES = paths.templates_dir()  # prefer paths.template_loader()


def environment(toolchain: str | None = None) -> dict:
    return results.environment(toolchain).to_json()


cpu_model = results.cpu_model


def busy_warning(results: dict) -> str | None:
    """A warning when other work competed with the benchmark (1-minute load above the CPU count)."""
    env = results.get("environment", {})
    cpus = env.get("cpus") or 1
    share = env.get("competing_cpu_share")
    if share is not None and share > 0.25:
        return (f"the machine was busy: other work used {share * 100:.0f}% of its {cpus} CPUs during this run, "
                "so timings are noisier and verdicts less reliable")
    load = env.get("load_before") or 0
    if share is None and load > cpus:
        return (f"the machine was busy when this run started (load average {load:.1f} on {cpus} CPUs), "
                "so timings may be noisier and verdicts less reliable")
    return None


def verdict_counts(results: dict) -> dict[str, int]:
    counts = {v: 0 for v in VERDICTS}
    for sc in results["scenarios"]:
        for st in sc["steps"]:
            for c in st["comparisons"]:
                counts[c["verdict"]] += 1
    return counts


def more_seconds(st: dict, c: dict) -> float | None:
    """Measuring time the runs still needed would take: (needed - done) runs of both builds."""
    need = c.get("runs_needed")
    b, k = st["builds"].get(c["baseline"]), st["builds"].get(c["contender"])
    if not need or not b or not k or not b.get("times") or not k.get("times"):
        return None
    done = min(len(b["times"]), len(k["times"]))
    per_pair = sum(b["times"]) / len(b["times"]) + sum(k["times"]) / len(k["times"])
    return max(0, need - done) * per_pair


def detection_line(results: dict) -> str | None:
    """The run's power in one sentence: on how many of its multi-run steps it could have detected a
    change of the threshold's size, and of twice that (from each comparison's detectable effect)."""
    t = results["settings"].get("threshold", 0.05)
    mdes = [c.get("mde") for sc in results["scenarios"] for st in sc["steps"] for c in st["comparisons"]
            if c.get("p_value") is not None]
    if not mdes:
        return None
    m = len(mdes)
    n1 = sum(1 for x in mdes if x is not None and x <= t)
    n2 = sum(1 for x in mdes if x is not None and x <= 2 * t)
    what = "comparisons" if len(results["builds"]) > 2 else "steps"
    return (f"This run could detect changes of ≥ {t * 100:.0f}% on {n1} of {m} {what}, "
            f"and of ≥ {2 * t * 100:.0f}% on {n2} of {m}.")


def regressions(results: dict) -> list[tuple[str, str, dict]]:
    return [(sc["name"], st["name"], c) for sc in results["scenarios"] for st in sc["steps"]
            for c in st["comparisons"] if c["verdict"] == "slower"]


def write_json(results: dict, path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(results, indent=1))
    tmp.replace(path)


def load_results(path: Path, check: bool = True) -> dict:
    """Read a results.json of this or an older schema version. Every reader goes through here, so a
    file that cannot be read, or lacks what the views rely on, is one RefbenchError naming the file
    and the part that is wrong — never a traceback from deep inside a view. check=False skips the
    views' shape check, for readers that take only what they find (shard weights)."""
    from .errors import RefbenchError
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise RefbenchError(f"{path}: no such results file") from None
    except IsADirectoryError:
        raise RefbenchError(f"{path}: is a directory, not a results file") from None
    except OSError as e:
        raise RefbenchError(f"{path}: cannot read: {e.strerror or e}") from None
    except ValueError as e:
        raise RefbenchError(f"{path}: not a refbench results file ({e})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        schema = data.get("schema") if isinstance(data, dict) else None
        raise RefbenchError(f"{path}: not a refbench results file (schema {schema!r})")
    if not isinstance(data.get("version", 0), int) or data.get("version", 0) > SCHEMA_VERSION:
        raise RefbenchError(f"{path}: results schema version {data.get('version')!r} is newer than this "
                            f"refbench reads ({SCHEMA_VERSION}); upgrade refbench")
    problem = shape_problem(data) if check else None
    if problem:
        raise RefbenchError(f"{path}: malformed results file: {problem}")
    return data


def shape_problem(data: dict) -> str | None:
    """What is missing or of the wrong kind in a results document (None: nothing), for the keys
    every view reads without a default."""
    def kind(value, want, where):
        if not isinstance(value, want):
            names = want.__name__ if isinstance(want, type) else " or ".join(w.__name__ for w in want)
            raise _Shape(f"{where} should be {names}, not {type(value).__name__}")
        return value

    def get(d, key, want, where):
        if key not in d:
            raise _Shape(f"{where or 'the file'} has no {key!r}")
        return kind(d[key], want, f"{where}.{key}" if where else key)

    try:
        get(data, "settings", dict, "")
        get(get(data, "target", dict, ""), "name", str, "target")
        for i, b in enumerate(get(data, "builds", list, "")):
            get(kind(b, dict, f"builds[{i}]"), "label", str, f"builds[{i}]")
        for i, sc in enumerate(get(data, "scenarios", list, "")):
            where = f"scenarios[{i}]"
            kind(sc, dict, where)
            get(sc, "name", str, where)
            get(sc, "fixture", dict, where)
            for j, st in enumerate(get(sc, "steps", list, where)):
                w = f"{where}.steps[{j}]"
                kind(st, dict, w)
                get(st, "name", str, w)
                for label, b in get(st, "builds", dict, w).items():
                    get(kind(b, dict, f"{w}.builds[{label!r}]"), "times", list, f"{w}.builds[{label!r}]")
                for k, c in enumerate(get(st, "comparisons", list, w)):
                    wc = f"{w}.comparisons[{k}]"
                    kind(c, dict, wc)
                    for key in ("baseline", "contender"):
                        get(c, key, str, wc)
                    if get(c, "verdict", str, wc) not in VERDICTS:
                        raise _Shape(f"{wc}.verdict {c['verdict']!r} is not one of {', '.join(VERDICTS)}")
                    get(c, "rel", (int, float), wc)
    except _Shape as e:
        return str(e)
    return None


class _Shape(Exception):
    pass


# ---- formatting helpers used by the templates --------------------------------------------
def fmt_pct(x: float | None, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{x * 100:+.{digits}f}%"


def fmt_s(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:.3f}"


def fmt_p(p: float | None) -> str:
    if p is None:
        return "n/a"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def fmt_ci(c: dict) -> str:
    if c.get("ci_low") is None:
        return "n/a"
    return f"[{fmt_pct(c['ci_low'])}, {fmt_pct(c['ci_high'])}]"


def md_escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _jinja() -> jinja2.Environment:
    env = jinja2.Environment(loader=paths.template_loader(), autoescape=False,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined)
    env.filters.update(pct=fmt_pct, s=fmt_s, p=fmt_p, ci=fmt_ci, md=md_escape)
    env.globals.update(markers=MARKERS)
    return env


def step_rows(results: dict) -> list[dict]:
    """One row per (scenario, step, contender) with everything a view shows."""
    rows = []
    for sc in results["scenarios"]:
        for st in sc["steps"]:
            for c in st["comparisons"]:
                rows.append({"scenario": sc["name"], "step": st["name"], "c": c, "st": st, "sc": sc})
    return rows


def render_markdown(results: dict, flavour: str = "md") -> str:
    if flavour == "github":
        return render_github(results)
    env = _jinja()
    template = env.get_template("summary.md.j2")
    return template.render(r=results, marker=COMMENT_MARKER, busy=busy_warning(results), t=tables(results), counts=verdict_counts(results),
                           regressions=regressions(results), detection=detection_line(results))


# ---- the PR-comment flavour -----------------------------------------------------------------
GITHUB_COMMENT_LIMIT = 65536  # GitHub rejects a comment body longer than this
# verdict table order when it has to be cut: what a reviewer must see first
_SEVERITY = {"slower": 0, "faster": 1, "inconclusive": 2, "no significant change": 3}


def comment_size(text: str) -> int:
    """Size as counted against GitHub's limit, conservatively: UTF-8 bytes (never fewer than the
    characters or UTF-16 units GitHub might count; every emoji marker is 4)."""
    return len(text.encode("utf-8"))


def render_github(results: dict, limit: int = GITHUB_COMMENT_LIMIT, report_url: str | None = None) -> str:
    """The summary as a PR comment: hidden marker line, verdict table first, the rest in
    collapsible <details> blocks; always within ``limit``: the least important blocks are dropped
    first, then verdict rows (slower kept longest), each omission said in the comment."""
    t = tables(results)
    sections = []  # most important first; dropped from the end when the comment is too long
    if t["scoreboard"]:
        sections.append(("Scoreboard", t["scoreboard"]))
    sections.append(("Hyperfine summary", t["phrases"]))
    sections.append(("Detailed timings (s)", t["detailed"]))
    sections.append(("Resources and throughput (MB/s, objects/s, CPU, peak RSS)", t["resources"]))
    sections.append(("Builds", t["builds"]))
    sections.append(("Scenarios", t["details"]))
    rows = verdict_rows(results)
    env = _jinja()
    template = env.get_template("github.md.j2")

    def render(keep_sections: int, keep_rows: int | None) -> str:
        if keep_rows is None:
            shown, hidden = [r for _, r in rows], []
        else:
            order = sorted(range(len(rows)), key=lambda i: (_SEVERITY.get(rows[i][0], 9), i))
            keep = sorted(order[:keep_rows])
            shown = [rows[i][1] for i in keep]
            hidden = [rows[i][0] for i in order[keep_rows:]]
        hidden_counts = {v: hidden.count(v) for v in _SEVERITY if hidden.count(v)}
        return template.render(r=results, marker=COMMENT_MARKER, busy=busy_warning(results), counts=verdict_counts(results), t=t,
                               verdicts=verdict_table(results, shown), hidden_rows=len(hidden),
                               hidden_counts=hidden_counts, sections=sections[:keep_sections],
                               omitted=[name for name, _ in sections[keep_sections:]], report_url=report_url)

    for k in range(len(sections), -1, -1):
        text = render(k, None)
        if comment_size(text) <= limit:
            return text
    lo, hi = 0, len(rows)  # largest number of verdict rows that fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if comment_size(render(0, mid)) <= limit:
            lo = mid
        else:
            hi = mid - 1
    text = render(0, lo)
    if comment_size(text) > limit:  # only absurd names could do this: cut hard, keep the marker
        text = text.encode("utf-8")[:limit - 64].decode("utf-8", "ignore") + "\n\n*(truncated)*\n"
    return text


def build_results(*, target: dict, builds: list[dict], backend: dict, settings: dict, scenarios: list[dict],
                  timing: dict, env: dict, scoreboard: dict | None, command_line: list[str]) -> dict:
    return {
        "schema": SCHEMA, "version": SCHEMA_VERSION, "refbench": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command_line": command_line,
        "target": target, "environment": env, "settings": settings, "builds": builds,
        "baseline": builds[0]["label"] if builds else None, "backend": backend, "scenarios": scenarios,
        "scoreboard": scoreboard, "timing": timing,
    }


def _fmt_rss(kb) -> str:
    return "n/a" if kb is None else f"{kb / 1024:.1f} MiB"


# ---- throughput: what users of warp and bee-bench read first -------------------------------
def throughput(sc: dict, side: dict | None) -> tuple[float | None, float | None]:
    """(bytes/s, objects/s) of one build in one step: the scenario's fixture (bytes moved, objects)
    over the build's mean time. None where the time or the fixture size is unknown."""
    mean = ((side or {}).get("stats") or {}).get("mean")
    if not mean or mean <= 0:
        return None, None
    fx = sc.get("fixture") or {}
    nbytes, files = fx.get("bytes"), fx.get("files")
    return (nbytes / mean if nbytes else None), (files / mean if files else None)


def fmt_rate(x: float | None) -> str:
    """A rate with three significant figures or so: 1234 -> '1234', 95.31 -> '95.3', 0.512 -> '0.51'."""
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def fmt_mbps(bps: float | None) -> str:
    """bytes/s as MB/s (10^6 bytes, as warp and s3-benchmark print it)."""
    return fmt_rate(None if bps is None else bps / 1e6)


def _rate_change(base: float | None, new: float | None, fmt) -> str:
    if base is None or new is None:
        return "n/a"
    return f"{fmt(base)} → {fmt(new)}"


def verdict_rows(results: dict) -> list[tuple[str, list[str]]]:
    """(verdict, table row) per (scenario, step, contender), in the order of the run."""
    multi = len(results["builds"]) > 2
    out = []
    for row in step_rows(results):
        c = row["c"]
        notes = []
        if c.get("noisy"):
            notes.append("noisy")
        if c["verdict"] == "inconclusive" and c.get("mde") is not None:
            more = more_seconds(row["st"], c)
            need = (f", ~{c['runs_needed']} runs/build" + (f" (≈ {fmt_duration(more)} more)" if more else "")
                    + " to decide") if c.get("runs_needed") else ""
            notes.append(f"could detect ±{c['mde'] * 100:.0f}%{need}")
        if row["st"].get("check_differs"):
            notes.append("results differ")
        sides = row["st"].get("builds", {})
        base_bps, base_ops = throughput(row["sc"], sides.get(c["baseline"]))
        new_bps, new_ops = throughput(row["sc"], sides.get(c["contender"]))
        out.append((c["verdict"], [MARKERS[c["verdict"]], md_escape(row["scenario"]), md_escape(row["step"])]
                    + ([md_escape(c["contender"])] if multi else [])
                    + [fmt_pct(c["rel"]), _rate_change(base_bps, new_bps, fmt_mbps),
                       _rate_change(base_ops, new_ops, fmt_rate), fmt_ci(c), fmt_p(c["p_value"]),
                       c["verdict"], "; ".join(notes)]))
    return out


def verdict_table(results: dict, rows: list[list[str]]) -> str:
    multi = len(results["builds"]) > 2
    return tabulate(rows, headers=["", "Scenario", "Step"] + (["Build"] if multi else [])
                    + ["Time change", "MB/s", "objects/s", "95% CI", "p", "Verdict", "Note"], tablefmt="github",
                    disable_numparse=True)


def tables(results: dict) -> dict[str, str]:
    """The markdown tables every flavour is made of (tabulate, GitHub pipe format)."""
    def t(rows, headers, align=None):
        return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True, colalign=align)

    rows = step_rows(results)
    verdicts = verdict_table(results, [r for _, r in verdict_rows(results)])

    builds = t([[("**" + md_escape(b["label"]) + "** (baseline)") if i == 0 else md_escape(b["label"]),
                 md_escape(b["ref"]), f"`{b['sha'][:12]}`", b["kind"], b["source"],
                 "cached" if b["cached"] else f"built in {b['build_seconds']:.0f} s"]
                for i, b in enumerate(results["builds"])],
               ["Build", "Ref", "Commit", "Kind", "Source", "Binary"])

    details = t([[md_escape(sc["name"]), sc["fixture"]["size"], str(sc["fixture"]["count"]),
                  sc["fixture"]["kind"], str(sc["fixture"]["files"])] for sc in results["scenarios"]],
                ["Scenarios", "File Size", "File Count", "Kind", "Files"], ["left", "left", "left", "left", "left"])

    phrases = t([[md_escape(f"{row['step']} {row['scenario']}"), md_escape(row["c"]["phrase"])] for row in rows],
                ["Scenario", "Summary"], ["left", "left"])

    detail_rows, resource_rows = [], []
    for sc in results["scenarios"]:
        for st in sc["steps"]:
            present = [v["stats"] for v in st["builds"].values() if v["stats"]]
            fast = min(present, key=lambda x: x["mean"]) if present else None
            for label, b in st["builds"].items():
                s = b["stats"]
                if not s:
                    continue
                rel = s["mean"] / fast["mean"]
                rel_err = 0.0 if s is fast else rel * math.sqrt(
                    (s["stddev"] / s["mean"]) ** 2 + (fast["stddev"] / fast["mean"]) ** 2)
                detail_rows.append([md_escape(f"{st['name']} {sc['name']}"), md_escape(label),
                                    f"{s['mean']:.3f} ± {s['stddev']:.3f}", f"{s['median']:.3f}", f"{s['min']:.3f}",
                                    f"{s['max']:.3f}", f"{s['cv'] * 100:.1f}%", str(s["n"]),
                                    "1.00" if s is fast else f"{rel:.2f} ± {rel_err:.2f}"])
                bps, ops = throughput(sc, b)
                resource_rows.append([md_escape(f"{st['name']} {sc['name']}"), md_escape(label),
                                      fmt_mbps(bps), fmt_rate(ops), fmt_s(b.get("cpu_mean")),
                                      "n/a" if b.get("cpu_wall_ratio") is None else f"{b['cpu_wall_ratio']:.2f}",
                                      _fmt_rss(b.get("rss_kb"))])
    detailed = t(detail_rows, ["Scenario", "Command", "Mean [s]", "Median [s]", "Min [s]", "Max [s]", "cv",
                               "Runs", "Relative"],
                 ["left", "left", "right", "right", "right", "right", "right", "right", "right"])
    resources = t(resource_rows, ["Scenario", "Build", "MB/s", "objects/s", "CPU [s]", "CPU/wall", "Peak RSS"],
                  ["left", "left", "right", "right", "right", "right", "right"])
    checks = []
    for sc in results["scenarios"]:
        for st in sc["steps"]:
            vals = {k: v.get("check") for k, v in st["builds"].items() if v.get("check") is not None}
            if vals:
                checks.append({"scenario": sc["name"], "step": st["name"], "values": vals,
                               "differs": st.get("check_differs", False)})
    scoreboard = ""
    if results.get("scoreboard"):
        scoreboard = t([[md_escape(k), f"{v['geomean_vs_baseline']:.3f}", f"{v['vs_fastest']:.2f}x"]
                        for k, v in sorted(results["scoreboard"].items(), key=lambda kv: kv[1]["vs_fastest"])],
                       ["Build", "Geomean time vs baseline", "vs fastest (1.00x = fastest)"],
                       ["left", "right", "right"])
    return {"verdicts": verdicts, "builds": builds, "details": details, "phrases": phrases,
            "detailed": detailed, "resources": resources, "checks": checks, "scoreboard": scoreboard}
