"""The results file, typed: frozen dataclasses for everything results.json holds, read and written
here and nowhere else.

Why one module: the summary, the PR comment, HTML, CSV, compare, merge, nightly and bisect all read
the same document. When each read raw keys, each had its own idea of which keys are optional, and a
malformed file ended in a KeyError deep inside a view. Now `Results.from_json` checks the shape and
fills the defaults of older files once, and every consumer reads typed fields.

The mapping is mechanical on purpose: every JSON key is an attribute of the same name, lists are
tuples, dicts keyed by build label are read-only mappings. `to_json` writes the keys in the order
refbench has always written them, so a file read and written again is the same document.
"""
from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import time
from collections import abc
from dataclasses import MISSING, dataclass, field, fields, replace
from functools import cache
from pathlib import Path
from types import MappingProxyType, UnionType
from typing import Any, Callable, Iterator, Mapping, Union, get_args, get_origin, get_type_hints

from . import __version__
from .errors import RefbenchError
from .figures import Contrast, Criteria, Summary, criteria, summarize
from .metrics import table
from .verdict import ALPHA, NOISE_LIMIT, THRESHOLD, Verdict, count

SCHEMA = "refbench/results"
SCHEMA_VERSION = 2  # 2: every contrast names its metric (wall, cpu, memory, instructions)
_EMPTY: Mapping = MappingProxyType({})


class _Shape(Exception):
    """What is wrong with a document, as 'where: what' (raised while reading, reported once)."""


def _kind_name(kind) -> str:
    return kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)


def _wrong(value, kind, where: str) -> _Shape:
    return _Shape(f"{where} should be {_kind_name(kind)}, not {type(value).__name__}")


def _check(value, kind, where: str):
    if kind is not None and value is not None and not isinstance(value, kind):
        raise _wrong(value, kind, where)
    return value


def _key(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


# ---- reading and writing values ------------------------------------------------------------------
def frozen(value):
    """JSON value -> immutable: lists become tuples, objects read-only mappings (free-form parts
    such as `backend` or `resources`, whose keys refbench does not interpret)."""
    if isinstance(value, list):
        return tuple(frozen(v) for v in value)
    if isinstance(value, dict):
        return MappingProxyType({k: frozen(v) for k, v in value.items()})
    return value


def _plain(value):
    """The inverse of _frozen, and the JSON form of any typed value."""
    if hasattr(value, "to_json"):
        return value.to_json()
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _f(kind=None, *, default=MISSING, read: Callable | None = None, omit_none: bool = False):
    """A field of a results dataclass: its JSON kind (checked on reading), an optional reader for
    nested values, and whether a None value is left out of the file (keys that only some files
    have: a tree fixture's shape, a sharded run's shard, a merged file's hosts)."""
    meta = {"kind": kind, "read": read, "omit_none": omit_none}
    if default is MISSING:
        return field(metadata=meta)
    if isinstance(default, MappingProxyType):  # dataclasses refuse it as a plain default (unhashable)
        return field(default_factory=lambda: default, metadata=meta)
    return field(default=default, metadata=meta)


class _Doc:
    """from_json / to_json over the dataclass fields, in field order."""

    @classmethod
    def read(cls, doc, where: str):
        _check(doc, dict, where or "the file")
        kw = {}
        for f in fields(cls):
            if f.name not in doc or doc[f.name] is None:
                if f.default is MISSING and f.default_factory is MISSING:
                    raise _Shape(f"{where or 'the file'} has no {f.name!r}")
                continue
            value = _check(doc[f.name], f.metadata.get("kind"), _key(where, f.name))
            read = f.metadata.get("read") or _number_mappings(cls).get(f.name)
            kw[f.name] = read(value, _key(where, f.name)) if read else frozen(value)
        return cls._finish(kw, doc, where)

    @classmethod
    def _finish(cls, kw: dict, doc: dict, where: str):
        return cls(**kw)

    def to_json(self) -> dict:
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.metadata.get("omit_none"):
                continue
            out[f.name] = _plain(value)
        return out


def _tuple_of(read_one) -> Callable:
    def read(value, where):
        _check(value, list, where)
        return tuple(read_one(v, f"{where}[{i}]") for i, v in enumerate(value))
    return read


def _name(key, where: str) -> str:
    """A mapping's key: a name, never null (which `_check` lets through as an absent value). A
    file's keys are strings; a document built in Python need not be."""
    if not isinstance(key, str):
        raise _wrong(key, str, f"{where} key {key!r}")
    return key


def _by_label(read_one) -> Callable:
    """A JSON object keyed by name (a build label, an API name, a metric), each value read by
    `read_one`: a read-only mapping."""
    def read(value, where):
        _check(value, dict, where)
        return MappingProxyType({_name(k, where): read_one(v, f"{where}[{k!r}]") for k, v in value.items()})
    return read


def _number(kind) -> Callable:
    """A reader of one number of `kind`. Unlike a scalar field's check, null and bool are refused
    too: True is an int to Python, and a count that is not a number must not reach a view, which
    prints it as it is (explain.py's f"{n}" of a profile's samples)."""
    def read(value, where):
        if value is None or isinstance(value, bool):
            raise _wrong(value, kind, where)
        return _check(value, kind, where)
    return read


# a mapping's value annotation -> what its values are checked as: a float measure (seconds, a
# threshold) may be written as a whole number, a count may not be written as a fraction
_NUMBERS = {int: int, float: (int, float)}


def _mapping_values(hint):
    """V of a field annotated Mapping[K, V] (or Mapping[K, V] | None), else None."""
    for t in get_args(hint) if get_origin(hint) in (Union, UnionType) else (hint,):
        if get_origin(t) is abc.Mapping and len(get_args(t)) == 2:
            return get_args(t)[1]
    return None


@cache
def _number_mappings(cls) -> dict[str, Callable]:
    """The readers of `cls`'s fields annotated as a Mapping of numbers (Mapping[str, int] or
    Mapping[str, float]), each key and value checked: found from the annotations so that a new
    such field is checked without anyone remembering to. `kind=dict` alone checked only the
    object: a file written by a pull request's job could put text where a count belongs, and the
    summary and PR comment print counts unescaped. Mappings of text (a variant's `env`) and
    free-form parts (`backend`, `resources`, `cpus`) are left as they are: the views escape text."""
    hints = get_type_hints(cls)
    return {f.name: _by_label(_number(_NUMBERS[values])) for f in fields(cls)
            if (values := _mapping_values(hints[f.name])) in _NUMBERS}


# ---- the parts -----------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Target(_Doc):
    name: str = _f(str)
    repo: str | None = _f(str, default=None)
    source: str | None = _f(str, default=None)
    backend: str | None = _f(str, default=None)


@dataclass(frozen=True, kw_only=True)
class Build(_Doc):
    label: str = _f(str)
    ref: str | None = _f(str, default=None)
    kind: str | None = _f(str, default=None)
    sha: str | None = _f(str, default=None)
    display: str | None = _f(str, default=None)
    version: str | None = _f(str, default=None)
    binary: str | None = _f(str, default=None)
    source: str | None = _f(str, default=None)
    toolchain: str | None = _f(str, default=None)
    cached: bool = _f(bool, default=False)
    build_seconds: float | None = _f((int, float), default=None)
    binary_sha256: str | None = _f(str, default=None)
    # a named variant's own target flags and environment (variants.py); absent where none were set
    flags: tuple[str, ...] | None = _f(list, default=None, omit_none=True)
    env: Mapping[str, str] | None = _f(dict, default=None, omit_none=True)
    # an implementation's registry (kind 'implementation', implementations.py); absent for a ref's build,
    # and in files written before implementations existed: the default reads them as refs' builds
    registry: str | None = _f(str, default=None, omit_none=True)


def _read_summary(value, where) -> Summary:
    _check(value, dict, where)
    try:
        return Summary(**{f.name: value[f.name] for f in fields(Summary)})
    except KeyError as e:
        raise _Shape(f"{where} has no {e.args[0]!r}") from None


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 9)


