"""The markdown views: the run summary (summary.md), the PR-comment flavour that always fits
GitHub's size limit, and the pairing of two saved runs."""
from __future__ import annotations

import math
import shlex
from typing import TYPE_CHECKING

from tabulate import tabulate

from ..results import Contrast, Results, Step
from .env import render as render_template
# the marker the bot finds its comment by, and the longest body GitHub takes: the bot's facts
from ..github import COMMENT_MARKER, MAX_BODY as GITHUB_COMMENT_LIMIT
from ..units import fmt_duration
from .explain import fmt_changes, markdown_parts, repo_note, request_note
from ..metrics import table
from .format import (METRIC_NAMES, fmt_ci, fmt_mbps, fmt_p, fmt_pct, fmt_rate, fmt_rss, fmt_s, md_code,
                     md_code_cell, md_escape)
from ..verdict import BY_SEVERITY, Verdict

if TYPE_CHECKING:  # compare computes (numpy, scipy); a view only reads what it computed
    from ..pairing import RunPairing


# ---- what the summary says about the run as a whole ----------------------------------------------
def what_changed(results: Results) -> list[str]:
    """One phrase per significant change on any metric, slower first: what a PR comment leads with."""
    multi = len(results.builds) > 2
    found = [(sc, st, c) for sc, st in results.steps() for c in st.all_contrasts() if c.verdict.moved]
    found.sort(key=lambda x: (x[2].verdict != Verdict.SLOWER, -abs(x[2].rel)))
    return [f"{c.verdict.marker} {md_escape(sc.name)} / {md_escape(st.name)}"
            + (f" ({md_escape(c.contender)})" if multi else "")
            + f": {METRIC_NAMES[c.metric]} {fmt_pct(c.rel)}" for sc, st, c in found]


def more_seconds(st: Step, c: Contrast) -> float | None:
    """Measuring time the runs still needed would take: (needed - done) runs of both builds."""
    need = c.runs_needed
    b, k = st.builds.get(c.baseline), st.builds.get(c.contender)
    if not need or not b or not k or not b.times or not k.times:
        return None
    done = min(len(b.times), len(k.times))
    per_pair = sum(b.times) / len(b.times) + sum(k.times) / len(k.times)
    return max(0, need - done) * per_pair


DECIDED = (Verdict.SLOWER, Verdict.FASTER, Verdict.SAME, Verdict.IDENTICAL,  # in the order the line names them
           Verdict.NOT_SUPPORTED)


def decision_line(results: Results) -> str | None:
    """The summary's first line: what the run decided on wall time and what it could not, in
    words, naming the steps that moved (up to three) and the ones left undecided (up to three)."""
    multi = len(results.builds) > 2

    def name(sc, st, c) -> str:
        return f"{md_escape(sc.name)} / {md_escape(st.name)}" + (f" ({md_escape(c.contender)})" if multi else "")

    comps = list(results.comparisons())
    judged = [x for x in comps if x[2].p_value is not None or x[2].verdict != Verdict.INCONCLUSIVE]
    once = len(comps) - len(judged)
    if not judged:
        return None
    what = "contrasts" if multi else "steps"
    decided = [x for x in judged if x[2].verdict in DECIDED]
    undecided = [x for x in judged if x[2].verdict not in DECIDED]
    parts = []
    for v in DECIDED:
        hits = [x for x in decided if x[2].verdict == v]
        if not hits:
            continue
        moved = ", ".join(f"{name(*x)} {fmt_pct(x[2].rel)}" for x in hits[:3]) if v.moved else ""
        more = f", +{len(hits) - 3} more" if moved and len(hits) > 3 else ""
        parts.append(f"{len(hits)} {v}" + (f" ({moved}{more})" if moved else ""))
    if undecided:
        head = f"**Decided {len(decided)} of {len(judged)} {what}**"
    else:
        head = f"**Decided all {len(judged)} {what}**" if len(judged) > 1 else f"**Decided the one {what[:-1]}**"
    head += " on wall time"
    line = head + (": " + ", ".join(parts) if parts else "") + "."
    if undecided:
        names = ", ".join(name(*x) for x in undecided[:3]) + (f", +{len(undecided) - 3} more" if len(undecided) > 3 else "")
        line += f" Could not decide {len(undecided)}: {names}."
    if once:
        line += f" {once} {'contrast' if once == 1 and multi else 'step' if once == 1 else what} ran once and cannot be judged."
    return line


