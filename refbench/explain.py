"""Why a step changed, measured beside its times: the observer the runner calls around each
build's untimed run and at the end of each step.

- S3 on the embedded MinIO: the requests of each build's untimed run (accounting.py);
- IPFS: each repo's block count and size estimate after that run (`ipfs repo stat`);
- a differential CPU profile (profile.py) of every step whose wall or CPU verdict is slower or
  faster, or whose daemon moved enough (`moved`: the rule and its reasons), or of every step
  with --profile; none with --no-profile.

The runner knows nothing of these: it calls `wants_run`, `around_run` and `step_done`, and stores
what `step_done` returns in the step's record. Seconds spent here are kept by kind in `seconds`.

The views print what the run stored through render/explain.py (requests, repo counters, moved
functions, the differential flame graph as inline SVG): a view of its own, so that no view imports
this module, which runs commands, and this one imports no view.
"""
from __future__ import annotations

import contextlib
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


def moved(contrasts, criteria: Criteria | None = None) -> bool:
    """Whether the step gets a profile, by the rule above (a contrast without a metric is a
    wall one; thresholds are `criteria`'s, the defaults without it)."""
    crit = criteria or Criteria()
    comps = [c for c in contrasts if Verdict(c.verdict).moved]
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
                  contrasts, means: list[float | None], execute: Callable[[list[str], str], None],
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
        wanted = self.profile_mode == "on" or (self.profile_mode == "auto" and moved(contrasts, self.criteria))
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