def metric_values(metric: str, raw: Mapping[str, object]) -> tuple[float, ...] | None:
    """One metric's figure of every run, or None unless every run has one: what a contrast of that
    metric reads, in a run (rounds.BuildSamples) and from a saved one (Samples) alike. `raw`: the
    per-run figures by metric name (wall's the runs' times: every other metric has one a run or none)."""
    v = raw.get(metric) or ()
    times = raw.get("wall") or ()
    if not v or len(v) != len(times) or any(x is None for x in v):
        return None
    return tuple(float(x) for x in v)


def contrastable(x, y) -> bool:
    """Whether two builds' figures of a metric can be compared (on the log scale the statistics
    use): no zero among them. A daemon's writes can be 0 in some runs, or in every run of both (a
    daemon that wrote nothing, or only to a tmpfs, or an offline daemon with no Go counters): they
    are then not judged, since no ratio or log of a zero exists."""
    return bool(x) and bool(y) and all(v > 0 for v in x) and all(v > 0 for v in y)


@dataclass(frozen=True, kw_only=True)
class Samples(_Doc):
    """One build's runs in one step."""
    times: tuple[float, ...] = _f(list)
    user: tuple[float, ...] = _f(list, default=())
    system: tuple[float, ...] = _f(list, default=())
    exit_codes: tuple[int, ...] = _f(list, default=())
    rounds: tuple[int, ...] = _f(list, default=())
    memory_bytes: tuple[int | None, ...] | None = _f(list, default=None)  # each run's own peak, where measured
    instructions: tuple[int | None, ...] | None = _f(list, default=None, omit_none=True)  # where counted
    # every other metric's per-run figures by metric name (metrics.table(): what the build's daemon
    # spent during each run, issue 36, the embedded S3 server's CPU, a metric added since): only
    # where measured. The file keeps one key each, here, in the table's order, named Metric.key
    # (`daemon_cpu`); files without them (older ones, `none` mode) load as before. A metric is read
    # as an attribute by its key too (`samples.daemon_cpu`, None where not measured).
    metrics: Mapping[str, tuple[float, ...]] = field(default_factory=lambda: _EMPTY, metadata={"kind": None})
    stats: Summary | None = _f(dict, default=None, read=_read_summary)
    cpu_mean: float | None = _f((int, float), default=None)
    cpu_wall_ratio: float | None = _f((int, float), default=None)
    rss_kb: int | None = _f(int, default=None)
    check: Any = None
    command: str = _f(str, default="")
    prepare: str | None = _f(str, default=None)

    @classmethod
    def _finish(cls, kw, doc, where):
        if kw.get("stats") is None and kw.get("times"):  # files from before stats were stored
            kw["stats"] = _read_summary(summarize(kw["times"]).to_json(), where)  # rounded as stored
        kw["metrics"] = MappingProxyType({m.name: frozen(_check(doc[m.key], list, _key(where, m.key)))
                                         for m in table().by_key().values() if doc.get(m.key) is not None})
        return cls(**kw)

    def to_json(self) -> dict:
        out = {}
        for k, v in super().to_json().items():
            if k == "metrics":  # each metric under its own key, in the table's order
                out.update({m.key: list(self.metrics[m.name]) for m in table() if m.name in self.metrics})
            else:
                out[k] = v
        return out

    def __getattr__(self, name: str):
        """A metric's figures by its key (`daemon_cpu`), None where not measured."""
        m = table().by_key().get(name) if not name.startswith("__") else None
        if m is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return self.__dict__.get("metrics", _EMPTY).get(m.name)

    def raw(self) -> dict[str, tuple]:
        """Every metric's per-run figures by name, as far as stored (metric_values reads them)."""
        cpu = tuple(u + k for u, k in zip(self.user, self.system))
        return {"wall": self.times, "cpu": cpu, "memory": self.memory_bytes or (),
                "instructions": self.instructions or (), **self.metrics}

    def values(self, metric: str) -> tuple[float, ...] | None:
        """One metric's figure of every run (wall, cpu = user + system, memory, instructions, and
        any other of metrics.table() stored by name), or None unless every run has one: what a
        saved run's contrast of that metric reads (`compare`), as the runner reads its own samples."""
        return metric_values(metric, self.raw())

    def daemon_values(self) -> dict[str, tuple]:
        """The daemon's per-run figures by metric name (the table's probe metrics), those measured."""
        return {m.name: self.metrics[m.name] for m in table().of("probe") if m.name in self.metrics}

    def server_values(self) -> dict[str, tuple]:
        """The S3 server's per-run figures by metric name (the table's server metrics), those measured."""
        return {m.name: self.metrics[m.name] for m in table().of("server") if m.name in self.metrics}

    @classmethod
    def measured(cls, times, user, system, exit_codes, rounds, memory, rss_kb=None, check=None,
                 command: str = "", prepare: str | None = None, instructions=(),
                 daemon: Mapping[str, list] | None = None) -> "Samples":
        """From the runner's raw samples (`daemon`: every metric's not in the timer's raw fields, by
        name: the probes' and any other of metrics.table()): the summary and CPU figures computed once, here, and
        rounded as the file stores them (so a run's results equal their own file read back)."""
        cpu = [u + k for u, k in zip(user, system)]
        s = summarize(times) if times else None
        return cls(
            times=tuple(round(t, 9) for t in times), user=tuple(round(t, 9) for t in user),
            system=tuple(round(t, 9) for t in system), exit_codes=tuple(exit_codes), rounds=tuple(rounds),
            memory_bytes=tuple(memory) if any(m is not None for m in memory) else None,
            instructions=tuple(instructions) if any(m is not None for m in instructions) else None,
            stats=_read_summary(s.to_json(), "") if s else None,
            cpu_mean=_round(sum(cpu) / len(cpu)) if cpu else None,
            cpu_wall_ratio=round(sum(cpu) / sum(times), 4) if cpu and sum(times) > 0 else None,
            rss_kb=rss_kb, check=check, command=command, prepare=prepare,
            metrics=MappingProxyType({m.name: tuple(round(x, 6) if isinstance(x, float) else x for x in v)
                                     for m in table() if not m.stored and (v := (daemon or {}).get(m.name))
                                     and all(x is not None for x in v)}))


