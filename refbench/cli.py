"""Command line: argument parsing and the pipeline, config -> refs -> builds -> fixtures ->
backend -> runner -> stats -> report.

Exit codes: 0 success; 1 a `slower` verdict with --fail-on-regression; 2 bad input or a failed
build/run; 130 interrupted (after cleaning up).
"""
from __future__ import annotations

import argparse
import logging
import os
import secrets
import shlex
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import __version__, builds as bl, fixtures as fx, paths, refs, report, shard, stats
from .backends import IpfsBackend, S3Backend, find_tool, make_workdir
from .lease import check_prefix, sweep_lines
from .watchdog import Watchdog, WatchdogStop
from .config import Scenario, load_config, format_size, human_bytes
from .errors import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_REGRESSION, RefbenchError, RunError
from .progress import Reporter
from .runner import Plan, Runner, check_hyperfine_flags, split_runs
from .commands._args import (  # noqa: F401 (re-exported until the commands move out of cli)
    Parser as _Parser, add_stats_args, bind_flag_values, cpu_split, duration,
    fraction as _fraction, nonneg as _nonneg, positive as _positive)

log = logging.getLogger("refbench")
DEFAULT_SCENARIOS = paths.bundled_scenarios()
from .commands import COMMANDS as _COMMANDS
SUBCOMMANDS = tuple(_COMMANDS)


DEFAULT_RUNS, QUICK_RUNS = 10, 20


def resolve_runs(args: argparse.Namespace) -> None:
    """-r's default depends on --quick (see run_parser)."""
    if args.runs is None:
        args.runs = QUICK_RUNS if args.quick else DEFAULT_RUNS


def resolve_cpus(spec) -> tuple[frozenset[int] | None, frozenset[int] | None]:
    """(client CPUs, server CPUs) for --cpus; 'auto' gives the server the last CPU when there are
    at least two, so the embedded server and the client do not take turns on one core."""
    if spec in (None, "off"):
        return None, None
    if spec == "auto":
        have = sorted(os.sched_getaffinity(0))
        return (frozenset(have[:-1]), frozenset(have[-1:])) if len(have) >= 2 else (None, None)
    return spec