def detection_line(results: Results) -> str | None:
    """The run's power in one sentence: on how many of its multi-run steps it could have detected a
    change of the threshold's size, and of twice that (from each contrast's detectable effect)."""
    t = results.settings.threshold
    mdes = [c.mde for _, _, c in results.comparisons() if c.p_value is not None]
    if not mdes:
        return None
    m = len(mdes)
    n1 = sum(1 for x in mdes if x is not None and x <= t)
    n2 = sum(1 for x in mdes if x is not None and x <= 2 * t)
    what = "contrasts" if len(results.builds) > 2 else "steps"
    return (f"This run could detect changes of ≥ {t * 100:.0f}% on {n1} of {m} {what}, "
            f"and of ≥ {2 * t * 100:.0f}% on {n2} of {m}.")


# ---- tables ----------------------------------------------------------------------------------------
def _table(rows, headers, align=None) -> str:
    """A GitHub pipe table; cells are preformatted text, never reparsed as numbers."""
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True, colalign=align)


def _rate_change(base: float | None, new: float | None, fmt) -> str:
    if base is None or new is None:
        return "n/a"
    return f"{fmt(base)} → {fmt(new)}"


def _notes(st: Step, c: Contrast) -> str:
    """What a reader should know beside the verdict: noise, what an inconclusive step could
    detect and what deciding it would take, builds that did different work."""
    notes = []
    if c.noisy:
        notes.append("noisy")
    if c.verdict == Verdict.INCONCLUSIVE and c.mde is not None:
        more = more_seconds(st, c)
        need = (f", ~{c.runs_needed} runs/build" + (f" (≈ {fmt_duration(more)} more)" if more else "")
                + " to decide") if c.runs_needed else ""
        notes.append(f"could detect ±{c.mde * 100:.0f}%{need}")
    if st.check_differs:
        notes.append("results differ")
    # an API's name is the results file's
    notes += [md_escape(n) for n in (request_note(st, c.contender), repo_note(st, c.baseline, c.contender)) if n]
    return "; ".join(notes)


def _metric_cell(c: Contrast | None) -> str:
    """A metric's verdict in one cell: marker and change, 'n/a' where the run could not measure it."""
    return "n/a" if c is None else f"{c.verdict.marker} {fmt_pct(c.rel)}"


def verdict_rows(results: Results) -> list[tuple[str, list[str]]]:
    """(verdict, table row) per (scenario, step, contender), in the order of the run: wall time's
    figures, then a verdict per other metric the run measured. The row's verdict (what a cut
    comment keeps longest) is its most severe across metrics."""
    multi = len(results.builds) > 2
    metrics = list(results.judged_metrics())
    out = []
    for sc, st, c in results.comparisons():
        base_bps, base_ops = sc.fixture.throughput(st.builds.get(c.baseline))
        new_bps, new_ops = sc.fixture.throughput(st.builds.get(c.contender))
        others = st.by_metric(c.contender)
        worst = min([c.verdict] + [o.verdict for o in others.values()], key=lambda v: v.severity)
        out.append((worst, [c.verdict.marker, md_escape(sc.name), md_escape(st.name)]
                    + ([md_escape(c.contender)] if multi else [])
                    + [fmt_pct(c.rel), _rate_change(base_bps, new_bps, fmt_mbps),
                       _rate_change(base_ops, new_ops, fmt_rate), fmt_ci(c), fmt_p(c.p_value),
                       c.verdict]
                    + [_metric_cell(others.get(m)) for m in metrics] + [_notes(st, c)]))
    return out


def verdict_table(results: Results, rows: list[list[str]]) -> str:
    multi = len(results.builds) > 2
    return _table(rows, ["", "Scenario", "Step"] + (["Build"] if multi else [])
                  + ["Time change", "MB/s", "objects/s", "95% CI", "p", "Verdict"]
                  + [METRIC_NAMES[m][0].upper() + METRIC_NAMES[m][1:] for m in results.judged_metrics()] + ["Note"])


def _cell(value) -> str:
    """A field of a results file in a table cell: escaped (md_escape), and blank where the file has
    none, as tabulate leaves a None."""
    return "" if value is None else md_escape(value)


def _builds_table(results: Results) -> str:
    """One row per build; a column for named variants' own flags and environment when a build has
    them (the same binary under two settings reads as what it is)."""
    variants = any(b.flags or b.env for b in results.builds)
    return _table([[("**" + md_escape(b.label) + "** (baseline)") if i == 0 else md_escape(b.label),
                    md_escape(b.ref), f"`{md_code_cell(b.sha[:12])}`", _cell(b.kind), _cell(b.source),
                    md_escape(b.toolchain or "n/a"),
                    "cached" if b.cached else f"built in {b.build_seconds:.0f} s"]
                   + ([md_escape(variant_words(b))] if variants else [])
                   for i, b in enumerate(results.builds)],
                  ["Build", "Ref", "Commit", "Kind", "Source", "Go", "Binary"] + (["Variant"] if variants else []))