_samples_fields_init = Samples.__init__


def _samples_init(self, **kw) -> None:
    """Samples' keyword constructor, a metric's figures given by its key too (`daemon_cpu=...`, as
    when each was a field of its own): they join `metrics`, by name."""
    by_key = table().by_key()
    given = {by_key[k].name: kw.pop(k) for k in [k for k in kw if k in by_key]}
    named = {name: tuple(v) for name, v in given.items() if v is not None}
    if named:
        kw["metrics"] = MappingProxyType({**kw.get("metrics", {}), **named})
    _samples_fields_init(self, **kw)


Samples.__init__ = _samples_init


@dataclass(frozen=True)
class StoredContrast(Contrast):
    """A contrast read from a file. It keeps the phrase the run wrote: re-deriving it from the
    stored (rounded) factor can round the other way (1.305 -> "1.30" where the run said "1.31")."""
    stored_phrase: str | None = field(default=None, compare=False)

    def phrase(self, quote: str = "'") -> str:
        if self.stored_phrase is not None and quote == "'":
            return self.stored_phrase
        return super().phrase(quote)

    def to_json(self) -> dict:
        d = super().to_json()
        d.pop("stored_phrase")
        d["phrase"] = d.pop("phrase")  # last, where the run writes it
        return d


_CONTRAST_DEFAULTS = {"ci_low": None, "ci_high": None, "p_value": None, "noisy": False, "mde": None,
                        "runs_needed": None, "factor_err": 0.0}