def run_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="bench.py", description="Compare builds of a Go storage tool with hyperfine and tell, "
                "with evidence, whether it got faster or slower. Subcommands: " + ", ".join(SUBCOMMANDS),
                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("-s", "--s5cmd", "--refs", dest="refs", nargs="+", metavar="REF",
                   help="refs to compare, baseline first: tag, PR number, commit, branch, latest_release, HEAD")
    p.add_argument("-t", "--target", default=None,
                   help="target declared in the scenarios file (default: the target whose module the go.mod of "
                   "the git checkout around the current directory declares, else s5cmd)")
    p.add_argument("-w", "--warmup", type=_nonneg, default=2, help="warm-up runs per build and step")
    p.add_argument("-r", "--runs", type=_positive, default=None,
                   help=f"measured runs per build and step (default {DEFAULT_RUNS}; {QUICK_RUNS} with --quick, whose "
                        "short steps are cheap and need more runs to average out their jitter)")
    p.add_argument("-o", "--output_file_name", "--output", dest="output", default="summary.md",
                   help="markdown summary to write")
    p.add_argument("-b", "--bucket", help="S3 bucket to use (default: an embedded MinIO on loopback)")
    p.add_argument("-l", "--local-path", help="directory for this run's temporary files (default: system temp)")
    p.add_argument("-p", "--prefix", default="refbench", help="key prefix; each run adds a unique part below it")
    p.add_argument("-hf", "--hyperfine-extra-flags", default="", help="extra hyperfine flags, e.g. '-i'")
    p.add_argument("-sf", "--s5cmd-extra-flags", "--extra-flags", dest="target_flags", default="",
                   help="extra global flags for the target binary, e.g. '--numworkers 64'")
    p.add_argument("--repo", help="origin to build from: URL or local path (default: the checkout around the "
                   "current directory when it is the target's, else the target's repo)")
    p.add_argument("--source", choices=bl.SOURCES, default="git",
                   help="git: clone the repo; module: build versions from the Go module proxy (no clone)")
    p.add_argument("--endpoint-url", help="S3 endpoint URL for -b (default: S3_ENDPOINT_URL / AWS)")
    p.add_argument("--scenarios", default=None,
                   help=f"scenarios file (default: ./{paths.USER_SCENARIOS} if present, else the bundled one)")
    p.add_argument("--only", action="append", default=[], metavar="NAME",
                   help="run only this scenario, step, or 'scenario/step' (repeatable)")
    p.add_argument("--quick", action="store_true", help="scaled-down sizes: a whole run in minutes on 2 cores")
    p.add_argument("--shard", type=shard.parse, metavar="I/N",
                   help="run shard I of N: a deterministic, balanced share of the steps (all builds); see `merge`")
    p.add_argument("--shard-times", metavar="RESULTS", help="--shard: balance by the step times in this earlier results file")
    p.add_argument("--list", action="store_true", help="list targets, scenarios and steps, then exit")
    p.add_argument("--dry-run", action="store_true", help="resolve refs and print what would run; build nothing")
    p.add_argument("--json", help="results file (default: results.json beside the summary)")
    p.add_argument("--format", choices=("md", "github"), default="md", help="summary flavour")
    p.add_argument("--html", help="also write a self-contained HTML report here")
    p.add_argument("--csv", help="also write one CSV row per step and build here")
    p.add_argument("--builds-dir", default=str(paths.default_builds_dir()),
                   help="build and fixture cache (env REFBENCH_BUILDS_DIR; default builds/ in a checkout, "
                   "else $XDG_CACHE_HOME/refbench/builds)")
    p.add_argument("--rounds", type=_positive, default=5,
                   help="interleaved rounds per step (1 = plain hyperfine order: all A runs, then all B)")
    p.add_argument("--until-decided", action="store_true",
                   help="look after every round and add rounds to undecided steps until decided, --max-runs or "
                        "--max-time (alpha spending keeps the false-alarm rate)")
    p.add_argument("--budget", type=duration, metavar="DURATION",
                   help="time for the whole run's measuring, e.g. 10m: every step gets its planned runs, then "
                        "undecided steps get more rounds while they can still be decided in the time left")
    p.add_argument("--max-runs", type=_positive, default=60,
                   help="--until-decided / --budget: most runs per build and step")
    p.add_argument("--max-time", type=duration, default=600.0, help="--until-decided / --budget: most time per step")
    p.add_argument("--interleave", choices=("runs", "rounds"), default=None,
                   help="runs: builds alternate run by run (A B B A ...); rounds: a round's runs of one build in a "
                        "row (default: runs; rounds with --rounds 1, which is plain hyperfine order)")
    p.add_argument("--no-shell", choices=("auto", "on", "off"), default="auto",
                   help="hyperfine -N (no intermediate shell): auto = where no command needs shell syntax")
    p.add_argument("--cpus", type=cpu_split, default=None, metavar="CLIENT[:SERVER]",
                   help="pin hyperfine and the target to CPUs CLIENT and the embedded server to SERVER, "
                        "e.g. 0:1 or 0-1:2-3 ('auto': the last CPU for the server, the rest for the client)")
    p.add_argument("--fail-on-regression", action="store_true", help="exit 1 when any step is slower")
    p.add_argument("--no-rss", dest="rss", action="store_false",
                   help="do not measure peak RSS (it uses the first warm-up run)")
    p.add_argument("-v", "--verbose", action="store_true", help="show the commands run and hyperfine's output")
    p.add_argument("--version", action="version", version=f"refbench {__version__}")
    add_stats_args(p)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = "-v" in argv or "--verbose" in argv
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    _install_signal_handlers()
    from . import hyperfine
    # the pinned hyperfine `refbench setup` builds, then refbench's tools directories, then PATH
    paths.extend_path(first=(hyperfine.pinned_path().parent,))
    try:
        if argv and argv[0] in SUBCOMMANDS:
            from . import commands
            return commands.dispatch(argv[0], argv[1:])
        return cmd_run(run_parser().parse_args(bind_flag_values(argv)), argv)
    except RefbenchError as e:
        print(f"refbench: error: {e}", file=sys.stderr)
        if e.detail:
            print(e.detail.rstrip(), file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        print("refbench: interrupted; cleaned up what this run created", file=sys.stderr)
        return EXIT_INTERRUPTED


def _install_signal_handlers() -> None:
    def raise_interrupt(signum, frame):
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            signal.signal(sig, raise_interrupt)
        except (ValueError, OSError):  # not the main thread
            pass


def select_scenarios(scenarios: list[Scenario], only: list[str]):
    """Return (scenarios, step filter) for --only NAME: scenario, step, or 'scenario/step'."""
    if not only:
        return scenarios, None
    wanted = [o.strip().lower() for o in only]
    known = {s.name.lower() for s in scenarios} | {st.name.lower() for s in scenarios for st in s.steps} | \
        {f"{s.name}/{st.name}".lower() for s in scenarios for st in s.steps}
    unknown = [o for o in only if o.strip().lower() not in known]
    if unknown:
        names = ", ".join(sorted({s.name for s in scenarios} | {st.name for s in scenarios for st in s.steps}))
        raise RefbenchError(f"--only {unknown[0]!r} matches no scenario or step (known: {names})")

    def keep(sc: Scenario, st) -> bool:
        return any(w in (sc.name.lower(), st.name.lower(), f"{sc.name}/{st.name}".lower()) for w in wanted)

    return [s for s in scenarios if any(keep(s, st) for st in s.steps)], keep


def family_size(scenarios: list[Scenario], step_filter, runs: int, n_builds: int) -> int:
    """Comparisons that can reach a verdict in this run (steps of 2+ runs x contenders): the family
    whose false alarms the run controls together."""
    steps = sum(1 for s in scenarios for st in s.steps if (not step_filter or step_filter(s, st))
                and (st.runs or s.runs or runs) >= 2)
    return max(1, steps * (n_builds - 1))


def disk_needs(scenarios: list[Scenario], cache_dir: Path, backend_kind: str, embedded: bool,
               n_builds: int) -> tuple[int, int, str, int]:
    """(bytes new fixtures will allocate, peak bytes a scenario writes while it runs, which one,
    peak bytes stored in the backend)."""
    fixture_need, run_need, which, stored_peak = 0, 0, "", 0
    seen = set()
    for s in scenarios:
        files, total, allocated = fx.planned_bytes(s.fixture)
        key = s.fixture.key()
        if key not in seen and not fx.marker_path(Path(cache_dir) / "fixtures" / key).exists():
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


@dataclass(frozen=True)
class RunHooks:
    """What `calibrate` changes in an ordinary run: the builds it measures (shims around one
    binary), the family each contender's verdicts belong to, and the budget's scale."""
    builds: Callable[[list, Path], list] | None = None  # (built, workdir) -> builds to measure
    family_per_contender: bool = False  # a 2-build run's family: steps, not steps x contenders
    budget_scale: float = 1.0


def cmd_run(args: argparse.Namespace, argv: list[str], hooks: RunHooks = RunHooks()) -> int:
    t_wall = time.monotonic()
    resolve_runs(args)
    reporter = Reporter()
    args.scenarios = str(args.scenarios or paths.default_scenarios())
    cfg = load_config(args.scenarios)
    target, origin = choose_target(cfg, args.target, args.repo, args.source)
    args.target = target.name
    all_scenarios = [s.for_quick(args.quick) for s in cfg.scenarios_for(target.name)]
    if args.list:
        print_list(cfg, args.quick)
        return EXIT_OK
    if not args.refs or len(args.refs) < 2:
        raise RefbenchError("give at least two refs to compare: -s OLD NEW [MORE ...]")
    for r in args.refs:
        refs.classify(r)  # refuse a malformed ref before anything runs
    scenarios, step_filter = select_scenarios(all_scenarios, args.only)
    family = (scenarios, step_filter)  # a shard's verdicts belong to the whole comparison's family
    if args.shard:
        scenarios, step_filter = shard.select(scenarios, step_filter, args.shard, args.runs, args.warmup,
                                              args.shard_times)
    if not scenarios:
        raise RefbenchError(f"target {target.name!r} has no scenarios in {cfg.path}")
    try:
        hf_flags = shlex.split(args.hyperfine_extra_flags or "")
        target_flags = shlex.split(args.target_flags or "")
    except ValueError as e:
        raise RefbenchError(f"cannot parse extra flags: {e}") from None
    check_hyperfine_flags(hf_flags)
    if args.bucket is not None and target.backend != "s3":
        raise RefbenchError(f"-b/--bucket applies to S3 targets; {target.name!r} uses the {target.backend} backend")
    if args.bucket is not None and not _valid_bucket(args.bucket):
        raise RefbenchError(f"not a valid bucket name: {args.bucket!r}")
    args.prefix = check_prefix(args.prefix)  # refuse '', '/', '..', control characters, wildcards
    if not args.dry_run:
        for tool in ("hyperfine", "go") + (("minio",) if target.backend == "s3" and not args.bucket else ()):
            if not find_tool(tool):
                raise RefbenchError(f"{tool} not found ({paths.tools_bin()} or PATH): run `refbench setup` "
                                    "(`make setup` in a checkout); `refbench doctor` says what is missing")
    local_root = None
    if args.local_path:
        local_root = Path(args.local_path).expanduser()
        if not local_root.is_dir():
            raise RefbenchError(f"-l/--local-path {args.local_path!r} is not a directory")
    cache_dir = Path(args.builds_dir).expanduser().resolve()
    fixture_need, run_need, which, stored_peak = disk_needs(scenarios, cache_dir, target.backend,
                                               target.backend == "s3" and not args.bucket, len(args.refs))
    try:
        fx.check_disk(cache_dir, fixture_need, "generating the fixtures")
        fx.check_disk(local_root or Path(tempfile.gettempdir()), run_need,
                      f"scenario {which!r} (downloads and stored objects)")
    except RunError as e:
        if not args.dry_run:
            raise
        reporter.warn(f"a real run would stop here: {e}")

    builder = bl.Builder(target, cache_dir, origin.url if origin else args.repo, args.source,
                         pr_remote=origin.remote if origin else None, checkout=origin is not None)
    if origin:
        reporter.info(f"inside a checkout of {target.name} ({origin.module}): building from {origin.root}")
    reporter.info(f"resolving {len(args.refs)} refs of {target.name} from "
                  f"{'the Go module proxy' if args.source == 'module' else builder.repo_url}")
    resolved = [builder.resolve(r) for r in args.refs]
    labels = bl.unique_labels(resolved)
    for lab, r in zip(labels, resolved):
        reporter.info(f"  {lab}: {r.sha}")
    if args.dry_run:
        print_plan(args, target, scenarios, step_filter, builder, resolved, labels)
        return EXIT_OK

    t_builds = time.monotonic()
    built = []
    for r, lab in zip(resolved, labels):
        if not builder.cached(r):
            reporter.info(f"building {lab} ({r.short}) ...")
        b = builder.build(r, lab)
        reporter.info(f"  {lab}: {'built in %.0f s' % b.build_seconds if b.built_now else 'cached'} -> {b.binary}")
        built.append(b)
    build_seconds = time.monotonic() - t_builds

    load_before = os.getloadavg()[0]
    cpu_before = _cpu_accounting()
    run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(4)}"
    workdir, swept = make_workdir(run_id, local_root)  # after sweeping temp dirs of killed runs
    for d in swept:
        reporter.info(f"removed {d}, left by a run that was killed")
    backend = watchdog = stopped = None
    if hooks.builds:
        built = hooks.builds(built, workdir)
    settings = stats.Settings(threshold=args.threshold, alpha=args.alpha, noise_limit=args.noise_limit)
    client_cpus, server_cpus = resolve_cpus(args.cpus)
    if args.interleave is None:  # --rounds 1 keeps meaning plain hyperfine order: all A runs, then all B
        args.interleave = "rounds" if args.rounds == 1 else "runs"
    results_scenarios = []
    t_fixtures = 0.0
    runner = None
    try:
        if target.backend == "s3":
            backend = S3Backend.open(args.bucket, args.prefix, workdir, args.endpoint_url, run_id,
                                     stored_bytes=stored_peak, server_cpus=server_cpus)
            reporter.info(f"backend: {'embedded MinIO at ' + backend.endpoint if backend.server else 's3://' + backend.bucket}"
                          f", objects under s3://{backend.bucket}/{backend.prefix}/")
        else:
            backend = IpfsBackend.open(workdir)
        for line in sweep_lines(getattr(backend, "swept", [])):  # dead runs' prefixes removed below -p
            reporter.info(line)
        watchdog = Watchdog.for_run(backend, workdir, cache_dir, run_need=run_need, fixture_need=fixture_need,
                                    expected_data=stored_peak)
        watchdog.start()  # may stop the run at once (WatchdogStop) if memory or disk is already short
        plan = Plan(builds=built, backend=backend, workdir=workdir, cache_dir=cache_dir, runs=args.runs,
                    warmup=args.warmup, rounds=args.rounds, settings=settings, target_flags=target_flags,
                    hyperfine_flags=hf_flags, until_decided=args.until_decided, max_runs=args.max_runs,
                    max_time=args.max_time, verbose=args.verbose, measure_rss=args.rss,
                    interleave=args.interleave, no_shell=args.no_shell,
                    budget=args.budget * hooks.budget_scale if args.budget else None,
                    family_size=family_size(*family, args.runs, 2 if hooks.family_per_contender else len(built)),
                    client_cpus=client_cpus)
        runner = Runner(plan, progress=lambda m: (watchdog.note(m), reporter.status(m)), on_round=reporter.advance)
        runner.steps_total = sum(1 for s in scenarios for st in s.steps if not step_filter or step_filter(s, st))
        total_rounds = sum(len(split_runs(st.runs or s.runs or args.runs, args.rounds))
                           for s in scenarios for st in s.steps if not step_filter or step_filter(s, st))
        reporter.start(total_rounds, [b.label for b in built])
        try:
            for s in scenarios:
                t0 = time.monotonic()
                reporter.status(f"{s.name}: fixture {s.fixture.kind} {format_size(s.fixture.size)} x {s.fixture.count}")
                fixture = fx.ensure(s.fixture, cache_dir)
                t_fixtures += time.monotonic() - t0
                results_scenarios.append(runner.run_scenario(s, fixture, step_filter))
        except WatchdogStop as e:  # keep the steps that finished; report them, then exit 2
            stopped = e
            results_scenarios += e.partial
        finally:
            reporter.stop()
    finally:
        if watchdog is not None:
            watchdog.stop()
        if backend is not None:
            try:
                backend.close()
            except Exception as e:  # report, but never mask the original failure
                reporter.warn(f"cleanup of the backend failed: {e}")
        shutil.rmtree(workdir, ignore_errors=True)
    if stopped is not None and not results_scenarios:
        raise stopped

    # ---- statistics and report ----
    n_contenders = len(built) - 1
    for family in (range(n_contenders) if hooks.family_per_contender else [None]):
        members = [(st, i) for sr in results_scenarios for st in sr.steps for i in range(len(st.comparisons))
                   if family is None or i == family]
        for (st, i), c in zip(members, stats.adjust_family([st.comparisons[i] for st, i in members], settings)):
            st.comparisons[i] = c
    ratios: dict[str, list[float]] = {b.label: [] for b in built}
    for sr in results_scenarios:
        for st in sr.steps:
            for c in st.comparisons:
                ratios[c.contender].append(c.ratio)
            ratios[built[0].label].append(1.0)
    scoreboard = stats.geomean_scoreboard(ratios) if len(built) > 2 else None
    wall = time.monotonic() - t_wall
    hf = runner.hyperfine_seconds if runner else 0.0
    measured_wall = wall - build_seconds - t_fixtures
    timing = {
        "wall_seconds": round(wall, 3), "build_seconds": round(build_seconds, 3),
        "fixture_seconds": round(t_fixtures, 3), "hyperfine_seconds": round(hf, 3),
        "untimed_command_seconds": round(runner.untimed_seconds if runner else 0.0, 3),
        "untimed_by_kind": {k: round(v, 3) for k, v in (runner.untimed.items() if runner else [])},
        "overhead_seconds": round(measured_wall - hf, 3),
        "overhead_share": round((measured_wall - hf) / measured_wall, 4) if measured_wall > 0 else None,
    }
    results = report.build_results(
        target={"name": target.name, "repo": builder.repo_url if args.source == "git" else target.module,
                "source": args.source, "backend": target.backend},
        builds=[b.to_json() for b in built], backend=backend.describe(),
        settings={"runs": args.runs, "warmup": args.warmup, "rounds": args.rounds, "quick": args.quick,
                  "threshold": args.threshold, "alpha": args.alpha, "noise_limit": args.noise_limit,
                  "multiple_testing": "benjamini-hochberg across the run's comparisons",
                  "until_decided": args.until_decided, "max_runs": args.max_runs, "only": args.only,
                  "budget_seconds": args.budget, "interleave": args.interleave, "no_shell": args.no_shell,
                  "cpus": {"client": sorted(client_cpus) if client_cpus else None,
                           "server": sorted(server_cpus) if server_cpus else None},
                  "family_size": runner.plan.family_size if runner else None,
                  "hyperfine_flags": hf_flags, "target_flags": target_flags,
                  **shard.settings(step_filter)},
        scenarios=[sr.to_json() for sr in results_scenarios], timing=timing,
        env={**report.environment(built[0].toolchain), "load_before": round(load_before, 2),
             "competing_cpu_share": _competing_share(cpu_before, _cpu_accounting())},
        scoreboard=scoreboard, command_line=argv)
    results["resources"] = watchdog.report()  # peaks of memory, data dir, disk, server RSS
    if stopped is not None:
        results["stopped"] = str(stopped)
    out = Path(args.output)
    json_path = Path(args.json) if args.json else out.parent / "results.json"
    report.write_json(results, json_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report.render_markdown(results, args.format))
    if args.html or args.csv:
        from . import views
        views.write_extras(results, args.html, args.csv)
    busy = report.busy_warning(results)
    if busy:
        reporter.warn(busy)
    counts = report.verdict_counts(results)
    reporter.info(f"wrote {out} and {json_path}: {counts['slower']} slower, {counts['faster']} faster, "
                  f"{counts['no significant change']} no significant change, {counts['inconclusive']} inconclusive "
                  f"(wall {wall:.0f} s, hyperfine {hf:.0f} s)")
    for sc, st, c in report.regressions(results):
        reporter.info(f"  slower: {sc} / {st}: {c['contender']} {report.fmt_pct(c['rel'])} vs {c['baseline']}")
    if stopped is not None:
        raise stopped  # after writing what finished
    if args.fail_on_regression and counts["slower"]:
        return EXIT_REGRESSION
    return EXIT_OK


