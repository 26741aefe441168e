"""How the views print what explain.Explainer stored in a step's record: requests, repo counters,
moved functions, the differential flame graph as inline SVG. A view: it reads the results and
computes no statistic; apart from refbench.explain, which measures (it runs the untimed commands,
perf and pprof), so a view imports nothing that does.
"""
from __future__ import annotations

import html

from tabulate import tabulate

from ..results import FunctionShift, Profile, RequestChange, Requests, Results, Step
from .format import fmt_bytes, fmt_seconds, md_code, md_escape

_BYTES = ("bytes received", "bytes sent")


def fmt_count(name: str, n: int) -> str:
    return fmt_bytes(n) if name in _BYTES else str(n)


def fmt_change(c: RequestChange) -> str:
    """'PutObject 200 → 400 (×2.00)'; a counter that was 0 has no factor."""
    factor = f" (×{c.factor:.2f})" if c.factor is not None else ""
    return f"{c.name} {fmt_count(c.name, c.baseline_value)} → {fmt_count(c.name, c.value)}{factor}"


def fmt_changes(changes, limit: int = 3) -> str:
    shown = [fmt_change(c) for c in changes[:limit]]
    more = len(changes) - limit
    return ", ".join(shown) + (f", +{more} more" if more > 0 else "")


def fmt_apis(r: Requests) -> str:
    return ", ".join(f"{k} {v}" for k, v in r.by_api.items()) or "none"


def fmt_shift(f: FunctionShift) -> str:
    """'main.burnCPU +38.1 pts' (the function's share of the build's CPU samples, self time)."""
    return f"{f.function} {f.points:+.1f} pts"


def request_note(st: Step, contender: str) -> str | None:
    """The verdict row's note: what this contender asked for differently."""
    mine = [c for c in (st.request_changes or ()) if c.contender == contender]
    return f"requests differ: {fmt_changes(mine, 2)}" if mine else None


def repo_note(st: Step, baseline: str, contender: str) -> str | None:
    repo = st.repo or {}
    a, b = repo.get(baseline), repo.get(contender)
    if a is None or b is None or a.num_objects == b.num_objects:
        return None
    pct = f" ({(b.num_objects / a.num_objects - 1) * 100:+.1f}%)" if a.num_objects else ""
    return f"blocks {a.num_objects} → {b.num_objects}{pct}"


def _table(rows, headers) -> str:
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def server_cpu_per_run(st: Step, label: str) -> str:
    """The embedded MinIO's mean CPU per timed run of the build (`server-cpu`), "n/a" unmeasured."""
    b = st.builds.get(label)
    v = b.values("server-cpu") if b is not None else None
    return "n/a" if not v else fmt_seconds(sum(v) / len(v))


def markdown_parts(results: Results) -> dict:
    """The markdown blocks: `facts` (one line per step whose requests or block counts differ),
    `functions` (the five functions per profiled step), `requests` and `repo` tables, `notes`."""
    facts, functions, req_rows, repo_rows = [], [], [], []
    base = results.baseline
    for sc, st in results.steps():
        where = md_escape(f"{sc.name} / {st.name}")
        for lab in results.labels[1:]:
            mine = [c for c in (st.request_changes or ()) if c.contender == lab]
            if mine:
                facts.append(f"**{where}**: {md_escape(lab)} made different requests than {md_escape(base)}: "
                             f"{md_escape(fmt_changes(mine, 6))}")
            blocks = repo_note(st, base, lab)
            if blocks:
                facts.append(f"**{where}**: {md_escape(lab)} stores different blocks: {blocks}")
        for p in st.profiles or ():
            if p.top:
                functions.append(f"**{where}**{' (kubo pprof)' if p.source == 'pprof' else ''}, "
                                 f"{md_escape(p.contender)} vs {md_escape(p.baseline)} "
                                 f"({p.samples.get(p.baseline, 0)} / {p.samples.get(p.contender, 0)} samples, "
                                 f"{p.repeats} run{'s' if p.repeats != 1 else ''} each): "
                                 + ", ".join(f"`{md_code(fmt_shift(f))}`" for f in p.top)
                                 + (f" ({md_escape(p.note)})" if p.note else ""))
        if st.profile_note:  # why perf's view is missing (kubo's pprof view may still be there)
            functions.append(f"**{where}**: {md_escape(st.profile_note)}")
        for lab, r in (st.requests or {}).items():
            req_rows.append([md_escape(f"{st.name} {sc.name}"), md_escape(lab), md_escape(fmt_apis(r)),
                             str(r.total), fmt_bytes(r.received_bytes), fmt_bytes(r.sent_bytes),
                             f"{r.errors_4xx} / {r.errors_5xx} / {r.canceled}",
                             "n/a" if r.server_cpu is None else fmt_seconds(r.server_cpu),
                             server_cpu_per_run(st, lab)])
        for lab, s in (st.repo or {}).items():
            repo_rows.append([md_escape(f"{st.name} {sc.name}"), md_escape(lab), str(s.num_objects),
                              "n/a" if s.repo_size_estimate is None else f"≈ {fmt_bytes(s.repo_size_estimate)}"])
    return {"facts": facts, "functions": functions, "notes": list(results.explain_notes or ()),
            "requests": _table(req_rows, ["Scenario", "Build", "Requests by API", "Total", "Received", "Sent",
                                          "4xx / 5xx / canceled", "Server CPU (context)",
                                          "Server CPU per timed run (mean)"]) if req_rows else "",
            "repo": _table(repo_rows, ["Scenario", "Build", "Blocks (NumObjects, exact)",
                                       "Repo size (RepoSize, kubo's estimate)"]) if repo_rows else ""}


