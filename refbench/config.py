"""Load and validate scenarios.toml into plain dataclasses.

Every error names the file, the key and what was expected.
"""
from __future__ import annotations

import shlex
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import jinja2

from . import implementations as impls
from .errors import ConfigError
from .network import BUNDLED as BUNDLED_NETWORKS, LOOPBACK, NetworkProfile, effective, from_table
from .variants import Variant, from_table as variant_from_table
from .units import format_size, parse_size, slug

BACKENDS = ("s3", "ipfs")
FIXTURE_KINDS = ("sparse", "random", "tree")
DAEMON_MODES = ("online", "offline", "none")  # how a kubo scenario runs (ScenarioSpec.daemon)
DEFAULT_DAEMON = "online"  # as kubo's users run it



@dataclass(frozen=True)
class TargetSpec:
    name: str
    repo: str  # default origin (URL or path); --repo overrides
    binary: str  # file name of the built binary
    build: tuple[str, ...]  # argv run in the worktree; {out} is the binary path
    backend: str  # "s3" or "ipfs"
    module: str | None = None  # Go module path, for --source module
    package: str | None = None  # main package import path, for --source module
    description: str = ""


@dataclass(frozen=True)
class FixtureSpec:
    kind: str  # sparse | random | tree
    size: int = 0  # bytes per file (tree: maximum bytes per file)
    count: int = 1  # files (sparse/random); files per dir (tree)
    seed: int = 1
    dirs: int = 0  # tree: sub-directories per directory
    depth: int = 0  # tree: levels of sub-directories
    random_fanout: bool = False
    random_size: bool = False

    @property
    def label_size(self) -> str:
        return format_size(self.size)

    def key(self) -> str:
        """Stable name for the cache directory of this spec."""
        if self.kind == "tree":
            return (f"tree-d{self.dirs}-f{self.count}-l{self.depth}-s{format_size(self.size)}"
                    f"-fan{int(self.random_fanout)}-rs{int(self.random_size)}-seed{self.seed}")
        seed = f"-seed{self.seed}" if self.kind == "random" else ""
        return f"{self.kind}-{format_size(self.size)}x{self.count}{seed}"


@dataclass(frozen=True)
class StepSpec:
    name: str
    command: str  # template, timed
    prepare: str | None = None  # template, before every timed run (untimed)
    setup: str | None = None  # template, once per build before the step (untimed)
    cleanup: str | None = None  # template, once per build after the step (untimed)
    check: str | None = None  # template, once per build after the step; its stdout is recorded
    state: str | None = None  # template: a layer over the scenario's state, built once per build and cached
    runs: int | None = None
    warmup: int | None = None
    local_copies: int = 0  # fixture-sized copies this step writes to local disk at once
    stored_copies: int = 0  # fixture-sized copies this step keeps in the backend at once
    network: str | None = None  # S3: the network profile it runs under (network.py); None: its scenario's


@dataclass(frozen=True)
class ScenarioSpec:
    name: str
    target: str
    fixture: FixtureSpec
    quick_fixture: FixtureSpec
    steps: tuple[StepSpec, ...]
    description: str = ""
    runs: int | None = None
    warmup: int | None = None
    quick_runs: int | None = None
    setup: str | None = None  # template, once per build before the steps (untimed)
    teardown: str | None = None  # template, once per build after the steps (untimed)
    stored_copies: int = 0  # fixture-sized copies the scenario setup stores in the backend
    # ipfs: how kubo runs (DAEMON_MODES): "online" (the daemon on a loopback-only network of the run's
    # own, the CLI talking to it, as users run kubo), "offline" (`ipfs daemon --offline`: the HTTP
    # API without networking), "none" (the CLI alone on the repo); None: the target's default
    daemon: str | None = None
    # template: the repo's state, built once per build (untimed) and cached by binary, fixture and
    # template; `{{ restore }}` puts it back (an overlay) before every timed run
    state: str | None = None
    vary: dict[str, Any] = field(default_factory=dict)  # per-build-position template values
    network: str | None = None  # S3: the network profile of its steps that name none (network.py)
    opt_in: bool = False  # run only when --only names it (too long or too large for every run)

    @property
    def slug(self) -> str:
        return slug(self.name)

    def selected_steps(self, step_filter=None) -> tuple[StepSpec, ...]:
        """The steps --only (and a shard) keep, in order: every step without a filter."""
        return tuple(st for st in self.steps if step_filter is None or step_filter(self, st))

    @property
    def daemon_mode(self) -> str:
        """How kubo runs for this scenario: its own choice, else the bundled default, online (a
        scenario with a cached state: none, its repo is restored closed)."""
        return self.daemon or ("none" if self.state else DEFAULT_DAEMON)

    def for_quick(self, quick: bool) -> "ScenarioSpec":
        if not quick:
            return self
        return replace(self, fixture=self.quick_fixture, runs=self.quick_runs or self.runs)

    def for_run(self, quick: bool, daemon: str | None = None) -> "ScenarioSpec":
        """The scenario as a run measures it: at --quick size, in the run's --daemon mode if given."""
        sized = self.for_quick(quick)
        # a cached state is restored before every run, with its repo closed: never a daemon
        return replace(sized, daemon=daemon) if daemon and not self.state else sized

    def with_network(self, run_network: str | None = None) -> "ScenarioSpec":
        """S3: every step with the profile it runs under settled (network.effective)."""
        return replace(self, steps=tuple(replace(st, network=effective(st.network, self.network, run_network))
                                         for st in self.steps))