def run_and_load(argv: list[str]) -> tuple[int, dict | None]:
    """Run a comparison as the command line would (for nightly, bisect, ...) and return its exit
    code and results. argv must name --json; errors raise RefbenchError as usual."""
    args = run_parser().parse_args(bind_flag_values(argv))
    if not args.json:
        raise RefbenchError("run_and_load needs --json")
    code = cmd_run(args, argv)
    path = Path(args.json)
    return code, (report.load_results(path) if path.exists() else None)


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


def _valid_bucket(name: str) -> bool:
    import re
    return bool(re.match(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", name)) and ".." not in name


def print_list(cfg, quick: bool) -> None:
    for t in cfg.targets.values():
        print(f"target {t.name}: {t.repo} (backend {t.backend}, binary {t.binary})")
        for s in cfg.scenarios_for(t.name):
            s = s.for_quick(quick)
            f = s.fixture
            shape = (f"tree dirs={f.dirs} files={f.count} depth={f.depth} max {format_size(f.size)}"
                     if f.kind == "tree" else f"{f.kind} {format_size(f.size)} x {f.count}")
            print(f"  {s.name}: {shape}; steps: {', '.join(st.name for st in s.steps)}")


def print_plan(args, target, scenarios, step_filter, builder, resolved, labels) -> None:
    from . import dryrun  # the plan, with every command rendered as it would run
    print(dryrun.render_plan(
        target, builder.repo_url if args.source == "git" else target.module, scenarios, step_filter,
        dryrun.planned_builds(builder, resolved, labels), bucket=args.bucket, prefix=args.prefix,
        endpoint=args.endpoint_url, runs=args.runs, warmup=args.warmup, rounds=args.rounds,
        cache_dir=builder.builds_dir, target_flags=shlex.split(args.target_flags or ""),
        hyperfine_flags=shlex.split(args.hyperfine_extra_flags or "")))
