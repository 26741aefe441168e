"""Why a step changed, measured beside its times: the observer the runner calls around each
build's untimed run and at the end of each step.

- S3 on the embedded MinIO: the requests of each build's untimed run (accounting.py);
- IPFS: each repo's block count and size estimate after that run (`ipfs repo stat`);
- a differential CPU profile (profile.py) of every step whose wall or CPU verdict is slower or
  faster, or whose daemon moved enough (`moved`: the rule and its reasons), or of every step
  with --profile; none with --no-profile.

The runner knows nothing of these: it calls `wants_run`, `around_run` and `step_done`, and stores
what `step_done` returns in the step's record. Seconds spent here are kept by kind in `seconds`.

The one explain module: the views (render/markdown.py, render/html.py) print what the run stored
with the formatters at the end (requests, repo counters, moved functions, the differential flame
graph as inline SVG); those compute no statistic.
"""
from __future__ import annotations

import contextlib
import html
import dataclasses
import logging
import re
import shlex
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Iterator

from . import accounting, profile, results as rs
from .render.format import fmt_bytes, fmt_seconds, md_code, md_escape
from .results import FunctionShift, Profile, RequestChange, Requests, Results, Step
from .errors import RunError
from .figures import Criteria
from .verdict import DAEMON_METRICS, Verdict

log = logging.getLogger(__name__)

# What makes a step worth a CPU profile (issue 36). A profile shows where CPU time went, so:
# - the client's wall or CPU time moved (slower/faster): as before the daemon's metrics existed;
# - the daemon's CPU moved past its threshold (|change| >= --metric-threshold's, 5% by default):
#   its own profile (perf -p on it, kubo's /debug/pprof/profile) is what explains that;
# - the daemon's memory, writes or allocations moved past their threshold AND the step's wall or
#   daemon CPU moved too: alone they are not a profile's business. Allocations are nearly
#   deterministic, so a 1% change is significant (slower) on nearly every step of a contender
#   that allocates a little differently, and profiling each such step cost the kubo test
#   fixture 208 s of its 249 s; a CPU profile cannot say where bytes were held or written.
# A daemon verdict inside its threshold (significant, but small) is never a reason on its own.
PROFILED_METRICS = ("wall", "cpu")
DAEMON_CPU = "daemon-cpu"
DAEMON_ONLY_WITH_TIME = tuple(m for m in DAEMON_METRICS if m != DAEMON_CPU)


def moved(comparisons, criteria: Criteria | None = None) -> bool:
    """Whether the step gets a profile, by the rule above (a comparison without a metric is a
    wall one; thresholds are `criteria`'s, the defaults without it)."""
    crit = criteria or Criteria()
    comps = [c for c in comparisons if Verdict(c.verdict).moved]
    metric = lambda c: getattr(c, "metric", "wall")  # noqa: E731
    past = lambda c: abs(c.rel) >= crit.threshold_for(metric(c))  # noqa: E731
    if any(metric(c) in PROFILED_METRICS for c in comps):
        return True
    if any(metric(c) == DAEMON_CPU and past(c) for c in comps):
        return True
    daemon_cpu_moved = any(metric(c) == DAEMON_CPU for c in comps)  # wall and cpu returned above
    return daemon_cpu_moved and any(metric(c) in DAEMON_ONLY_WITH_TIME and past(c) for c in comps)