@dataclass(frozen=True)
class Config:
    path: Path
    targets: dict[str, TargetSpec]
    scenarios: tuple[ScenarioSpec, ...]
    # every network profile a step may name: the bundled ones and the file's [networks.NAME]
    networks: dict[str, NetworkProfile] = field(default_factory=lambda: dict(BUNDLED_NETWORKS))
    variants: dict[str, Variant] = field(default_factory=dict)  # [[variants]]: --variant NAME picks one
    # --impl NAME picks one: the bundled implementations (implementations.toml), then the file's
    # [implementations.NAME], which take precedence
    implementations: dict[str, impls.Implementation] = field(default_factory=dict)

    def scenarios_for(self, target: str) -> list[ScenarioSpec]:
        return [s for s in self.scenarios if s.target == target]

    def target_for_module(self, module: str | None) -> TargetSpec | None:
        """The target whose Go module is `module` (a checkout's go.mod), if one is declared."""
        found = [t for t in self.targets.values() if module and t.module == module]
        return found[0] if found else None


class _Loader:
    def __init__(self, path: Path):
        self.path = path

    def fail(self, key: str, expected: str, got: Any = None) -> ConfigError:
        got_text = "" if got is None else f", got {got!r}"
        return ConfigError(f"{self.path}: {key}: expected {expected}{got_text}")

    def get(self, table: dict, key: str, where: str, kind: type | tuple, required=False, default=None):
        if key not in table:
            if required:
                raise self.fail(f"{where}.{key}", f"a {_kind_name(kind)} (required)")
            return default
        value = table[key]
        if kind is int and isinstance(value, bool) or not isinstance(value, kind):
            raise self.fail(f"{where}.{key}", f"a {_kind_name(kind)}", value)
        return value

    def count(self, table: dict, key: str, where: str, default=None, minimum=0):
        value = self.get(table, key, where, int, default=default)
        if value is not None and value < minimum:
            raise self.fail(f"{where}.{key}", f"an integer >= {minimum}", value)
        return value

    def template(self, table: dict, key: str, where: str, required=False):
        text = self.get(table, key, where, str, required=required)
        if text is not None:
            try:
                _ENV.parse(text)
            except jinja2.TemplateSyntaxError as e:
                raise self.fail(f"{where}.{key}", f"a valid template ({e.message})", text) from None
        return text


def selected(scenarios, step_filter=None) -> list[tuple[ScenarioSpec, StepSpec]]:
    """(scenario, step) of every selected step of the run, in order."""
    return [(sc, st) for sc in scenarios for st in sc.selected_steps(step_filter)]


def _kind_name(kind) -> str:
    names = {str: "string", int: "integer", bool: "boolean", list: "list", dict: "table"}
    if isinstance(kind, tuple):
        return " or ".join(names.get(k, k.__name__) for k in kind)
    return names.get(kind, kind.__name__)