def read_contrast(value, where: str = "contrast") -> Contrast:
    """A contrast as a results file holds it: floats rounded, unbounded interval ends None."""
    _check(value, dict, where)
    for key in ("baseline", "contender", "verdict"):
        if key not in value:
            raise _Shape(f"{where} has no {key!r}")
        _check(value[key], str, f"{where}.{key}")
    if value["verdict"] not in set(Verdict):
        raise _Shape(f"{where}.verdict {value['verdict']!r} is not one of {', '.join(Verdict)}")
    if value.get("metric", "wall") not in table():
        raise _Shape(f"{where}.metric {value.get('metric')!r} is not one of {', '.join(table().names)}")
    if "rel" not in value:
        raise _Shape(f"{where} has no 'rel'")
    rel = _check(value["rel"], (int, float), f"{where}.rel")
    derived = {"ratio": round(1 + rel, 9), "factor": round(max(1 + rel, 1 / (1 + rel)), 9) if rel > -1 else 1.0,
               "faster": value["baseline"] if rel >= 0 else value["contender"],
               "slower_label": value["contender"] if rel >= 0 else value["baseline"]}
    kw = {}
    for f in fields(Contrast):
        if value.get(f.name) is not None:
            kw[f.name] = value[f.name]
        elif f.name in derived:
            kw[f.name] = derived[f.name]
        elif f.name in _CONTRAST_DEFAULTS:
            kw[f.name] = _CONTRAST_DEFAULTS[f.name]
        elif f.default is not MISSING:
            kw[f.name] = f.default
    return StoredContrast(**kw, stored_phrase=value["phrase"] if isinstance(value.get("phrase"), str) else None)



# ---- why a step changed (issue 19): S3 requests, kubo repo counters, CPU profiles ----------------
# Measured once per build in an untimed run (refbench/accounting.py, refbench/profile.py), stored
# here, rendered by render/ only. Every field is optional: older files have none of them.
@dataclass(frozen=True, kw_only=True)
class Requests(_Doc):
    """One build's S3 requests in a step's untimed accounting run, from the embedded MinIO's
    metrics v3 counters: exact counts, not estimates."""
    by_api: Mapping[str, int] = _f(dict, default=_EMPTY)  # API name -> requests (PutObject, ...)
    errors_4xx: int = _f(int, default=0)
    errors_5xx: int = _f(int, default=0)
    canceled: int = _f(int, default=0)
    received_bytes: int = _f(int, default=0)  # bytes the server received (uploads)
    sent_bytes: int = _f(int, default=0)  # bytes the server sent (downloads)
    # the embedded MinIO's CPU time (user + system) over the same run: context, not a verdict (issue 36)
    server_cpu: float | None = _f((int, float), default=None, omit_none=True)

    @property
    def total(self) -> int:
        return sum(self.by_api.values())


@dataclass(frozen=True, kw_only=True)
class RequestChange(_Doc):
    """One counter that differs between a contender and the baseline: an API's requests, the
    bytes either way, or an error count."""
    contender: str = _f(str)
    name: str = _f(str)  # "PutObject", "bytes received", "4xx errors", ...
    baseline_value: int = _f(int)
    value: int = _f(int)

    @property
    def factor(self) -> float | None:
        return self.value / self.baseline_value if self.baseline_value else None


@dataclass(frozen=True, kw_only=True)
class RepoStat(_Doc):
    """A kubo repo after a step (`ipfs repo stat`): NumObjects is an exact block count; RepoSize
    is kubo's own estimate, so it is stored and shown as one."""
    num_objects: int = _f(int)
    repo_size_estimate: int | None = _f(int, default=None)


@dataclass(frozen=True, kw_only=True)
class FunctionShift(_Doc):
    """A function's share of CPU samples (self time) in each build's profiled runs."""
    function: str = _f(str)
    baseline_share: float = _f((int, float))
    contender_share: float = _f((int, float))

    @property
    def points(self) -> float:
        """The change in percentage points: 0.05 -> 0.141 is +9.1 pts."""
        return (self.contender_share - self.baseline_share) * 100


def _read_stacks(value, where):
    _check(value, list, where)
    out = []
    for i, row in enumerate(value):
        if not (isinstance(row, list) and len(row) == 3 and isinstance(row[0], str)
                and all(isinstance(x, int) for x in row[1:])):
            raise _Shape(f"{where}[{i}] should be [stack, baseline samples, contender samples]")
        out.append((row[0], row[1], row[2]))
    return tuple(out)