class Explainer:
    def __init__(self, backend, workdir: Path, profile_mode: str = "auto", perf: str | None = None,
                 perf_ok: bool | None = None, perf_why: str = "", criteria: Criteria | None = None):
        self.backend = backend
        self.criteria = criteria  # the run's thresholds, which decide what moved enough to profile
        self.workdir = workdir
        self.profile_mode = profile_mode
        self.seconds = {"accounting": 0.0, "profile": 0.0}
        self.notes: list[str] = []
        self.endpoint = None
        if backend.kind == "s3":
            server = getattr(backend, "server", None)
            if server is not None and getattr(server, "metrics_public", False):
                self.endpoint = server.endpoint
            else:
                self.notes.append(accounting.BUCKET_NOTE)
        self.perf = None
        if profile_mode != "off":
            if perf_ok is None:
                perf_ok, perf_why = profile.perf_status(perf)
            self.perf = (perf or profile.find_perf()) if perf_ok else None
            self.perf_why = perf_why
        self._requests: dict[str, rs.Requests] = {}
        self._repo: dict[str, rs.RepoStat] = {}
        self._perf_note_said = False

    # ---- the untimed run of each build -------------------------------------------------------
    def wants_run(self) -> bool:
        """Whether every step needs one untimed run per build (it counts as the first warm-up)."""
        return self.endpoint is not None or self.backend.kind == "ipfs"

    @contextlib.contextmanager
    def around_run(self, label: str) -> Iterator[None]:
        """Around one build's untimed command (its prepare already done): the server's counters
        before and after; the repo's counters after."""
        before = cpu0 = None
        minio = getattr(self.backend, "server", None)  # the embedded MinIO, whose CPU time is context
        if self.endpoint:
            t0 = time.monotonic()
            before = accounting.settled(self.endpoint)
            cpu0 = minio.cpu_seconds() if minio is not None else None
            self.seconds["accounting"] += time.monotonic() - t0
        yield
        t0 = time.monotonic()
        if before is not None:
            cpu1 = minio.cpu_seconds() if minio is not None else None
            self._requests[label] = accounting.server_cpu(accounting.delta(before, accounting.settled(self.endpoint)),
                                                          cpu0, cpu1)
        if self.backend.kind == "ipfs":
            stat = self.backend.repo_stat(label)
            if stat and isinstance(stat.get("NumObjects"), int):
                size = stat.get("RepoSize")
                self._repo[label] = rs.RepoStat(num_objects=stat["NumObjects"],
                                                repo_size_estimate=size if isinstance(size, int) else None)
        self.seconds["accounting"] += time.monotonic() - t0

    # ---- the end of a step -------------------------------------------------------------------
    def step_done(self, labels: list[str], binaries: list[str], cmds: list[str], preps: list[str | None],
                  comparisons, means: list[float | None], execute: Callable[[list[str], str], None],
                  where: str) -> dict:
        """The step's record fields: requests, repo counters, profiles (see rs.Step)."""
        out: dict = {}
        if self._requests:
            reqs = {lab: self._requests[lab] for lab in labels if lab in self._requests}
            out["requests"] = MappingProxyType(reqs)
            out["request_changes"] = accounting.step_changes(reqs, labels)
        if self._repo:
            out["repo"] = MappingProxyType({lab: self._repo[lab] for lab in labels if lab in self._repo})
        self._requests, self._repo = {}, {}
        wanted = self.profile_mode == "on" or (self.profile_mode == "auto" and moved(comparisons, self.criteria))
        if wanted:
            t0 = time.monotonic()
            try:
                out.update(self.profiles(labels, binaries, cmds, preps, means, execute, where))
            except RunError as e:  # a profile is extra information: its failure never ends the run
                log.warning("%s", e)
                out["profile_note"] = f"no profile: {e}"
            self.seconds["profile"] += time.monotonic() - t0
        return out

    def profiles(self, labels, binaries, cmds, preps, means, execute, where) -> dict:
        """perf's differential profile of the step, and for kubo its own pprof view beside it (which
        needs no perf). The step's `profile_note` says why perf's view is missing."""
        repeats = max(profile.repeats_for(m) for m in means)
        out: dict = {}
        found: list[rs.Profile] = []
        if self.perf is None:
            if not self._perf_note_said:
                self.notes.append(self.perf_why)
                self._perf_note_said = True
            out["profile_note"] = self.perf_why
        else:
            found += self._perf(labels, binaries, cmds, preps, repeats, execute, where)
        if self.backend.kind == "ipfs":
            try:
                found += self._pprof(labels, binaries, cmds, preps, repeats, execute, where,
                                     profile.daemon_pprof_seconds(means))
            except (RunError, OSError, RuntimeError, subprocess.SubprocessError) as e:  # perf's view stays
                log.warning("%s: no pprof view: %s", where, e)
                out["profile_note"] = "; ".join(filter(None, (out.get("profile_note"), f"no pprof view: {e}")))
        if found:
            out["profiles"] = tuple(found)
        return out

    def _perf(self, labels, binaries, cmds, preps, repeats, execute, where) -> list[rs.Profile]:
        stripped = [lab for lab, b in zip(labels, binaries) if profile.has_symbols(b) is False]
        folded: dict[str, Counter] = {}
        for k in range(repeats):  # builds alternate, as in the timed runs
            for lab, cmd, prep in zip(labels, cmds, preps):
                self._prepare(prep, lab, execute, where)
                data = self.workdir / f"perf-{lab.replace('/', '_')}-{k}.data"
                server = getattr(self.backend, "server_pid", lambda _: None)(lab)  # kubo's online daemon
                got = profile.record(self.perf, cmd, data, execute, f"{where}: profiled run of {lab}", server)
                folded[lab] = profile.add([folded.get(lab, Counter()), got])
        note = (f"no symbols in {', '.join(stripped)}'s binary (built with -s -w): its functions cannot be named"
                if stripped else None)
        return [profile.differential(labels[0], lab, folded, repeats, note) for lab in labels[1:]]

    def _pprof(self, labels, binaries, cmds, preps, repeats, execute, where, seconds: int = 1) -> list[rs.Profile]:
        """Each build's command again, every ipfs process with IPFS_PROF in a directory of its own
        (profile.write_pprof_shim), and the build's daemon's own profile around it where one runs
        (profile.daemon_pprof); the profiles merged and folded by `go tool pprof`."""
        api = getattr(self.backend, "daemon_api", lambda _: None)
        prefix = getattr(self.backend, "command_prefix", tuple)()
        go = shutil.which("go")
        if go is None:
            raise RuntimeError("go not found (go tool pprof reads kubo's profiles)")
        dirs = {lab: pprof_dir(self.workdir, i, lab) for i, lab in enumerate(labels)}
        try:
            shimmed = [shim_command(cmd, binary, profile.write_pprof_shim(binary, dirs[lab]))
                       for lab, binary, cmd in zip(labels, binaries, cmds)]
            for k in range(repeats):
                for lab, cmd, prep in zip(labels, shimmed, preps):
                    self._prepare(prep, lab, execute, where)
                    with profile.daemon_pprof(prefix, api(lab), seconds, dirs[lab]):
                        execute(["sh", "-c", cmd], f"{where}: pprof run of {lab}")
            folded = {lab: profile.add([profile.pprof_folded(go, binary, profile.pprof_files(dirs[lab])),
                                        profile.daemon_pprof_folded(go, binary, dirs[lab])])
                      for lab, binary in zip(labels, binaries)}
        finally:
            for d in dirs.values():
                shutil.rmtree(d, ignore_errors=True)
        return [dataclasses.replace(profile.differential(labels[0], lab, folded, repeats), source="pprof")
                for lab in labels[1:]]

    @staticmethod
    def _prepare(prep, lab, execute, where) -> None:
        if prep:
            execute(["sh", "-c", prep], f"{where}: profiled run of {lab} (prepare)")


def pprof_dir(workdir: Path, index: int, label: str) -> Path:
    """A build's pprof directory: its place and a label made of safe characters only, since a
    label may hold anything ("v1.0.0 #2" for an A/A's second build) and the path goes into a shell
    command (shim_command quotes it too)."""
    return workdir / f"pprof-{index}-{re.sub(r'[^A-Za-z0-9._-]', '_', label)}"


def shim_command(cmd: str, binary: str, shim: Path) -> str:
    """`cmd` (a shell command) with the build's binary replaced by its pprof shim, quoted: a
    shim's path with a space or `#` was split or cut off by sh ("Permission denied"). The binary
    is looked for as the command has it, quoted where it needs quoting (a quoted path's
    replacement inside its quotes was left bare, review35p P4)."""
    quoted = shlex.quote(binary)
    return cmd.replace(quoted if quoted in cmd else binary, shlex.quote(str(shim)))


# ---- how the views print it --------------------------------------------------------------------
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
    from tabulate import tabulate
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