def load_config(path: str | Path) -> Config:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: scenarios file not found") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    ld = _Loader(path)
    targets_t = ld.get(data, "targets", "", dict, required=True)
    targets: dict[str, TargetSpec] = {}
    for name, t in targets_t.items():
        where = f"targets.{name}"
        if not isinstance(t, dict):
            raise ld.fail(where, "a table")
        build = ld.get(t, "build", where, list, required=True)
        if not build or not all(isinstance(a, str) for a in build):
            raise ld.fail(f"{where}.build", "a non-empty list of strings (argv)", build)
        backend = ld.get(t, "backend", where, str, required=True)
        if backend not in BACKENDS:
            raise ld.fail(f"{where}.backend", f"one of {', '.join(BACKENDS)}", backend)
        targets[name] = TargetSpec(
            name=name,
            repo=ld.get(t, "repo", where, str, required=True),
            binary=ld.get(t, "binary", where, str, required=True),
            build=tuple(build),
            backend=backend,
            module=ld.get(t, "module", where, str),
            package=ld.get(t, "package", where, str),
            description=ld.get(t, "description", where, str, default=""),
        )
    networks = {**BUNDLED_NETWORKS, **{name: from_table(name, t, ld.fail)
                                       for name, t in ld.get(data, "networks", "", dict, default={}).items()}}
    scenarios = []
    seen = set()
    for i, s in enumerate(ld.get(data, "scenarios", "", list, required=True)):
        where = f"scenarios[{i}]"
        if not isinstance(s, dict):
            raise ld.fail(where, "a table")
        name = ld.get(s, "name", where, str, required=True)
        where = f"scenarios[{i}] ({name!r})"
        target = ld.get(s, "target", where, str, required=True)
        if target not in targets:
            raise ld.fail(f"{where}.target", f"one of the declared targets ({', '.join(targets)})", target)
        if (target, name) in seen:
            raise ld.fail(f"{where}.name", "a name unique within its target", name)
        seen.add((target, name))
        fixture = _fixture(ld, ld.get(s, "fixture", where, dict, required=True), f"{where}.fixture")
        quick_t = ld.get(s, "quick", where, dict, default={})
        quick_fixture = _fixture(ld, {**ld.get(s, "fixture", where, dict), **quick_t}, f"{where}.quick") \
            if quick_t else fixture
        steps = [_step(ld, st, f"{where}.steps[{j}]")
                 for j, st in enumerate(ld.get(s, "steps", where, list, required=True))]
        if not steps:
            raise ld.fail(f"{where}.steps", "at least one step")
        names = [st.name for st in steps]
        if len(set(names)) != len(names):
            raise ld.fail(f"{where}.steps", "step names unique within the scenario", names)
        vary = ld.get(s, "vary", where, dict, default={})
        for k, v in vary.items():
            if not isinstance(v, list) or not v:
                raise ld.fail(f"{where}.vary.{k}", "a non-empty list (one value per build position)", v)
        scenarios.append(ScenarioSpec(
            name=name,
            target=target,
            fixture=fixture,
            quick_fixture=quick_fixture,
            steps=tuple(steps),
            description=ld.get(s, "description", where, str, default=""),
            runs=ld.count(s, "runs", where, minimum=1),
            warmup=ld.count(s, "warmup", where),
            quick_runs=ld.count(quick_t, "runs", f"{where}.quick", minimum=1),
            setup=ld.template(s, "setup", where),
            teardown=ld.template(s, "teardown", where),
            stored_copies=ld.count(s, "stored_copies", where, default=0),
            daemon=_daemon(ld, s, where),
            state=_state(ld, s, where, targets[target].backend, steps),
            vary=vary,
            network=_network(ld, s, where, targets[target].backend, networks),
            opt_in=ld.get(s, "opt_in", where, bool, default=False),
        ))
        for j, st in enumerate(s["steps"]):
            _network(ld, st, f"{where}.steps[{j}]", targets[target].backend, networks)
    variants = [variant_from_table(t, f"variants[{i}]", ld.fail)
                for i, t in enumerate(ld.get(data, "variants", "", list, default=[]))]
    if len({v.name for v in variants}) != len(variants):
        raise ld.fail("variants", "names unique among the variants", [v.name for v in variants])
    declared = {**impls.bundled(), **impls.tables(ld.get(data, "implementations", "", dict, default={}), path,
                                                  str(path))}
    return Config(path=path, targets=targets, scenarios=tuple(scenarios), networks=networks,
                  variants={v.name: v for v in variants}, implementations=declared)


def _step(ld: _Loader, st: Any, where: str) -> StepSpec:
    if not isinstance(st, dict):
        raise ld.fail(where, "a table")
    return StepSpec(
        name=ld.get(st, "name", where, str, required=True),
        command=ld.template(st, "command", where, required=True),
        prepare=ld.template(st, "prepare", where),
        setup=ld.template(st, "setup", where),
        cleanup=ld.template(st, "cleanup", where),
        check=ld.template(st, "check", where),
        state=ld.template(st, "state", where),
        runs=ld.count(st, "runs", where, minimum=1),
        warmup=ld.count(st, "warmup", where),
        local_copies=ld.count(st, "local_copies", where, default=0),
        stored_copies=ld.count(st, "stored_copies", where, default=0),
        network=ld.get(st, "network", where, str),
    )