@dataclass(frozen=True, kw_only=True)
class Profile(_Doc):
    """A differential CPU profile of one step: perf's samples of each build's profiled runs
    (cpu-clock, frame-pointer call graphs), folded; the functions whose share moved most; the
    folded stacks both builds' samples land on (what the flame graph draws)."""
    baseline: str = _f(str)
    contender: str = _f(str)
    samples: Mapping[str, int] = _f(dict, default=_EMPTY)  # per build label
    repeats: int = _f(int, default=1)  # profiled runs per build, added together
    top: tuple[FunctionShift, ...] = _f(list, default=(), read=_tuple_of(FunctionShift.read))
    stacks: tuple[tuple[str, int, int], ...] = _f(list, default=(), read=_read_stacks)
    note: str | None = _f(str, default=None, omit_none=True)  # e.g. a binary without symbols
    # who sampled: None is perf (cpu-clock); "pprof" is kubo's own Go profiler (IPFS_PROF)
    source: str | None = _f(str, default=None, omit_none=True)

    @property
    def sampler(self) -> str:
        return "kubo's own pprof (IPFS_PROF)" if self.source == "pprof" else "perf cpu-clock"

@dataclass(frozen=True, kw_only=True)
class Step(_Doc):
    name: str = _f(str)
    runs: int | None = _f(int, default=None)
    warmup: int | None = _f(int, default=None)
    rounds: int | None = _f(int, default=None)
    looks: tuple[float, ...] = _f(list, default=(1.0,))
    # the looks' alpha-spending times, where they differ from `looks`: each look's runs over the
    # most runs planned when it was taken (before the plan, the budget's guard; then a plan that grew)
    spend: tuple[float, ...] | None = _f(list, default=None, omit_none=True)
    stopped: str | None = _f(str, default=None)
    builds: Mapping[str, Samples] = _f(dict, read=_by_label(Samples.read))
    comparisons: tuple[Contrast, ...] = _f(list, read=_tuple_of(read_contrast))  # wall time: the primary
    check_differs: bool = _f(bool, default=False)
    hyperfine_seconds: float | None = _f((int, float), default=None)
    # the other metrics' contrasts (cpu, memory, instructions). The file keeps one `comparisons`
    # list, each naming its metric; typed, the wall ones stay apart, so every view, bisect, nightly
    # and the scoreboard that judge on wall time read `comparisons` as before
    metric_comparisons: tuple[Contrast, ...] = field(default=(), metadata={"kind": None})

    @classmethod
    def _finish(cls, kw, doc, where):
        every = kw.get("comparisons", ())
        kw["comparisons"] = tuple(c for c in every if c.metric == "wall")
        kw["metric_comparisons"] = tuple(c for c in every if c.metric != "wall")
        return cls(**kw)

    def to_json(self) -> dict:
        out = super().to_json()
        out["comparisons"] = out["comparisons"] + out.pop("metric_comparisons")
        return out

    def all_contrasts(self) -> tuple[Contrast, ...]:
        """Every metric's contrasts, wall first: the family members this step adds."""
        return self.comparisons + self.metric_comparisons

    def by_metric(self, contender: str | None = None) -> dict[str, Contrast]:
        """{metric: contrast} of one contender (default: the first), wall first."""
        out = {}
        for c in self.all_contrasts():
            if contender is None:
                contender = c.contender
            if c.contender == contender:
                out.setdefault(c.metric, c)
        return out

    # why it changed (issue 19); absent where not measured
    requests: Mapping[str, Requests] | None = _f(dict, default=None, read=_by_label(Requests.read), omit_none=True)
    request_changes: tuple[RequestChange, ...] | None = _f(list, default=None, omit_none=True,
                                                           read=_tuple_of(RequestChange.read))
    repo: Mapping[str, RepoStat] | None = _f(dict, default=None, read=_by_label(RepoStat.read), omit_none=True)
    profiles: tuple[Profile, ...] | None = _f(list, default=None, read=_tuple_of(Profile.read), omit_none=True)
    profile_note: str | None = _f(str, default=None, omit_none=True)  # why this step has no profile
    # S3: the network profile it ran under (refbench/network.py; its figures in the run's
    # backend.networks); absent where nothing was shaped or recorded (IPFS, older files)
    network: str | None = _f(str, default=None, omit_none=True)

    @property
    def requests_differ(self) -> bool:
        """A fact, not an estimate: some build asked the server for different work."""
        return bool(self.request_changes)


@dataclass(frozen=True, kw_only=True)
class Fixture(_Doc):
    kind: str | None = _f(str, default=None)
    size: str | None = _f(str, default=None)
    size_bytes: int | None = _f(int, default=None)
    count: int | None = _f(int, default=None)
    files: int | None = _f(int, default=None)
    bytes: int | None = _f(int, default=None)
    seed: int | None = _f(int, default=None)
    path: str | None = _f(str, default=None)
    dirs: int | None = _f(int, default=None, omit_none=True)  # tree fixtures only
    depth: int | None = _f(int, default=None, omit_none=True)
    random_fanout: bool | None = _f(bool, default=None, omit_none=True)
    random_size: bool | None = _f(bool, default=None, omit_none=True)

    def throughput(self, side: Samples | None) -> tuple[float | None, float | None]:
        """(bytes/s, objects/s) of one build in one step: this fixture's bytes and objects over the
        build's mean time. None where the time or the fixture size is unknown."""
        mean = side.stats.mean if side and side.stats else None
        if not mean or mean <= 0:
            return None, None
        return (self.bytes / mean if self.bytes else None), (self.files / mean if self.files else None)


