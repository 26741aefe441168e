"""One run, as stages: validate -> resolve -> build_all -> measure -> judge -> assemble.

`run(RunRequest, RunEnv)` is what `bench.py` (commands/run.py), nightly, bisect and calibrate
all call: a typed request in, the results out, never argv strings. Every process the run starts
(hyperfine, the backend's servers, `go build`) and the clock its budget reads come from the
RunEnv (refbench.runenv), so a test or `--executor mock` runs the same stages on stand-ins.
Writing files, the closing log lines and the exit code stay with the command, so a caller that
only wants the verdicts (a bisect probe, a calibrate repetition) writes nothing.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import secrets
import shlex
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Iterator, Mapping, Sequence

from . import __version__, budget as bg, builds as bl, figures, fixtures as fx, judge, paths, refs, results as rs, shard, stats
from . import firstuse, implementations as impls, network as nw, toolchain as tc, tools, variants as vr
from .backends import Backend, make_workdir, sandbox, snapshot
from .backends.s3 import user_endpoint
from .backends.toxiproxy import TOXIPROXY, loopback_host
from .config import Config, ScenarioSpec, StepSpec, TargetSpec, load_config, selected
from .explain import Explainer
from .errors import RefbenchError, RunError
from .lease import check_prefix, sweep_lines
from .progress import Reporter
from .hyperfine import check_hyperfine_flags
from .verdict import ALPHA, NOISE_LIMIT, THRESHOLD
from .executor import Executor
from .refs import ResolvedRef
from .runenv import Builder, RunEnv
from .runner import Bench, Runner, ScenarioResult, StepResult
from .stopping import split_runs
from .sampling import Sampling, StepUnit, step_units
from .units import format_size
from .watchdog import Watchdog, WatchdogStop

DEFAULT_RUNS, QUICK_RUNS = 10, 20
RESTORE_TOOL = "refbench-s3restore"  # the embedded server's batch restore of deleted objects (optional)
NO_BUDGET = 0.0  # --budget none: the fixed-size run, even without -r


@dataclass(frozen=True)
class RunHooks:
    """What `calibrate` changes in an ordinary run: the builds it measures (shims around one
    binary), the family each contender's verdicts belong to, and the budget's scale."""
    builds: Callable[[tuple[Build, ...], Path], Sequence[Build]] | None = None  # (built, workdir) -> builds to measure
    family_per_contender: bool = False  # a 2-build run's family: steps, not steps x contenders
    budget_scale: float = 1.0


@dataclass(frozen=True)
class RunRequest:
    """Every option of one run; the command line's `run_parser` options, typed.

    `runs` None means the default for --quick, and `interleave` None the default for --rounds:
    both are settled here so every caller records the same settings."""
    refs: tuple[str, ...]
    target: str | None = None
    scenarios: str | None = None  # None: ./refbench.toml if present, else the bundled file
    only: tuple[str, ...] = ()
    quick: bool = False
    runs: int | None = None
    runs_given: bool | None = None  # whether the user fixed -r (settled from `runs` when built)
    warmup: int = 2
    rounds: int = 5
    bucket: str | None = None
    prefix: str = "refbench"
    local_path: str | None = None
    hyperfine_flags: str = ""  # -hf, as the user typed it (split with shlex when validated)
    target_flags: str = ""  # -sf
    repo: str | None = None
    source: str = "git"
    go: tuple[str, ...] = ()  # --go: one Go for every build or one per build (toolchain.py); (): REFBENCH_GO, else mod
    # whether --go was given on the command line (not REFBENCH_GO, the machine's): an implementation refuses it
    go_given: bool | None = None
    endpoint_url: str | None = None
    until_decided: bool = False
    measure_identical: bool = False  # measure byte-identical binaries too (an A/A run of the machine)
    # seconds for the run's measuring; None: the default budget (refbench.budget) unless -r alone or
    # --until-decided fixes the sampling; NO_BUDGET (--budget none): the fixed-size run
    budget: float | None = None
    max_runs: int | None = None  # None: no cap under a budget but the budget's; 60 with --until-decided alone
    max_time: float | None = None  # None: 600 s with --until-decided alone, the budget's share under a budget
    interleave: str | None = None
    order_seed: int | None = None  # --order-seed: the rounds' orders of a run to reproduce; None: drawn (RunEnv)
    no_shell: str = "auto"
    cpus: tuple[frozenset[int], frozenset[int] | None] | str | None = None  # --cpus: sets, 'auto', 'off'
    shard: tuple[int, int] | None = None  # --shard I/N as (I, N)
    shard_times: str | None = None
    threshold: float = THRESHOLD
    alpha: float = ALPHA
    noise_limit: float = NOISE_LIMIT
    metric_thresholds: tuple[tuple[str, float], ...] = ()  # --metric-threshold, over verdict.METRIC_THRESHOLDS
    builds_dir: str = field(default_factory=lambda: str(paths.default_builds_dir()))
    rss: bool = True
    daemon: str | None = None  # --daemon: how every kubo scenario runs (config.DAEMON_MODES); None: each its own
    daemon_restart_every: int | None = None  # --daemon-restart-every: rounds a kubo daemon serves (0: never; None: default)
    runs_per_daemon: int | None = None  # --runs-per-daemon: most runs a build makes on one fresh daemon (Sampling.pair_runs)
    network: str | None = None  # --network: the profile of every S3 step that names none (network.py); None: loopback
    variants: tuple[str, ...] = ()  # --variant values: builds after the -s refs, named (variants.py)
    # --impl NAME[@VERSION]: implementations (implementations.py), builds of another kind; after the
    # refs, or before them (the baseline an implementation) with impl_first
    implementations: tuple[str, ...] = ()
    impl_first: bool = False
    profile: str = "auto"  # CPU profiles: auto (steps that moved), on (--profile), off (--no-profile)
    verbose: bool = False
    command_line: tuple[str, ...] = ()  # recorded in results.json
    hooks: RunHooks = RunHooks()

    def __post_init__(self):
        object.__setattr__(self, "refs", tuple(self.refs or ()))
        object.__setattr__(self, "only", tuple(self.only or ()))
        object.__setattr__(self, "variants", tuple(self.variants or ()))
        object.__setattr__(self, "implementations", tuple(self.implementations or ()))
        object.__setattr__(self, "command_line", tuple(self.command_line))
        if self.runs_given is None:
            object.__setattr__(self, "runs_given", self.runs is not None)
        if self.go_given is None:
            object.__setattr__(self, "go_given", bool(self.go))
        if self.runs is None:  # -r's default depends on --quick: short steps need more runs
            object.__setattr__(self, "runs", QUICK_RUNS if self.quick else DEFAULT_RUNS)
        if self.interleave is None:  # --rounds 1 keeps meaning plain hyperfine order: all A, then all B
            object.__setattr__(self, "interleave", "rounds" if self.rounds == 1 else "runs")

    def replace(self, **changes) -> "RunRequest":
        return dataclasses.replace(self, **changes)

    @property
    def sampling(self) -> Sampling:
        """How this run samples: the one record the bench carries and the results file stores."""
        return Sampling(runs=self.runs, warmup=self.warmup, rounds=self.rounds, interleave=self.interleave,
                        until_decided=self.until_decided, max_runs=self.max_runs, max_time=self.max_time,
                        budget=self.budget, order_seed=self.order_seed, pair_runs=self.runs_per_daemon)

    def budget_for(self, units: "tuple[StepUnit, ...]") -> float | None:
        """Seconds of measuring this run gets (before calibrate's scale), or None for a run that is
        not budgeted. Every run samples sequentially within a budget unless -r alone (the seed's
        fixed-size run), --until-decided without --budget, or --budget none says otherwise; the
        default is sized by the steps that can be judged."""
        if self.budget is not None:
            return self.budget or None  # NO_BUDGET: fixed-size
        if self.runs_given or self.until_decided:
            return None
        return bg.default_budget(sum(1 for u in units if u.judged), self.quick)

    def sampling_for(self, units: "tuple[StepUnit, ...]") -> Sampling:
        """How the run samples, budget settled: without -r a budgeted step may stop after its
        pilot rounds; with -r, its planned runs are everyone's minimum."""
        budget = self.budget_for(units)
        budget = budget * self.hooks.budget_scale if budget else None
        return dataclasses.replace(self.sampling, budget=budget,
                                   min_rounds=bg.PILOT_ROUNDS if budget and not self.runs_given else None)

    @property
    def criteria(self) -> figures.Criteria:
        return figures.criteria(self.threshold, self.alpha, self.noise_limit, self.metric_thresholds)

    def scenarios_path(self) -> str:
        return str(self.scenarios or paths.default_scenarios())


# ---- validate ------------------------------------------------------------------------------
StepFilter = Callable[[ScenarioSpec, StepSpec], bool]  # (scenario, step) -> whether --only keeps it


@dataclass(frozen=True)
class Family:
    """The steps whose verdicts form one family (a shard's: the whole run's), whose false alarms the
    run controls together (family_size)."""
    scenarios: tuple[ScenarioSpec, ...]
    step_filter: StepFilter | None = None

    def __iter__(self):
        """(scenarios, step filter), as family_size takes them."""
        return iter((self.scenarios, self.step_filter))


@dataclass(frozen=True)
class Validated:
    """A request validated: it passed every refusal that can be made before anything is built."""
    request: RunRequest
    cfg: Config
    target: TargetSpec
    origin: bl.Checkout | None  # the checkout around the current directory when it is the origin
    scenarios: tuple[ScenarioSpec, ...]
    step_filter: StepFilter | None
    family: Family
    hf_flags: tuple[str, ...]  # -hf, split
    target_flags: tuple[str, ...]  # -sf, split
    prefix: str
    local_root: Path | None
    cache_dir: Path
    fixture_need: int
    run_need: int
    stored_peak: int
    units: tuple[StepUnit, ...]  # the selected steps with their effective runs and warm-up
    sampling: Sampling  # how they are sampled: what the runner follows and results.json records
    # S3: the network profiles the selected steps run under, by name (loopback among them: no shaper)
    networks: Mapping[str, nw.NetworkProfile] = field(default_factory=lambda: MappingProxyType({}))
    variants: tuple[vr.Variant, ...] = ()  # per ref's build, baseline first: the -s refs, then --variant's
    # per --impl, then per --variant NAME=impl:...
    implementations: tuple[impls.Implementation, ...] = ()
    impl_variants: tuple[vr.Variant | None, ...] = ()  # the variant of each of them (None for a plain --impl)
    first_use: tuple[str, ...] = ()  # pinned tools this machine lacks, installed while the refs build (firstuse)


@dataclass(frozen=True)
class LoadedTarget:
    """What the scenarios file says for the request's target: the config, the target, the checkout
    that is its origin (or None), and its scenarios at the request's size, S3 steps with the network
    profile each runs under settled."""
    cfg: Config
    target: TargetSpec
    origin: bl.Checkout | None
    scenarios: tuple[ScenarioSpec, ...]


def load_target(request: RunRequest) -> LoadedTarget:
    """The request's target and its scenarios (LoadedTarget); refuses --daemon and --network where
    the target's backend has no use for them."""
    cfg = load_config(request.scenarios_path())
    target, origin = choose_target(cfg, request.target, request.repo, request.source)
    for flag, value in (("--daemon", request.daemon), ("--daemon-restart-every", request.daemon_restart_every),
                        ("--runs-per-daemon", request.runs_per_daemon)):
        if value is not None and target.backend != "ipfs":
            raise RefbenchError(f"{flag} applies to IPFS targets; {target.name!r} uses the {target.backend} backend")
    if request.network is not None:
        if target.backend != "s3":
            raise RefbenchError(f"--network applies to S3 targets; {target.name!r} uses the {target.backend} backend")
        nw.resolve(request.network, cfg.networks)
    scenarios = [s.for_run(request.quick, request.daemon) for s in cfg.scenarios_for(target.name)]
    return LoadedTarget(cfg=cfg, target=target, origin=origin,
                        scenarios=tuple(s.with_network(request.network) for s in scenarios) if target.backend == "s3"
                        else tuple(scenarios))


def shaping_reaches(request: RunRequest) -> bool:
    """Whether a shaper can stand between the commands and the server: the embedded MinIO, or a
    -b bucket whose endpoint is on loopback (the shaper forwards to loopback addresses only)."""
    return request.bucket is None or loopback_host(user_endpoint(request.endpoint_url) or "")


def unshaped_where_unreachable(scenarios: list[ScenarioSpec], request: RunRequest, reporter: Reporter
                               ) -> list[ScenarioSpec]:
    """A bucket reached over a real network (AWS, a remote server) has the network it has: a
    profile asked for on the command line is refused, and steps that name one run over the real
    network, recorded without a profile, with a warning."""
    if shaping_reaches(request):
        return scenarios
    if request.network not in (None, nw.LOOPBACK):
        raise RefbenchError(f"--network {request.network}: a profile shapes the traffic to a server on loopback "
                            f"(the embedded MinIO, or -b with an --endpoint-url on 127.0.0.1); s3://{request.bucket} "
                            "is reached over its own network")
    named = [f"{s.name} / {st.name}" for s in scenarios for st in s.steps if st.network != nw.LOOPBACK]
    if named:
        reporter.warn(f"s3://{request.bucket} is reached over its own network: {', '.join(named)} run there, "
                      "without their network profile")
    return [dataclasses.replace(s, steps=tuple(dataclasses.replace(st, network=None) for st in s.steps))
            for s in scenarios]


def run_networks(cfg: Config, scenarios: list[ScenarioSpec], step_filter) -> dict[str, nw.NetworkProfile]:
    """The profiles the selected steps run under, by name, in the order they first come."""
    names = dict.fromkeys(st.network for _, st in selected(scenarios, step_filter) if st.network)
    return {name: nw.resolve(name, cfg.networks, "a step's network") for name in names}


def validate(request: RunRequest, env: RunEnv, dry_run: bool = False) -> Validated:
    """Everything that can be refused before a build starts. A dry run only warns where a real
    run would stop for lack of disk, and does not need the tools."""
    reporter = env.reporter
    loaded = load_target(request)
    cfg, target, origin = loaded.cfg, loaded.target, loaded.origin
    variants = vr.builds(request.refs, request.variants, cfg.variants) if request.refs or request.variants else ()
    on_impls = tuple(v for v in variants if v.ref.startswith(impls.VARIANT_PREFIX))
    variants = tuple(v for v in variants if v not in on_impls)
    chosen, impl_variants = implementations_of(request, cfg, target, on_impls)
    if len(variants) + len(chosen) < 2:
        raise RefbenchError("give at least two refs to compare: -s OLD NEW [MORE ...] (or --variant NAME=REF,..., "
                            "or --impl NAME)")
    for v in variants:
        refs.classify(v.ref)  # refuse a malformed ref before anything runs
    scenarios, step_filter = select_scenarios(list(loaded.scenarios), list(request.only), chosen)
    family = Family(scenarios=tuple(scenarios), step_filter=step_filter)  # a shard's verdicts belong to the whole run's family
    if request.shard:
        scenarios, step_filter = shard.select(scenarios, step_filter, request.shard, request.runs,
                                              request.warmup, request.shard_times)
    if not scenarios:
        raise RefbenchError(f"target {target.name!r} has no scenarios in {cfg.path}")
    hf_flags, target_flags = split_flags(request)
    check_hyperfine_flags(hf_flags)
    validate_bucket(request.bucket, target)
    scenarios = unshaped_where_unreachable(scenarios, request, reporter) if target.backend == "s3" else scenarios
    networks = run_networks(cfg, scenarios, step_filter)
    prefix = check_prefix(request.prefix)  # refuse '', '/', '..', control characters, wildcards
    first_use: tuple[str, ...] = ()
    if not dry_run:
        first_use = validate_tools(target.backend == "s3" and not request.bucket,
                                   shaped=[n for n, p in networks.items() if not p.direct], find_tool=env.find_tool,
                                   why_not_installable=env.why_not_installable, restores=target.backend == "s3")
        validate_online(scenarios, target, env.namespaces_unavailable)
    local_root = local_path(request.local_path)
    cache_dir = paths.settled_cache_dir(request.builds_dir)  # no link a cache restore planted
    fixture_need, run_need, which, stored_peak = disk_needs(scenarios, cache_dir, target.backend,
                                               target.backend == "s3" and not request.bucket,
                                               len(variants) + len(chosen))
    try:
        fx.check_disk(cache_dir, fixture_need, "generating the fixtures")
        if env.stores:
            fx.check_disk(local_root or Path(tempfile.gettempdir()), run_need,
                          f"scenario {which!r} (downloads and stored objects)")
    except RunError as e:
        if not dry_run:
            raise
        reporter.warn(f"a real run would stop here: {e}")
    units = step_units(scenarios, step_filter, request.runs, request.warmup)
    for line in judge.design_warnings(units, request.rounds, request.criteria):  # before anything is measured
        reporter.warn(line)
    return Validated(request=request, cfg=cfg, target=target, origin=origin, scenarios=tuple(scenarios),
                     step_filter=step_filter, family=family, hf_flags=tuple(hf_flags), target_flags=tuple(target_flags),
                     prefix=prefix, local_root=local_root, cache_dir=cache_dir, fixture_need=fixture_need,
                     run_need=run_need, stored_peak=stored_peak, units=units, sampling=drawn_orders(request, units, env),
                     networks=MappingProxyType(networks), variants=variants, implementations=chosen,
                     impl_variants=impl_variants, first_use=first_use)


def implementations_of(request: RunRequest, cfg: Config, target: TargetSpec, on_impls: tuple = ()) -> tuple:
    """(the request's --impl, then its variants on implementations (`--variant NAME=impl:aws-cli,env=K=V`),
    each the declared implementation it names, of the target's backend; each one's variant or None).
    Settings that only mean something for a ref are refused with one line."""
    for v in on_impls:
        if v.go:
            raise RefbenchError(f"--variant {v.name}={v.ref}: an implementation takes env= and flags=, not go= "
                                "(go= builds a ref)")
    if request.go_given and (request.implementations or on_impls):
        impls.refuse_go(request.implementations, on_impls)
    chosen = tuple(impls.choose(spec, cfg.implementations) for spec in request.implementations) + \
        tuple(impls.choose(v.ref.removeprefix(impls.VARIANT_PREFIX), cfg.implementations) for v in on_impls)
    named = (None,) * len(request.implementations) + on_impls
    for impl, v in zip(chosen, named):
        if v and v.flags and not impl.takes_flags:
            raise RefbenchError(f"--variant {v.name}={v.ref}: flags= go where {impl.label}'s commands place "
                                f"{{{{ extra }}}}, and none of them does ({impl.origin}): put it where the client "
                                "takes its options, or use env=")
    for impl in chosen:
        if impl.backend != target.backend:
            raise RefbenchError(f"--impl {impl.spec}: a {impl.backend} client; {target.name!r} uses the "
                                f"{target.backend} backend")
    labels = [v.name if v else i.label for i, v in zip(chosen, named)]
    if len(set(labels)) != len(labels):
        raise RefbenchError(f"--impl: {labels[0]} given twice; a second copy of one install compares nothing")
    if chosen and request.source == "module" and not request.refs:
        raise RefbenchError("--source module applies to refs; an implementation comes from its own registry")
    return chosen, named


def drawn_orders(request: RunRequest, units: tuple[StepUnit, ...], env: RunEnv) -> Sampling:
    """The request's sampling for these steps, with the seed its rounds' orders are drawn from:
    --order-seed's, else one the environment draws for this run (issue 34: a fixed order put
    whatever favours a position on the same build in every run)."""
    sampling = request.sampling_for(units)
    return sampling if sampling.order_seed is not None else dataclasses.replace(sampling, order_seed=env.order_seed())


def split_flags(request: RunRequest) -> tuple[list[str], list[str]]:
    try:
        return shlex.split(request.hyperfine_flags or ""), shlex.split(request.target_flags or "")
    except ValueError as e:
        raise RefbenchError(f"cannot parse extra flags: {e}") from None


def validate_bucket(bucket: str | None, target) -> None:
    if bucket is not None and target.backend != "s3":
        raise RefbenchError(f"-b/--bucket applies to S3 targets; {target.name!r} uses the {target.backend} backend")
    if bucket is not None and not valid_bucket(bucket):
        raise RefbenchError(f"not a valid bucket name: {bucket!r}")


def valid_bucket(name: str) -> bool:
    return bool(re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", name)) and ".." not in name


def validate_tools(embedded_minio: bool, shaped: list[str] = (), find_tool=tools.find_tool,
                   why_not_installable=firstuse.why_not_installable, restores: bool = False) -> tuple[str, ...]:
    """The tools the run starts: hyperfine, go, the embedded MinIO, and toxiproxy for steps under
    a network profile other than loopback (`shaped`, named in the refusal); `find_tool` is the
    RunEnv's (a mock run finds every tool, as it starts none). Returns the pinned tools this
    machine lacks and the run can build itself (firstuse: MinIO, toxiproxy, and for an S3 target
    (`restores`) the restore tool); any other missing tool, or one that cannot be built here,
    refuses the run."""
    needed = ("hyperfine", "go") + (("minio",) if embedded_minio else ()) + ((TOXIPROXY,) if shaped else ())
    missing = tuple(tool for tool in needed if not find_tool(tool))
    for tool in missing:
        why_not = why_not_installable(tool)
        if why_not:
            why = f" (network profile {', '.join(shaped)}; or --only the loopback steps)" if tool == TOXIPROXY else ""
            built = "" if tool in ("hyperfine", "go") else f"; it cannot be built on first use: {why_not}"
            raise RefbenchError(f"{tool} not found ({paths.tools_bin()} or PATH){why}{built}: run `refbench setup` "
                                "(`make setup` in a checkout); `refbench doctor` says what is missing")
    # the restore tool first: the smaller build, whose standard library MinIO's then reuses. A run
    # that cannot build it restores by server-side copies, as without it (S3Backend.restore_tool)
    wanted = restores and not find_tool(RESTORE_TOOL) and not why_not_installable(RESTORE_TOOL)
    return ((RESTORE_TOOL,) if wanted else ()) + missing


def validate_online(scenarios: list[ScenarioSpec], target: TargetSpec,
                    namespaces_unavailable: Callable[[], str | None] = sandbox.unavailable) -> None:
    """An online kubo daemon runs only in a network namespace of the run's own, and a cached state
    is restored only through an overlay mounted in one: where this machine cannot, the run is
    refused before anything is built (never run on the real network, never with a stale repo).
    `namespaces_unavailable`: the RunEnv's probe, why no namespace can be made (None: one can)."""
    if target.backend != "ipfs":
        return
    online = [s.name for s in scenarios if s.daemon_mode == "online"]
    why = namespaces_unavailable() if online else None
    if why:
        raise RefbenchError(f"kubo's online daemon ({', '.join(online)}) runs only in a network namespace of "
                            f"the run's own, and none can be made here ({why}); use --daemon offline "
                            "(the daemon without networking) or --daemon none")
    stateful = [s.name for s in scenarios if s.state]
    why = snapshot.overlay_unavailable() if stateful else None
    if why:
        raise RefbenchError(f"{', '.join(stateful)} restores a cached repo before every run through an overlay "
                            f"mount, which this machine cannot make ({why}); leave it out with --only")


def local_path(text: str | None) -> Path | None:
    if not text:
        return None
    root = Path(text).expanduser()
    if not root.is_dir():
        raise RefbenchError(f"-l/--local-path {text!r} is not a directory")
    return root


def choose_target(cfg, name: str | None, repo: str | None, source: str, cwd: Path | None = None):
    """(target, checkout origin or None). Without -t, the target whose module the go.mod of the git
    checkout around `cwd` declares (else s5cmd, else the first declared); that checkout is then
    the origin unless --repo or --source module says otherwise."""
    checkout = None
    if name is None or (repo is None and source == "git"):
        checkout = bl.go_checkout(cwd)
    inferred = cfg.target_for_module(checkout.module) if checkout else None
    if name is None:
        name = inferred.name if inferred else "s5cmd" if "s5cmd" in cfg.targets else next(iter(cfg.targets), "s5cmd")
    if name not in cfg.targets:
        raise RefbenchError(f"unknown target {name!r} (declared in {cfg.path}: {', '.join(cfg.targets)})")
    target = cfg.targets[name]
    origin = checkout if inferred is target and repo is None and source == "git" else None
    return target, origin


def select_scenarios(scenarios: list[ScenarioSpec], only: list[str], implementations: tuple = ()):
    """Return (scenarios, step filter) for --only NAME: scenario, step, or 'scenario/step'. An
    opt-in scenario (sync over 1 M objects) runs only when --only names it or one of its steps as
    'scenario/step': a step name alone, shared with everyday scenarios, does not bring it in.
    Without --only, a run with implementations runs the scenarios one of them has commands for
    (the bundled `s3 clients, ...` ones, opt-in otherwise)."""
    if not only and implementations:
        return [s for s in scenarios if any(i.supports(s.name, st.name) for i in implementations
                                             for st in s.steps)], None
    if not only:
        return [s for s in scenarios if not s.opt_in], None
    wanted = [o.strip().lower() for o in only]
    known = {s.name.lower() for s in scenarios} | {st.name.lower() for s in scenarios for st in s.steps} | \
        {f"{s.name}/{st.name}".lower() for s in scenarios for st in s.steps}
    unknown = [o for o in only if o.strip().lower() not in known]
    if unknown:
        names = ", ".join(sorted({s.name for s in scenarios} | {st.name for s in scenarios for st in s.steps}))
        raise RefbenchError(f"--only {unknown[0]!r} matches no scenario or step (known: {names})")

    def keep(sc: ScenarioSpec, st) -> bool:
        names = (sc.name.lower(), f"{sc.name}/{st.name}".lower()) + (() if sc.opt_in else (st.name.lower(),))
        return any(w in names for w in wanted)

    return [s for s in scenarios if any(keep(s, st) for st in s.steps)], keep


def family_size(scenarios: list[ScenarioSpec], step_filter, runs: int, n_builds: int, n_metrics: int = 1) -> int:
    """Contrasts that can reach a verdict in this run (steps of 2+ runs x contenders x metrics):
    the family whose false alarms the run controls together."""
    steps = sum(1 for u in step_units(scenarios, step_filter, runs, 0) if u.judged)
    return max(1, steps * (n_builds - 1) * n_metrics)


def disk_needs(scenarios: list[ScenarioSpec], cache_dir: Path, backend_kind: str, embedded: bool,
               n_builds: int) -> tuple[int, int, str, int]:
    """(bytes new fixtures will allocate, peak bytes a scenario writes while it runs, which one,
    peak bytes stored in the backend)."""
    fixture_need, run_need, which, stored_peak = 0, 0, "", 0
    seen = set()
    for s in scenarios:
        files, total, allocated = fx.planned_bytes(s.fixture)
        key = s.fixture.key()
        if key not in seen and not fx.marker_path(fx.fixture_dir(s.fixture, cache_dir)).exists():
            fixture_need += allocated
        seen.add(key)
        local = max((st.local_copies for st in s.steps), default=0) * total
        # stored on this machine: IPFS keeps a repo per build; an embedded MinIO one shared copy
        on_disk = n_builds if backend_kind == "ipfs" else 1 if embedded else 0
        stored = (s.stored_copies + max((st.stored_copies for st in s.steps), default=0)) * total * on_disk
        if local + stored > run_need:
            run_need, which = local + stored, s.name
        stored_peak = max(stored_peak, stored)
    return fixture_need, run_need, which, stored_peak


def resolve_cpus(spec) -> tuple[frozenset[int] | None, frozenset[int] | None]:
    """(client CPUs, server CPUs) for --cpus; 'auto' gives the server the last CPU when there are
    at least two, so the embedded server and the client do not take turns on one core."""
    if spec in (None, "off"):
        return None, None
    if spec == "auto":
        have = sorted(os.sched_getaffinity(0))
        return (frozenset(have[:-1]), frozenset(have[-1:])) if len(have) >= 2 else (None, None)
    return spec


# ---- resolve and build -----------------------------------------------------------------------
Build = bl.BuiltRef | impls.ImplBuild  # a ref's build or an implementation's install: what the runner measures


@dataclass(frozen=True)
class Resolved:
    """The refs resolved to commits, with the builder that will build them and their labels."""
    builder: Builder
    refs: tuple[ResolvedRef, ...]  # in the request's order
    labels: tuple[str, ...]


def resolve(validated: Validated, env: RunEnv) -> Resolved:
    request, target, origin, reporter = validated.request, validated.target, validated.origin, env.reporter
    builder = env.builder(validated)
    if origin:
        reporter.info(f"inside a checkout of {target.name} ({origin.module}): building from {origin.root}")
    if not validated.variants:  # implementations alone: no ref to resolve
        return Resolved(builder=builder, refs=(), labels=())
    reporter.info(f"resolving {len(validated.variants)} refs of {target.name} from "
                  f"{'the Go module proxy' if request.source == 'module' else builder.repo_url}")
    # each build's Go: its variant's own, else --go's for its position, else the builder's choice
    gos = tc.per_build(request.go, len(validated.variants), builder.go)
    resolved = builder.resolve_all([v.ref for v in validated.variants], tuple(v.go or g for v, g in zip(validated.variants, gos)))
    labels = vr.labels(validated.variants, bl.unique_labels(resolved))
    for lab, r in zip(labels, resolved):
        reporter.info(f"  {lab}: {r.sha} (Go: {r.toolchain})")
    return Resolved(builder=builder, refs=tuple(resolved), labels=tuple(labels))


def build_all(res: Resolved, env: RunEnv, validated: Validated | None = None) -> tuple[tuple[Build, ...], float]:
    """(builds in the request's order, seconds spent building and installing): the refs' builds and
    the implementations' installs (env.install), in the order the command line gave the kinds."""
    reporter, t0 = env.reporter, env.clock()
    built = []
    for r, lab in zip(res.refs, res.labels):
        if not res.builder.cached(r):
            reporter.info(f"building {lab} ({r.short}) ...")
        b = res.builder.build(r, lab)
        reporter.info(f"  {lab}: {'built in %.0f s' % b.build_seconds if b.built_now else 'cached'} -> {b.binary}")
        built.append(b)
    installed = []
    for impl, v in zip(validated.implementations, validated.impl_variants) if validated else ():
        b = impls.ImplBuild(impl, env.install(impl, reporter.info), validated.target.name, v.name if v else None)
        reporter.info(f"  {b.label}: {'installed in %.0f s' % b.build_seconds if b.built_now else 'cached'} -> "
                      f"{b.binary}")
        installed.append(b)
    return tuple(impls.merge(built, installed, validated.request.impl_first if validated else False)), env.clock() - t0


# ---- identical binaries ----------------------------------------------------------------------
def same_commands(scenarios: list[ScenarioSpec], i: int) -> bool:
    """Whether build position i runs the same commands as the baseline in every scenario. A
    template sees per build only the build's own binary, label and paths, and the scenario's
    `vary` values: the same ref twice with `vary` (--numworkers 4 vs 64) compares configurations."""
    return all(opts[min(i, len(opts) - 1)] == opts[0] for s in scenarios for opts in s.vary.values())


def identical_contenders(validated: Validated, built: Sequence[Build]) -> frozenset[int]:
    """Positions of the contenders that need no measuring: a binary byte-identical to the baseline's
    (reproducible builds, builds.REPRODUCIBLE_GOFLAGS) running the same commands. None with
    --measure-identical (an A/A run) or when a hook replaces the builds (calibrate's shims)."""
    if validated.request.measure_identical or validated.request.hooks.builds:
        return frozenset()
    if impls.implementation_of(built[0]):
        return frozenset()
    base = built[0].binary_sha256
    variant = dict(zip([b.label for b in built if not impls.implementation_of(b)], validated.variants))
    return frozenset(i for i, b in enumerate(built[1:], 1)
                     if base and b.binary_sha256 == base and not impls.implementation_of(b)
                     and same_commands(validated.scenarios, i) and variant[b.label].same_run(validated.variants[0]))


def unmeasured(validated: Validated, built: Sequence[Build]) -> Measured:
    """What measure leaves when only the baseline is left to measure: no fixtures, no backend."""
    scenarios = [ScenarioResult(scenario=s, fixture=fx.planned(s.fixture, validated.cache_dir), steps=tuple(
        StepResult(scenario=s.name, step=st.name, runs=0, warmup=0, rounds=0, samples=MappingProxyType({}),
                   comparisons=(), hyperfine_seconds=0.0, stopped="identical")
        for st in s.selected_steps(validated.step_filter))) for s in validated.scenarios]
    return Measured(builds=tuple(built), scenarios=tuple(scenarios), stopped=None,
                    backend=BackendDescription(kind="none (nothing to measure)"), resources=MappingProxyType({}),
                    family_size=None, hyperfine_seconds=0.0, untimed_seconds=0.0,
                    untimed_by_kind=MappingProxyType({}), fixture_seconds=0.0,
                    load_before=os.getloadavg()[0], competing_cpu_share=None, client_cpus=None, server_cpus=None)


def measure_distinct(validated: Validated, built: Sequence[Build], env: RunEnv) -> Measured:
    """measure, leaving out the contenders identical to the baseline; each step then says
    `identical binary` for them, in the builds' order."""
    same = identical_contenders(validated, built)
    if not same:
        return measure(validated, built, env)
    for i in sorted(same):
        env.reporter.info(f"  {built[i].label}: the same binary as {built[0].label} "
                      f"(sha256 {built[0].binary_sha256[:12]}) and the same commands: not measured")
    distinct = [b for i, b in enumerate(built) if i not in same]
    m = measure(validated, distinct, env) if len(distinct) > 1 else unmeasured(validated, distinct)
    scenarios = tuple(dataclasses.replace(sr, steps=tuple(with_identical(st, built, same) for st in sr.steps))
                      for sr in m.scenarios)
    return dataclasses.replace(m, builds=tuple(built), scenarios=scenarios)


def with_identical(st: StepResult, built: Sequence[Build], same: frozenset[int]) -> StepResult:
    """The step's contrasts in the builds' order, `identical binary` for the contenders not measured."""
    measured: dict[str, list] = {}  # every metric's contrasts of each measured contender
    for c in st.comparisons:
        measured.setdefault(c.contender, []).append(c)
    return dataclasses.replace(st, comparisons=tuple(
        c for i, b in enumerate(built[1:], 1)
        for c in measured.get(b.label, [figures.identical(built[0].label, b.label)] if i in same else [])))


# ---- measure ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class BackendDescription:
    """What the backend said of itself (Backend.describe): its kind, and the facts results.json
    keeps as they came (`backend`), which refbench does not interpret."""
    kind: str
    # every other key, in the order describe() gave them
    facts: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def of(cls, described: Mapping[str, Any]) -> "BackendDescription":
        return cls(kind=str(described.get("kind", "")),
                   facts=rs.frozen({k: v for k, v in described.items() if k != "kind"}))

    def record(self) -> Mapping[str, Any]:
        """results.json's `backend`: kind first, then the facts."""
        return MappingProxyType({"kind": self.kind, **self.facts})


@dataclass(frozen=True)
class Measured:
    """What the measuring left: the scenarios that finished, and what it cost."""
    builds: tuple[Build, ...]  # the builds measured (calibrate's shims, when its hook replaced them)
    scenarios: tuple[ScenarioResult, ...]
    stopped: str | None  # why the run stopped early (the watchdog's reason, or INTERRUPTED)
    backend: BackendDescription
    resources: Mapping[str, Any]  # the watchdog's peaks
    family_size: int | None
    hyperfine_seconds: float
    untimed_seconds: float
    untimed_by_kind: Mapping[str, float]  # seconds of untimed commands, by kind
    fixture_seconds: float
    load_before: float
    competing_cpu_share: float | None
    client_cpus: frozenset[int] | None
    server_cpus: frozenset[int] | None
    hyperfine: str | None = None  # the hyperfine that measured: "hyperfine 2.0.0"
    explain_notes: tuple[str, ...] = ()  # why there is no request accounting or profile (explain.Explainer)

    @property
    def interrupted(self) -> bool:
        """Ctrl-C, SIGTERM or SIGHUP stopped it (run() then raises InterruptedRun)."""
        return self.stopped == INTERRUPTED


@contextlib.contextmanager
def watching(backend, workdir: Path, validated: Validated, floors: str | None) -> Iterator[Watchdog]:
    """The run's watchdog, under the machine's settings (REFBENCH_WATCHDOG: floors, or off)."""
    watchdog = Watchdog.for_run(backend, workdir, validated.cache_dir, run_need=validated.run_need,
                                fixture_need=validated.fixture_need, expected_data=validated.stored_peak, env=floors or "")
    try:
        watchdog.start()  # may stop the run at once (WatchdogStop) if memory or disk is already short
        yield watchdog
    finally:
        watchdog.stop()


def make_bench(validated: Validated, built: Sequence[Build], backend: Backend, workdir: Path,
               client_cpus: frozenset[int] | None, executor: Executor, env: RunEnv) -> Bench:
    request, hooks = validated.request, validated.request.hooks
    n_family = 2 if hooks.family_per_contender else len(built)
    n_metrics = len(executor.info.metrics(interleaved=request.interleave == "runs"))
    settings = variant_settings(validated, built)
    own = implementation_env(built, workdir)  # then a variant's env over an implementation's defaults
    settings["build_env"] = {**settings["build_env"], **{lab: {**e, **settings["build_env"].get(lab, {})}
                                                         for lab, e in own.items()}}
    return Bench(builds=built, backend=backend, executor=executor, workdir=workdir, cache_dir=validated.cache_dir,
                 sampling=validated.sampling, criteria=request.criteria,
                 target_flags=validated.target_flags, hyperfine_flags=validated.hf_flags,
                 verbose=request.verbose, measure_rss=request.rss, no_shell=request.no_shell,
                 build_flags=MappingProxyType(settings["build_flags"]),
                 build_env=MappingProxyType({lab: MappingProxyType(e) for lab, e in settings["build_env"].items()}),
                 family_size=family_size(validated.family.scenarios, validated.family.step_filter, request.runs, n_family,
                                         n_metrics), client_cpus=client_cpus,
                 clock=env.clock, pass_env=env.machine.pass_env, steps=len(validated.units))


def named_variants(validated: Validated) -> dict:
    """label -> variant of the named ones (a named variant is labelled by its name; a ref given with
    -s has no settings of its own); none where a hook replaced the builds (calibrate's shims)."""
    return {} if validated.request.hooks.builds else {v.name: v for v in validated.variants + validated.impl_variants
                                                    if v and v.name}


def variant_settings(validated: Validated, built: Sequence[Build]) -> dict:
    """The Bench's per-build flags and environment, by label, from the builds' variants."""
    named = named_variants(validated)
    by_label = {b.label: named[b.label] for b in built if b.label in named}
    return {"build_flags": {lab: v.flags for lab, v in by_label.items() if v.flags},
            "build_env": {lab: dict(v.env) for lab, v in by_label.items() if v.env}}


def implementation_env(built: Sequence[Build], workdir: Path) -> dict:
    """Each implementation's environment by label: a HOME of the run's own (made here, empty: no
    credentials but the run's), its defaults (implementations.runtime_env)."""
    out = {}
    for i, b in enumerate(built):
        if impl := impls.implementation_of(b):
            home = workdir / "home" / f"b{i}"
            home.mkdir(parents=True, exist_ok=True)
            out[b.label] = impls.runtime_env(impl, home)
    return out


def selected_steps(validated: Validated) -> Iterator[tuple]:
    return ((u.scenario, u.step) for u in validated.units)


def run_scenarios(validated: Validated, runner: Runner, env: RunEnv
                  ) -> tuple[list[ScenarioResult], WatchdogStop | KeyboardInterrupt | None, float]:
    """(the scenarios that finished, what stopped the run early (the watchdog, or Ctrl-C / SIGTERM)
    or None, seconds spent on fixtures)."""
    bench, reporter = runner.bench, env.reporter
    reporter.start(sum(len(split_runs(u.runs, bench.sampling.rounds)) for u in validated.units),
                   [b.label for b in bench.builds], bench.sampling.budget)
    reporter.info(f"sampling: {bench.sampling.describe()}")
    t_fixtures = 0.0
    try:
        for s in validated.scenarios:
            t0 = env.clock()
            reporter.status(f"{s.name}: fixture {s.fixture.kind} {format_size(s.fixture.size)} x {s.fixture.count}")
            fixture = fx.ensure(s.fixture, validated.cache_dir)
            t_fixtures += env.clock() - t0
            runner.run_scenario(s, fixture, validated.step_filter)
    except (WatchdogStop, KeyboardInterrupt) as e:  # keep the steps that finished (the runner's progress)
        return list(runner.progress.finished), e, t_fixtures
    finally:
        reporter.stop()
    return list(runner.progress.finished), None, t_fixtures


def measure(validated: Validated, built: Sequence[Build], env: RunEnv) -> Measured:
    """Fixtures, backend, watchdog and runner over the selected steps. A watchdog stop keeps the
    steps that finished (and raises only when none did)."""
    reporter = env.reporter
    load_before = os.getloadavg()[0]
    cpu_before = _cpu_accounting()
    run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(4)}"
    workdir, swept = make_workdir(run_id, validated.local_root)  # after sweeping temp dirs of killed runs
    for d in swept:
        reporter.info(f"removed {d}, left by a run that was killed")
    hooks = validated.request.hooks
    if hooks.builds:
        built = hooks.builds(built, workdir)
    client_cpus, server_cpus = resolve_cpus(validated.request.cpus)
    try:
        with env.backend(validated, workdir, run_id, server_cpus, reporter, env.machine) as backend:
            for line in sweep_lines(getattr(backend, "swept", [])):  # dead runs' prefixes removed below -p
                reporter.info(line)
            with watching(backend, workdir, validated, env.machine.watchdog) as watchdog:
                executor = env.executor(workdir, cpus=client_cpus, verbose=validated.request.verbose)
                observer = Explainer(backend, workdir, validated.request.profile, criteria=validated.request.criteria,
                                     **({} if env.perf is None else {"perf_ok": env.perf, "perf_why": "no perf here"}))
                runner = Runner(dataclasses.replace(make_bench(validated, built, backend, workdir, client_cpus, executor,
                                                               env), observer=observer),
                                status=lambda m: (watchdog.note(m), reporter.status(m)), on_round=reporter.advance,
                                on_state=reporter.not_measuring)
                done, stopped, t_fixtures = run_scenarios(validated, runner, env)
        # read after the backend closed, as the record always was (a server's stop may purge more)
        resources, described = watchdog.report(), backend.describe()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if stopped is not None and not done:
        raise stopped
    return Measured(builds=tuple(built), scenarios=tuple(done), stopped=stop_reason(stopped),
                    backend=BackendDescription.of(described), resources=rs.frozen(resources),
                    family_size=runner.bench.family_size, hyperfine_seconds=runner.progress.hyperfine_seconds,
                    untimed_seconds=runner.progress.untimed_seconds,
                    untimed_by_kind=MappingProxyType({**runner.progress.untimed, **observer.seconds}),
                    fixture_seconds=t_fixtures,
                    load_before=load_before, competing_cpu_share=_competing_share(cpu_before, _cpu_accounting()),
                    client_cpus=client_cpus, server_cpus=server_cpus,
                    hyperfine=f"hyperfine {runner.bench.executor.info.version_text}", explain_notes=tuple(observer.notes)
                    + impls.cid_notes([d.record() for d in done], built))


# ---- assemble --------------------------------------------------------------------------------
def timing(wall: float, build_seconds: float, m: Measured) -> rs.Timing:
    measured_wall = wall - build_seconds - m.fixture_seconds
    hf = m.hyperfine_seconds
    return rs.Timing(
        wall_seconds=round(wall, 3), build_seconds=round(build_seconds, 3),
        fixture_seconds=round(m.fixture_seconds, 3), hyperfine_seconds=round(hf, 3),
        untimed_command_seconds=round(m.untimed_seconds, 3),
        untimed_by_kind=MappingProxyType({k: round(v, 3) for k, v in m.untimed_by_kind.items()}),
        overhead_seconds=round(measured_wall - hf, 3),
        overhead_share=round((measured_wall - hf) / measured_wall, 4) if measured_wall > 0 and hf > 0 else None)


def settings_record(validated: Validated, m: Measured) -> rs.Settings:
    r = validated.request
    sharded = shard.settings(validated.step_filter)
    return rs.Settings(
        **validated.sampling.record(), quick=r.quick, threshold=r.threshold, alpha=r.alpha,
        noise_limit=r.noise_limit, metric_thresholds=MappingProxyType(dict(r.criteria.metric_thresholds)),
        multiple_testing=judge.MULTIPLE_TESTING, only=tuple(r.only), no_shell=r.no_shell,
        cpus=MappingProxyType({"client": tuple(sorted(m.client_cpus)) if m.client_cpus else None,
                               "server": tuple(sorted(m.server_cpus)) if m.server_cpus else None}),
        family_size=m.family_size, hyperfine_flags=tuple(validated.hf_flags),
        target_flags=tuple(validated.target_flags), shard=sharded.get("shard"),
        shard_steps=tuple(sharded["shard_steps"]) if sharded.get("shard_steps") is not None else None)


def build_records(validated: Validated, built: Sequence[Build]) -> tuple[rs.Build, ...]:
    """Each build's record with its variant's flags and environment, where it has them."""
    variants = named_variants(validated)
    return tuple(dataclasses.replace(b.record(), **rs.frozen(variants[b.label].record())) if b.label in variants
                 else b.record() for b in built)


def assemble(validated: Validated, builder: bl.Builder, m: Measured, scenarios: tuple[rs.Scenario, ...],
             board: dict | None, timing_record: rs.Timing) -> rs.Results:
    """The run's results, typed from the stages' own records."""
    r, target = validated.request, validated.target
    return rs.Results(
        refbench=__version__, created=rs.created_now(), command_line=tuple(r.command_line),
        target=rs.Target(name=target.name, repo=builder.repo_url if r.source == "git" else target.module,
                         source=r.source, backend=target.backend),
        environment=rs.Environment.probe(m.builds[0].toolchain, hyperfine=m.hyperfine,
                                         load_before=round(m.load_before, 2), competing_cpu_share=m.competing_cpu_share),
        settings=settings_record(validated, m), builds=build_records(validated, m.builds),
        baseline=m.builds[0].label, backend=m.backend.record(),
        scenarios=scenarios, scoreboard=rs.frozen(board), timing=timing_record,
        resources=rs.frozen(m.resources),  # peaks of memory, data dir, disk, server RSS
        stopped=m.stopped, explain_notes=m.explain_notes or None)


# ---- the whole run ---------------------------------------------------------------------------
def plan(request: RunRequest, env: RunEnv) -> tuple[Validated, Resolved]:
    """What a dry run shows: the request validated and its refs resolved; nothing built."""
    validated = validate(request, env, dry_run=True)
    return validated, resolve(validated, env)


def run(request: RunRequest, env: RunEnv) -> rs.Results:
    """Validate, resolve, build, measure and judge one run; the results document.

    When the watchdog stopped the run, the results hold the steps that finished and `stopped`
    says why; the caller writes them, then fails (see `stop_error`)."""
    t_wall = env.clock()
    validated = validate(request, env)
    with env.first_use(validated.first_use, env.reporter.info) as installs:
        res = resolve(validated, env)
        built, build_seconds = build_all(res, env, validated)
        installs.wait()  # the servers the backend starts: built meanwhile, on a machine without them
        m = measure_distinct(validated, built, env)
    judged = judge.verdicts([sr.record() for sr in m.scenarios], [b.label for b in m.builds], request.criteria,
                            request.hooks.family_per_contender)
    results = assemble(validated, res.builder, m, judged.scenarios, judged.scoreboard,
                       timing(env.clock() - t_wall, build_seconds, m))
    if m.interrupted:
        raise InterruptedRun(results)
    return results


INTERRUPTED = "interrupted (Ctrl-C, SIGTERM or SIGHUP)"


class InterruptedRun(KeyboardInterrupt):
    """A run interrupted after some of its steps finished, with their results: the one caller that
    writes files (run_and_write) writes them first, so an hour of measuring is not lost to a
    Ctrl-C; every other caller (bisect, calibrate) stops as on any interrupt."""

    def __init__(self, results: rs.Results):
        super().__init__(INTERRUPTED)
        self.results = results


def stop_reason(stopped: BaseException | None) -> str | None:
    """results.json's `stopped`: the watchdog's one line, or INTERRUPTED."""
    if stopped is None:
        return None
    return INTERRUPTED if isinstance(stopped, KeyboardInterrupt) else str(stopped)


def stop_error(results: rs.Results) -> WatchdogStop | None:
    """The error a run the watchdog stopped ends with, once what finished is written."""
    return None if results.stopped is None else WatchdogStop(results.stopped)


def _cpu_accounting() -> tuple[float, float, float] | None:
    """(wall, CPU seconds the whole machine was busy, CPU seconds of refbench and its reaped
    children: hyperfine, the target, MinIO, IPFS daemons)."""
    import resource
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    busy = (sum(fields) - fields[3] - (fields[4] if len(fields) > 4 else 0)) / os.sysconf("SC_CLK_TCK")
    own = sum(getattr(resource.getrusage(w), f) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
              for f in ("ru_utime", "ru_stime"))
    return time.monotonic(), busy, own


def _competing_share(before, after) -> float | None:
    """Share of the machine's CPU used by work other than this run while it ran."""
    if not before or not after or after[0] <= before[0]:
        return None
    other = (after[1] - before[1]) - (after[2] - before[2])
    return round(max(0.0, other) / ((after[0] - before[0]) * (os.cpu_count() or 1)), 4)