def _network(ld: _Loader, table: dict, where: str, backend: str, networks: dict) -> str | None:
    """A scenario's or step's `network`: a profile declared or bundled, for an S3 target (the
    shaper stands between s5cmd-like clients and an S3 server; kubo's daemon has its own network)."""
    name = ld.get(table, "network", where, str)
    if name is not None and backend != "s3":
        raise ld.fail(f"{where}.network", "no network: profiles shape S3 traffic (target backend 's3')", name)
    if name is not None and name not in networks:
        raise ld.fail(f"{where}.network", f"one of the network profiles ({', '.join(networks)})", name)
    return name


def _state(ld: _Loader, s: dict, where: str, backend: str, steps: list[StepSpec]) -> str | None:
    """A scenario's cached repository state: IPFS only (the state is a repo); a step's state
    builds on the scenario's, so it needs one."""
    state = ld.template(s, "state", where)
    if state is not None and backend != "ipfs":
        raise ld.fail(f"{where}.state", "no state: a cached state is an IPFS repo (target backend 'ipfs')", backend)
    if state is not None and _daemon(ld, s, where) not in (None, "none"):
        raise ld.fail(f"{where}.daemon", "\"none\" with a state (it is restored before every run, with the repo "
                      "closed)", s.get("daemon"))
    layered = [st.name for st in steps if st.state]
    if layered and state is None:
        raise ld.fail(f"{where}.state", f"a state template for the steps' states to build on ({', '.join(layered)})")
    return state


def _daemon(ld: _Loader, s: dict, where: str) -> str | None:
    """A scenario's `daemon`: one of DAEMON_MODES; true and false, from files written before the
    modes, keep what they meant (an offline daemon for its HTTP API, no daemon)."""
    value = ld.get(s, "daemon", where, (str, bool), default=None)
    if isinstance(value, bool):
        return "offline" if value else "none"
    if value is not None and value not in DAEMON_MODES:
        raise ld.fail(f"{where}.daemon", f"one of {', '.join(DAEMON_MODES)}", value)
    return value


def _fixture(ld: _Loader, t: dict, where: str) -> FixtureSpec:
    kind = ld.get(t, "kind", where, str, required=True)
    if kind not in FIXTURE_KINDS:
        raise ld.fail(f"{where}.kind", f"one of {', '.join(FIXTURE_KINDS)}", kind)
    size_raw = ld.get(t, "size", where, (str, int), required=True)
    try:
        size = parse_size(size_raw)
    except ValueError as e:
        raise ld.fail(f"{where}.size", "a size like 512, 64K, 1M, 10G", size_raw) from e
    fx = FixtureSpec(
        kind=kind,
        size=size,
        count=ld.count(t, "count", where, default=1, minimum=1 if kind != "tree" else 0),
        seed=ld.count(t, "seed", where, default=1),
        dirs=ld.count(t, "dirs", where, default=0),
        depth=ld.count(t, "depth", where, default=0),
        random_fanout=ld.get(t, "random_fanout", where, bool, default=False),
        random_size=ld.get(t, "random_size", where, bool, default=False),
    )
    if kind == "tree" and fx.count == 0 and fx.dirs == 0:
        raise ld.fail(where, "a tree with files or dirs")
    return fx


# ---- command templates -------------------------------------------------------------------
class ShellCode(str):
    """A template value that is a command refbench itself wrote (a backend's `restore`), with
    its own values already quoted: inserted as it is, where every other value is quoted."""


def _quote(value: Any) -> str:
    """Every value substituted into a command is shell-quoted; lists become quoted words."""
    if value is None:
        return ""
    if isinstance(value, ShellCode):
        return str(value)
    if isinstance(value, (list, tuple)):
        return " ".join(shlex.quote(str(v)) for v in value)
    if isinstance(value, jinja2.runtime.Undefined):
        return str(value)
    return shlex.quote(str(value))


_ENV = jinja2.Environment(finalize=_quote, undefined=jinja2.StrictUndefined, autoescape=False,
                          keep_trailing_newline=False)


def render(template: str, values: dict[str, Any]) -> str:
    """Render a command template; every ``{{ value }}`` comes out shell-quoted."""
    try:
        return _ENV.from_string(template).render(**values).strip()
    except jinja2.UndefinedError as e:
        raise ConfigError(f"command template {template!r}: {e.message}") from None