@dataclass(frozen=True, kw_only=True)
class Scenario(_Doc):
    name: str = _f(str)
    slug: str | None = _f(str, default=None)
    description: str = _f(str, default="")
    fixture: Fixture = _f(dict, read=Fixture.read)
    steps: tuple[Step, ...] = _f(list, read=_tuple_of(Step.read))
    daemon: str | None = _f(str, default=None, omit_none=True)  # kubo: how it ran (online, offline, none)


@dataclass(frozen=True, kw_only=True)
class Settings(_Doc):
    runs: int | str | None = _f((int, str), default=None)
    warmup: int | str | None = _f((int, str), default=None)
    rounds: int | str | None = _f((int, str), default=None)
    quick: bool = _f(bool, default=False)
    threshold: float = _f((int, float), default=THRESHOLD)
    alpha: float = _f((int, float), default=ALPHA)
    noise_limit: float = _f((int, float), default=NOISE_LIMIT)
    metric_thresholds: Mapping[str, float] | None = _f(dict, default=None, omit_none=True)  # the other metrics' (v2)
    multiple_testing: str | None = _f(str, default=None)
    until_decided: bool = _f(bool, default=False)
    max_runs: int | None = _f(int, default=None)
    only: tuple[str, ...] = _f(list, default=())
    budget_seconds: float | None = _f((int, float), default=None)
    min_rounds: int | None = _f(int, default=None, omit_none=True)  # a default budget's pilot (rounds)
    order_seed: int | None = _f(int, default=None, omit_none=True)  # drew the rounds' orders (runner.round_orders)
    pair_runs: int | None = _f(int, default=None, omit_none=True)  # most runs on one pair of fresh daemons a round (Sampling)
    interleave: str | None = _f(str, default=None)
    no_shell: str | None = _f(str, default=None)
    cpus: Mapping = _f(dict, default=_EMPTY)
    family_size: int | None = _f(int, default=None)
    hyperfine_flags: tuple[str, ...] = _f(list, default=())
    target_flags: tuple[str, ...] = _f(list, default=())
    shard: str | None = _f(str, default=None, omit_none=True)  # a shard's own results only
    shard_steps: tuple[str, ...] | None = _f(list, default=None, omit_none=True)
    merged_shards: int | None = _f(int, default=None, omit_none=True)  # merged results only

    @property
    def criteria(self) -> Criteria:
        """The criteria these settings record: how anything judging the saved run again (merge,
        a view's thresholds) judges it as the run did, each metric's threshold as recorded, else
        the default it had when the file was written."""
        return criteria(self.threshold, self.alpha, self.noise_limit, self.metric_thresholds or {})


@dataclass(frozen=True, kw_only=True)
class Environment(_Doc):
    host: str | None = _f(str, default=None)
    os: str | None = _f(str, default=None)
    kernel: str | None = _f(str, default=None)
    cpu_model: str | None = _f(str, default=None)
    cpus: int | None = _f(int, default=None)
    memory_bytes: int | None = _f(int, default=None)
    python: str | None = _f(str, default=None)
    go: str | None = _f(str, default=None)
    hyperfine: str | None = _f(str, default=None)
    refbench: str | None = _f(str, default=None)
    load_before: float | None = _f((int, float), default=None)
    competing_cpu_share: float | None = _f((int, float), default=None)
    hosts: tuple[str, ...] | None = _f(list, default=None, omit_none=True)  # merged results only

    @classmethod
    def probe(cls, toolchain: str | None = None, hyperfine: str | None = None, **measured) -> "Environment":
        """This machine as a results file records it; `hyperfine`: the one the run measured with
        (default: the first on PATH)."""
        def version(argv):
            # at / and with GOTOOLCHAIN=local (set through env(1): this module reads no environment):
            # a go.mod in the current directory, or a GOTOOLCHAIN the environment names, could switch
            # go to a toolchain a restored module cache holds (review35l L2, review35m)
            try:
                return subprocess.run(argv, capture_output=True, text=True, timeout=20,
                                      cwd="/").stdout.strip().splitlines()[0]
            except (OSError, IndexError, subprocess.TimeoutExpired):
                return None

        return cls(host=socket.gethostname(), os=platform.platform(), kernel=platform.release(),
                   cpu_model=cpu_model(), cpus=os.cpu_count(), memory_bytes=_mem_total(),
                   python=platform.python_version(), go=toolchain or version(["env", "GOTOOLCHAIN=local", "go", "env", "GOVERSION"]),
                   hyperfine=hyperfine or version(["hyperfine", "--version"]), refbench=__version__, **measured)

    def busy_warning(self) -> str | None:
        """A warning when other work competed with the benchmark (its CPU share above a quarter, or
        for older files, the 1-minute load above the CPU count): every view and command says it."""
        cpus = self.cpus or 1
        share = self.competing_cpu_share
        if share is not None and share > 0.25:
            return (f"the machine was busy: other work used {share * 100:.0f}% of its {cpus} CPUs during this run, "
                    "so timings are noisier and verdicts less reliable")
        load = self.load_before or 0
        if share is None and load > cpus:
            return (f"the machine was busy when this run started (load average {load:.1f} on {cpus} CPUs), "
                    "so timings may be noisier and verdicts less reliable")
        return None