# ---- the differential flame graph ---------------------------------------------------------------
WIDTH, ROW, MIN_WIDTH = 1100, 16, 1.0  # px; frames narrower than MIN_WIDTH px are left out
FONT = "font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:11px"


def _tree(stacks):
    """Folded stacks -> nested {frame: [baseline samples, contender samples, children]}."""
    root = [0, 0, {}]
    for stack, a, b in stacks:
        node = root
        node[0] += a
        node[1] += b
        for frame in stack.split(";"):
            node = node[2].setdefault(frame, [0, 0, {}])
            node[0] += a
            node[1] += b
    return root


def _colour(delta: float) -> str:
    """Red where the frame's share grew, blue where it shrank, grey-white where it stayed."""
    k = min(1.0, abs(delta) / 0.10)  # 10 points or more: full colour
    if delta >= 0:
        return f"rgb(255,{int(235 - 180 * k)},{int(225 - 190 * k)})"
    return f"rgb({int(225 - 190 * k)},{int(235 - 120 * k)},255)"


def flame_svg(p: Profile) -> str:
    """The contender's call stacks (root on top), frame widths its share of samples, coloured by the change of
    each frame's share against the baseline (inferno-diff-folded's reading). Hover: the numbers."""
    root = _tree(p.stacks)
    ta, tb = root[0] or 1, root[1] or 1
    rects, depth_max = [], 0

    def walk(children, x0, depth):
        nonlocal depth_max
        x = x0
        for name, (a, b, kids) in sorted(children.items()):
            w = b / tb * WIDTH
            if w >= MIN_WIDTH:
                depth_max = max(depth_max, depth)
                delta = b / tb - a / ta
                rects.append((x, depth, w, name, a / ta, b / tb, delta))
                walk(kids, x, depth + 1)
            x += w

    walk(root[2], 0.0, 0)
    height = (depth_max + 1) * ROW + 4
    out = [f'<svg class="chart flame" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
           f'width="{WIDTH}" height="{height}" role="img" aria-label="differential flame graph: '
           f'{html.escape(p.contender)} vs {html.escape(p.baseline)}">']
    for x, depth, w, name, sa, sb, delta in rects:
        y = depth * ROW  # an icicle: the process on top, so the frames that differ are seen first
        title = (f"{name}\n{p.baseline}: {sa * 100:.1f}% · {p.contender}: {sb * 100:.1f}% "
                 f"({delta * 100:+.1f} pts)")
        label = name if len(name) * 6.6 < w - 4 else (name[:max(0, int((w - 4) / 6.6) - 1)] + "…" if w > 30 else "")
        out.append(f'<g class="frame"><title>{html.escape(title)}</title>'
                   f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{ROW - 1}" fill="{_colour(delta)}" '
                   f'stroke="#fff" stroke-width="0.5"/>'
                   + (f'<text x="{x + 2:.1f}" y="{y + ROW - 5}" style="{FONT}">{html.escape(label)}</text>' if label else "")
                   + "</g>")
    out.append("</svg>")
    return "".join(out)