def variant_words(b) -> str:
    """A variant's own settings: its flags, then its environment ('--numworkers 64; GOGC=200')."""
    return "; ".join(filter(None, (shlex.join(b.flags or ()), " ".join(f"{k}={v}" for k, v in (b.env or {}).items()))))


def _timing_tables(results: Results) -> tuple[str, str]:
    """Per step and build: the timings with hyperfine's 'Relative' column (vs the step's fastest
    build), and the resources (throughput, CPU, peak RSS)."""
    detail_rows, resource_rows = [], []
    for sc, st in results.steps():
        present = [v.stats for v in st.builds.values() if v.stats]
        fast = min(present, key=lambda x: x.mean) if present else None
        for label, b in st.builds.items():
            s = b.stats
            if not s:
                continue
            rel = s.mean / fast.mean
            rel_err = 0.0 if s is fast else rel * math.sqrt((s.stddev / s.mean) ** 2 + (fast.stddev / fast.mean) ** 2)
            name = md_escape(f"{st.name} {sc.name}")
            detail_rows.append([name, md_escape(label), f"{s.mean:.3f} ± {s.stddev:.3f}", f"{s.median:.3f}",
                                f"{s.min:.3f}", f"{s.max:.3f}", f"{s.cv * 100:.1f}%", str(s.n),
                                "1.00" if s is fast else f"{rel:.2f} ± {rel_err:.2f}"])
            bps, ops = sc.fixture.throughput(b)
            resource_rows.append([name, md_escape(label), fmt_mbps(bps), fmt_rate(ops), fmt_s(b.cpu_mean),
                                  "n/a" if b.cpu_wall_ratio is None else f"{b.cpu_wall_ratio:.2f}", fmt_rss(b.rss_kb)])
    detailed = _table(detail_rows, ["Scenario", "Command", "Mean [s]", "Median [s]", "Min [s]", "Max [s]", "cv",
                                    "Runs", "Relative"],
                      ["left", "left", "right", "right", "right", "right", "right", "right", "right"])
    resources = _table(resource_rows, ["Scenario", "Build", "MB/s", "objects/s", "CPU [s]", "CPU/wall", "Peak RSS"],
                       ["left", "left", "right", "right", "right", "right", "right"])
    return detailed, resources


def _checks(results: Results) -> list[dict]:
    """Steps with a result check: each build's value, and whether they differ. The values are
    shown in code spans only, so they come as a code span's text (md_code); names come raw, for
    the templates' `md` filter."""
    checks = []
    for sc, st in results.steps():
        vals = {k: md_code(v.check) for k, v in st.builds.items() if v.check is not None}
        if vals:
            checks.append({"scenario": sc.name, "step": st.name, "values": vals, "differs": st.check_differs})
    return checks


def _scoreboard_table(results: Results) -> str:
    if not results.scoreboard:
        return ""
    return _table([[md_escape(k), f"{v['geomean_vs_baseline']:.3f}", f"{v['vs_fastest']:.2f}x"]
                   for k, v in sorted(results.scoreboard.items(), key=lambda kv: kv[1]["vs_fastest"])],
                  ["Build", "Geomean time vs baseline", "vs fastest (1.00x = fastest)"], ["left", "right", "right"])


def tables(results: Results) -> dict:
    """The markdown tables every flavour is made of (tabulate, GitHub pipe format)."""
    details = _table([[md_escape(sc.name), _cell(sc.fixture.size), md_escape(sc.fixture.count),
                       _cell(sc.fixture.kind), md_escape(sc.fixture.files)] for sc in results.scenarios],
                     ["Scenarios", "File Size", "File Count", "Kind", "Files"], ["left"] * 5)
    phrases = _table([[md_escape(f"{st.name} {sc.name}"), md_escape(c.phrase())]
                      for sc, st, c in results.comparisons()], ["Scenario", "Summary"], ["left", "left"])
    detailed, resources = _timing_tables(results)
    return {"verdicts": verdict_table(results, [r for _, r in verdict_rows(results)]),
            "builds": _builds_table(results), "details": details, "phrases": phrases, "detailed": detailed,
            "resources": resources, "checks": _checks(results), "scoreboard": _scoreboard_table(results)}


# ---- the summary and the PR comment ------------------------------------------------------------------
def render_markdown(results: Results, flavour: str = "md") -> str:
    if flavour == "github":
        return render_github(results)
    return render_template("summary.md.j2", r=results, marker=COMMENT_MARKER, busy=results.environment.busy_warning(),
                           t=tables(results), counts=results.verdict_counts(), detection=detection_line(results),
                           decision=decision_line(results),
                           changed=what_changed(results), metrics=list(results.judged_metrics()),
                           probe_metrics=table().names_of("probe"),
                           thresholds={m: results.settings.criteria.threshold_for(m) for m in results.judged_metrics()},
                           x=markdown_parts(results))