@dataclass(frozen=True, kw_only=True)
class Timing(_Doc):
    wall_seconds: float | None = _f((int, float), default=None)
    build_seconds: float | None = _f((int, float), default=None)
    fixture_seconds: float | None = _f((int, float), default=None)
    hyperfine_seconds: float | None = _f((int, float), default=None)
    untimed_command_seconds: float | None = _f((int, float), default=None)
    untimed_by_kind: Mapping[str, float] = _f(dict, default=_EMPTY)
    overhead_seconds: float | None = _f((int, float), default=None)
    overhead_share: float | None = _f((int, float), default=None)
    shard_wall_seconds: tuple[float | None, ...] | None = _f(list, default=None, omit_none=True)


@dataclass(frozen=True, kw_only=True)
class Results(_Doc):
    """A whole results file. `schema` and `version` are written, never stored: a Results is always
    of this refbench's version (older files are upgraded on reading)."""
    refbench: str = _f(str, default="")
    created: str = _f(str, default="")
    command_line: tuple[str, ...] = _f(list, default=())
    target: Target = _f(dict, read=Target.read)
    environment: Environment = _f(dict, default=Environment(), read=Environment.read)
    settings: Settings = _f(dict, read=Settings.read)
    builds: tuple[Build, ...] = _f(list, read=_tuple_of(Build.read))
    baseline: str | None = _f(str, default=None)
    backend: Mapping = _f(dict, default=_EMPTY)
    scenarios: tuple[Scenario, ...] = _f(list, read=_tuple_of(Scenario.read))
    scoreboard: Mapping | None = _f(dict, default=None)
    timing: Timing | None = _f(dict, default=None, read=Timing.read)
    resources: Mapping | None = _f(dict, default=None, omit_none=True)
    stopped: str | None = _f(str, default=None, omit_none=True)
    shards: tuple[Mapping, ...] | None = _f(list, default=None, omit_none=True)
    explain_notes: tuple[str, ...] | None = _f(list, default=None, omit_none=True)  # no accounting / profile, why

    @classmethod
    def from_json(cls, doc, where: str = "results.json") -> "Results":
        """Check, upgrade and type a results document; a problem is one RefbenchError that names
        `where` and the part that is wrong."""
        doc = _upgrade(doc, _check_kind(doc, where))
        try:
            return cls.read(doc, "")
        except _Shape as e:
            raise RefbenchError(f"{where}: malformed results file: {e}") from None

    @classmethod
    def _finish(cls, kw, doc, where):
        if kw.get("baseline") is None and kw.get("builds"):
            kw["baseline"] = kw["builds"][0].label
        return cls(**kw)

    def to_json(self) -> dict:
        return {"schema": SCHEMA, "version": SCHEMA_VERSION, **super().to_json()}

    def replace(self, **changes) -> "Results":
        return replace(self, **changes)

    @property
    def labels(self) -> tuple[str, ...]:
        """Build labels, baseline first."""
        return tuple(b.label for b in self.builds)

    def steps(self) -> Iterator[tuple[Scenario, Step]]:
        for sc in self.scenarios:
            for st in sc.steps:
                yield sc, st

    def comparisons(self) -> Iterator[tuple[Scenario, Step, Contrast]]:
        """Every step's wall-time contrasts with their scenario and step (named after the file's key)."""
        for sc, st in self.steps():
            for c in st.comparisons:
                yield sc, st, c

    def verdict_counts(self) -> dict[Verdict, int]:
        """How many wall-time contrasts reached each verdict (every verdict present)."""
        return count(c.verdict for _, _, c in self.comparisons())

    def judged_metrics(self) -> tuple[str, ...]:
        """The metrics other than wall time that some step has a verdict on, in the table's order
        (metrics.table(); a run whose hyperfine could not count instructions has none on them)."""
        have = {c.metric for _, st in self.steps() for c in st.metric_comparisons}
        return tuple(m for m in table().names if m != "wall" and m in have)

    def differing_toolchains(self) -> dict[str, str]:
        """Each build's Go (label -> toolchain) when the builds were not all built with the same
        one, else {}: the Go is then a cause of any difference, and the summary says so. An
        implementation (kind 'implementation') is another program: its Python or Go is not the question."""
        gos = {b.label: b.toolchain for b in self.builds if b.toolchain and b.kind != "implementation"}
        return gos if len(set(gos.values())) > 1 else {}

    def daemon_modes(self) -> dict[str, tuple[str, ...]]:
        """kubo: each daemon mode the run's scenarios ran in -> those scenarios' names ({} for a
        target without one): how the target was run is part of what a verdict means."""
        modes: dict[str, list[str]] = {}
        for sc in self.scenarios:
            if sc.daemon:
                modes.setdefault(sc.daemon, []).append(sc.name)
        return {mode: tuple(names) for mode, names in modes.items()}

    def networks(self) -> dict[str, tuple[str, ...]]:
        """S3: each network profile the run's steps ran under -> where: a scenario's name when all
        its steps ran under it, else 'scenario / step' ({} where no step recorded one). Like the
        daemon mode, the network is part of what a verdict means: the sign of a concurrency change
        can differ between loopback and a round trip of 10 ms."""
        where: dict[str, list[str]] = {}
        for sc in self.scenarios:
            nets = {st.network for st in sc.steps}
            if len(nets) == 1 and None not in nets:
                where.setdefault(nets.pop(), []).append(sc.name)
                continue
            for st in sc.steps:
                if st.network:
                    where.setdefault(st.network, []).append(f"{sc.name} / {st.name}")
        return {name: tuple(places) for name, places in where.items()}

    def network_words(self, name: str) -> str:
        """A profile's figures as the run recorded them ('10 ms round trip, ...'), else ''."""
        nets = self.backend.get("networks") if isinstance(self.backend, Mapping) else None
        rec = nets.get(name) if isinstance(nets, Mapping) else None
        return str(rec.get("words", "")) if isinstance(rec, Mapping) else ""

    def regressions(self, metrics: tuple[str, ...] = ("wall",)) -> list[tuple[str, str, Contrast]]:
        """(scenario, step, contrast) of every contrast of the given metrics that got slower:
        what --fail-on-regression and the nightly act on."""
        return [(sc.name, st.name, c) for sc, st in self.steps() for c in st.all_contrasts()
                if c.verdict == Verdict.SLOWER and c.metric in metrics]


def _check_kind(doc, where: str) -> int:
    """The document's schema version, once it is known to be a results file refbench can read."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        schema = doc.get("schema") if isinstance(doc, dict) else None
        raise RefbenchError(f"{where}: not a refbench results file (schema {schema!r})")
    version = doc.get("version", 0)
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise RefbenchError(f"{where}: results schema version {version!r} is newer than this refbench "
                            f"reads ({SCHEMA_VERSION}); upgrade refbench")
    return version


# Upgrade steps: version N -> N + 1, applied in order to older documents. Version 1 is the first;
# what its early files lack (optional keys added later) is filled by the field defaults above.
def _metric_wall(doc: dict) -> dict:
    """Version 1 -> 2: the contrasts (`comparisons`) were all on wall time; they now say so."""
    def step(st):
        if not isinstance(st, dict) or not isinstance(st.get("comparisons"), list):
            return st
        return {**st, "comparisons": [{**c, "metric": c.get("metric", "wall")} if isinstance(c, dict) else c
                                      for c in st["comparisons"]]}

    def scenario(sc):
        if not isinstance(sc, dict) or not isinstance(sc.get("steps"), list):
            return sc
        return {**sc, "steps": [step(st) for st in sc["steps"]]}

    scenarios = doc.get("scenarios")
    return {**doc, "version": 2,
            **({"scenarios": [scenario(sc) for sc in scenarios]} if isinstance(scenarios, list) else {})}


_UPGRADES: dict[int, Callable[[dict], dict]] = {
    0: lambda doc: {**doc, "version": 1},  # files written before the version key existed
    1: _metric_wall,
}


def _upgrade(doc: dict, version: int) -> dict:
    while version < SCHEMA_VERSION:
        doc = _UPGRADES[version](doc)
        version += 1
    return doc


# ---- files ---------------------------------------------------------------------------------------
def load(path) -> Results:
    """Read a results.json of this or an older schema version: the one way in, so a file that cannot
    be read or is malformed is one RefbenchError naming the file, never a traceback from a view."""
    return Results.from_json(load_document(path), str(path))


def load_document(path) -> dict:
    """The file's document, checked as a results file of a version this refbench reads but not for
    its shape: for readers that take only what they find (shard weights from an earlier run)."""
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise RefbenchError(f"{path}: no such results file") from None
    except IsADirectoryError:
        raise RefbenchError(f"{path}: is a directory, not a results file") from None
    except OSError as e:
        raise RefbenchError(f"{path}: cannot read: {e.strerror or e}") from None
    except ValueError as e:
        raise RefbenchError(f"{path}: not a refbench results file ({e})") from None
    _check_kind(doc, str(path))
    return doc


def write(results: Results, path) -> None:
    """Write atomically (a reader never sees half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(results.to_json(), indent=1))
    tmp.replace(path)


def created_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


# ---- the machine ---------------------------------------------------------------------------------
def cpu_model() -> str | None:
    """The CPU's model name from /proc/cpuinfo (None where it cannot be read): with the CPU count,
    what tells one machine type from another."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _mem_total() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