def comment_size(text: str) -> int:
    """Size as counted against GitHub's limit, conservatively: UTF-8 bytes (never fewer than the
    characters or UTF-16 units GitHub might count; every emoji marker is 4)."""
    return len(text.encode("utf-8"))


def render_github(results: Results, limit: int = GITHUB_COMMENT_LIMIT, report_url: str | None = None) -> str:
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
    x = markdown_parts(results)
    if x["requests"]:
        sections.append(("S3 requests per build (counted by the server)", x["requests"]))
    if x["repo"]:
        sections.append(("IPFS repo after each step", x["repo"]))
    sections.append(("Builds", t["builds"]))
    sections.append(("Scenarios", t["details"]))
    rows = verdict_rows(results)
    busy, counts = results.environment.busy_warning(), results.verdict_counts()
    changed = what_changed(results)

    def render(keep_sections: int, keep_rows: int | None) -> str:
        if keep_rows is None:
            shown, hidden = [r for _, r in rows], []
        else:
            order = sorted(range(len(rows)), key=lambda i: (rows[i][0].severity, i))  # slower kept longest
            keep = sorted(order[:keep_rows])
            shown = [rows[i][1] for i in keep]
            hidden = [rows[i][0] for i in order[keep_rows:]]
        hidden_counts = {v: hidden.count(v) for v in BY_SEVERITY if hidden.count(v)}
        return render_template("github.md.j2", r=results, marker=COMMENT_MARKER, busy=busy, counts=counts, t=t,
                               changed=changed, metrics=list(results.judged_metrics()), decision=decision_line(results),
                               probe_metrics=table().names_of("probe"),
                               verdicts=verdict_table(results, shown), hidden_rows=len(hidden),
                               hidden_counts=hidden_counts, sections=sections[:keep_sections],
                               omitted=[name for name, _ in sections[keep_sections:]], report_url=report_url, x=x)

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


# ---- two saved runs compared ---------------------------------------------------------------------------
def render_pairing_md(cmp: RunPairing, old_name: str = "OLD", new_name: str = "NEW") -> str:
    md = md_escape
    lines = [f"# refbench compare: {md(old_name)} ({md(cmp.old_created)}) → {md(new_name)} "
             f"({md(cmp.new_created)})", ""]
    c = cmp.counts
    lines.append(f"**{c[Verdict.SLOWER]} slower · {c[Verdict.FASTER]} faster · {c[Verdict.SAME]} no significant "
                 f"change · {c[Verdict.INCONCLUSIVE]} inconclusive** (new vs old per build and step; flagged when "
                 f"significant at α = {cmp.alpha} and beyond ±{cmp.threshold * 100:.1f}%)")
    lines.append("")
    for w in cmp.warnings:
        lines.append(f"> ⚠️ {md(w)}")
    if cmp.warnings:
        lines.append("")
    if cmp.rows:
        same_label = all(r.old_build == r.new_build for r in cmp.rows)
        table = []
        for r in cmp.rows:
            cc = r.contrast
            build = md(r.old_build) if same_label and r.old_build == r.new_build \
                else f"{md(r.old_build)} → {md(r.new_build)}"
            notes = r.notes + tuple(f"{METRIC_NAMES[m.metric]} {fmt_pct(m.rel)} {m.verdict}"
                                    for m in r.metric_contrasts if m.verdict.moved) \
                + ((f"requests differ: {fmt_changes(r.request_changes)}",) if r.request_changes else ())
            table.append([cc.verdict.marker, md(r.scenario), md(r.step), build,
                          f"{r.old_mean:.3f}", f"{r.new_mean:.3f}", fmt_pct(cc.rel),
                          fmt_ci(cc), fmt_p(cc.p_value), cc.verdict, md("; ".join(notes))])
        lines.append(_table(table, ["", "Scenario", "Step", "Build", "Old mean [s]", "New mean [s]", "Change",
                                    "95% CI", "p", "Verdict", "Note"], ["left"] * 4 + ["right"] * 5 + ["left"] * 2))
    else:
        lines.append("*No step and build appears in both files.*")
    lines.append("")
    for title, items in ((f"Steps only in {old_name}", cmp.only_old), (f"Steps only in {new_name}", cmp.only_new),
                         (f"Builds only in {old_name}", cmp.builds_only_old),
                         (f"Builds only in {new_name}", cmp.builds_only_new)):
        if items:
            lines.append(f"**{md(title)}:** " + ", ".join(md(i) for i in items))
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"
