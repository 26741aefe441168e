"""The options every command that runs benchmarks shares (`bench.py -s OLD NEW`, calibrate,
nightly, bisect): the main parser, the RunRequest they amount to, the options a command passes
through to it, and a run with its files written. Here, not in commands/run.py, so that no
command imports another.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from .. import __version__, budget as bg, builds as bl, mock, paths, pipeline, results as rs, runenv, shard
from ..config import DAEMON_MODES
from ..errors import RefbenchError, writing
from ..pipeline import DEFAULT_RUNS, QUICK_RUNS, RunHooks, RunRequest
from ..sampling import UNTIL_DECIDED_RUNS
from ..progress import Reporter
from ..render import markdown
from ..render.format import fmt_pct
from ..verdict import counts_line
from . import COMMANDS
from ._args import (Parser, add_fail_args, add_go_arg, add_stats_args, bind_flag_values, budget, cpu_split, duration,
                    nonneg, positive, reserved_option, write_views)

SUBCOMMANDS = tuple(COMMANDS)


def run_parser() -> argparse.ArgumentParser:
    p = Parser(prog="bench.py", description="Compare builds of a Go storage tool with hyperfine and tell, "
               "with evidence, whether it got faster or slower. Subcommands: " + ", ".join(SUBCOMMANDS),
               formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("-s", "--s5cmd", "--refs", dest="refs", nargs="+", metavar="REF",
                   help="refs to compare, baseline first: tag, PR number, commit, branch, latest_release, HEAD")
    p.add_argument("-t", "--target", default=None,
                   help="target declared in the scenarios file (default: the target whose module the go.mod of "
                   "the git checkout around the current directory declares, else s5cmd)")
    p.add_argument("-w", "--warmup", type=nonneg, default=2, help="warm-up runs per build and step")
    p.add_argument("-r", "--runs", type=positive, default=None,
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
    add_go_arg(p)
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
    p.add_argument("--rounds", type=positive, default=5,
                   help="interleaved rounds per step (1 = plain hyperfine order: all A runs, then all B)")
    p.add_argument("--until-decided", action="store_true",
                   help="look after every round and add rounds to undecided steps until decided, --max-runs or "
                        "--max-time (alpha spending keeps the false-alarm rate)")
    p.add_argument("--budget", type=budget, metavar="DURATION",
                   help="time for the whole run's measuring, e.g. 10m, or 'none' for a fixed-size run: each step "
                        "stops once decided or once it cannot be decided in its share of the time left (default: "
                        f"{bg.DEFAULT_STEP_SECONDS[True]:.0f} s per step with --quick, "
                        f"{bg.DEFAULT_STEP_SECONDS[False]:.0f} s without; none when -r is given alone)")
    p.add_argument("--measure-identical", action="store_true",
                   help="measure contenders whose binary is byte-identical to the baseline's (an A/A check of the "
                        "machine); by default they are answered `identical binary` without measuring")
    p.add_argument("--max-runs", type=positive, default=None,
                   help="most runs per build and step when sampling sequentially (default: what the budget pays "
                        f"for; {UNTIL_DECIDED_RUNS} with --until-decided and no budget)")
    p.add_argument("--max-time", type=duration, default=None,
                   help="--until-decided / --budget: most time per step (default: 10m with --until-decided alone; "
                        "under a budget, the step's share of it)")
    p.add_argument("--interleave", choices=("runs", "rounds"), default=None,
                   help="runs: builds alternate run by run (A B B A ...); rounds: a round's runs of one build in a "
                        "row (default: runs; rounds with --rounds 1, which is plain hyperfine order)")
    p.add_argument("--order-seed", type=int, default=None, metavar="N",
                   help="the seed that draws which build leads each pair of rounds (results.json settings.order_seed): "
                        "to repeat a run's orders (default: drawn for every run)")
    p.add_argument("--no-shell", choices=("auto", "on", "off"), default="auto",
                   help="hyperfine -N (no intermediate shell): auto = where no command needs shell syntax")
    p.add_argument("--cpus", type=cpu_split, default=None, metavar="CLIENT[:SERVER]",
                   help="pin hyperfine and the target to CPUs CLIENT and the embedded server to SERVER, "
                        "e.g. 0:1 or 0-1:2-3 ('auto': the last CPU for the server, the rest for the client)")
    add_fail_args(p)
    p.add_argument("--no-rss", dest="rss", action="store_false",
                   help="do not measure peak RSS (it uses the first warm-up run)")
    p.add_argument("--profile", dest="profile", action="store_const", const="on", default="auto",
                   help="profile every step with perf (default: only steps whose wall or CPU verdict is "
                        "slower or faster); one untimed profiled run per build, repeated for short steps")
    p.add_argument("--no-profile", dest="profile", action="store_const", const="off",
                   help="never run perf, even for steps that moved")
    p.add_argument("--daemon", choices=DAEMON_MODES, default=None,
                   help="how every kubo scenario runs (default: each scenario's own; the bundled ones: online, "
                        "the daemon on a loopback-only network of the run's own, as users run kubo)")
    p.add_argument("--daemon-restart-every", type=nonneg, default=None, metavar="K",
                   help="give every build a fresh kubo repo and daemon after K rounds of a step, untimed "
                        "(default 1: each round its own; 0: one repo and daemon per build for the whole scenario)")
    p.add_argument("--runs-per-daemon", type=positive, default=None, metavar="N",
                   help="serve a round in parts of at most N runs a build, each part by a fresh pair of kubo "
                        "daemons and repos, untimed (default: the planned round's runs; 1: every run its own "
                        "daemon, so a daemon's own level is never shared by two runs, at the cost of a restart a run)")
    p.add_argument("--variant", action="append", default=[], metavar="NAME=REF[,go=GO][,flags=FLAGS][,env=K=V]",
                   help="a build named NAME, after the -s refs: REF with its own Go (as --go), the target's own "
                        "flags (after -sf's) and environment; or NAME alone for a [[variants]] table of the "
                        "scenarios file (repeatable; the name labels it everywhere)")
    p.add_argument("--impl", action="append", default=[], metavar="NAME[@VERSION]",
                   help="an implementation to compare beside the refs: another program doing the target's job "
                        "(aws-cli, s3cmd, s4cmd, rclone, or one a scenarios file declares as "
                        "[implementations.NAME]), installed pinned from its own registry and labelled 'NAME VERSION' "
                        "(repeatable; after the -s refs, or the baseline when --impl comes before -s)")
    p.add_argument("--network", default=None, metavar="PROFILE",
                   help="the network profile of every S3 step that names none of its own: loopback (the default: "
                        "the embedded MinIO directly), lan, region, or one the scenarios file declares "
                        "([networks.NAME]); toxiproxy on loopback shapes each connection's round trip and bandwidth")
    p.add_argument("-v", "--verbose", action="store_true", help="show the commands run and hyperfine's output")
    # hidden, as hyperfine's --debug-mode: a whole run on refbench.mock's stand-ins, no process
    p.add_argument("--executor", choices=runenv.EXECUTORS, default="hyperfine", help=argparse.SUPPRESS)
    p.add_argument("--mock", action="append", default=[], metavar="KEY=VALUE", help=argparse.SUPPRESS)
    p.add_argument("--version", action="version", version=f"refbench {__version__}")
    add_stats_args(p)
    return p


def request_from_args(args: argparse.Namespace, argv: list[str], hooks: RunHooks = RunHooks()) -> RunRequest:
    """The run options of parsed `run_parser` arguments (also a subcommand's, built on run_parser)."""
    impl = tuple(getattr(args, "impl", None) or ())  # with --go: refused by pipeline.implementations_of
    return RunRequest(
        implementations=impl, impl_first=impl_before_refs(argv),
        refs=tuple(args.refs or ()), target=args.target, scenarios=args.scenarios, only=tuple(args.only),
        quick=args.quick, runs=args.runs, warmup=args.warmup, rounds=args.rounds, bucket=args.bucket,
        prefix=args.prefix, local_path=args.local_path, hyperfine_flags=args.hyperfine_extra_flags,
        target_flags=args.target_flags, repo=args.repo, source=args.source, go=args.go or runenv.environ_go(),
        go_given=bool(args.go),
        endpoint_url=args.endpoint_url,
        until_decided=args.until_decided, measure_identical=args.measure_identical, budget=args.budget, max_runs=args.max_runs, max_time=args.max_time,
        interleave=args.interleave, order_seed=args.order_seed, no_shell=args.no_shell, cpus=args.cpus, shard=args.shard,
        shard_times=args.shard_times, threshold=args.threshold, alpha=args.alpha, noise_limit=args.noise_limit,
        metric_thresholds=tuple(args.metric_threshold),
        builds_dir=args.builds_dir, rss=args.rss, daemon=args.daemon, daemon_restart_every=args.daemon_restart_every,
        runs_per_daemon=args.runs_per_daemon, network=args.network,
        variants=tuple(args.variant), profile=args.profile,
        verbose=args.verbose,
        command_line=tuple(argv),
        hooks=hooks)


def impl_before_refs(argv) -> bool:
    """Whether the first --impl comes before the first -s on the command line: the baseline is
    then an implementation."""
    words = [w.split("=")[0] for w in argv]
    first = lambda names: next((i for i, w in enumerate(words) if w in names), len(words))  # noqa: E731
    return first(("--impl",)) < first(("-s", "--s5cmd", "--refs"))


def run_env(args: argparse.Namespace, reporter: Reporter | None = None) -> runenv.RunEnv:
    """The RunEnv the parsed options ask for: this machine's, or `--executor mock`'s (set by
    --mock KEY=VALUE); the machine's settings read here, once, from the environment."""
    machine = runenv.MachineSettings.from_environ()
    reporter = reporter or Reporter()
    if getattr(args, "executor", "hyperfine") == "mock":
        return mock.env(mock.MockSettings.parse(args.mock), machine, reporter)
    return runenv.real(machine, reporter)


def pass_through(extra: list[str], prog: str, reserved: tuple[str, ...], refusal: str) -> argparse.Namespace:
    """The run options a command that runs benchmarks (nightly, bisect) passes through, parsed by
    the main command's parser; `refusal` (with {} for the option) when one of them is an option
    in `reserved` (dests) that the command sets itself."""
    runp = run_parser()
    runp.prog = prog
    taken = reserved_option(runp, extra, reserved)
    if taken:
        raise RefbenchError(refusal.format(taken))
    return runp.parse_args(bind_flag_values(extra))


@dataclass(frozen=True)
class Outputs:
    """Where a run's files go."""
    summary: Path
    json: Path
    format: str = "md"
    html: str | None = None
    csv: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "Outputs":
        out = Path(args.output)
        return cls(out, Path(args.json) if args.json else out.parent / "results.json", args.format,
                   args.html, args.csv)


def write_outputs(results: rs.Results, outputs: Outputs) -> None:
    """results.json, the summary and the extras (--html, --csv); a write that fails (a full disk)
    is one line naming its file (errors.writing)."""
    with writing(outputs.json, "the results"):
        rs.write(results, outputs.json)
    with writing(outputs.summary, "the summary"):
        outputs.summary.parent.mkdir(parents=True, exist_ok=True)
        outputs.summary.write_text(markdown.render_markdown(results, outputs.format))
    write_views(results, outputs.html, outputs.csv)


def run_and_write(request: RunRequest, outputs: Outputs, env: runenv.RunEnv) -> rs.Results:
    """One run with its files written and its closing lines said; the results. A run the
    watchdog stopped fails here, after what finished is written."""
    reporter = env.reporter
    try:
        results = pipeline.run(request, env)
    except pipeline.InterruptedRun as e:  # what finished is written, then the interrupt goes on (exit 130)
        write_outputs(e.results, outputs)
        done = sum(1 for _ in e.results.steps())
        reporter.info(f"interrupted: wrote the {done} step{'s' if done != 1 else ''} that finished to "
                      f"{outputs.summary} and {outputs.json}: {counts_line(e.results.verdict_counts())}")
        raise
    write_outputs(results, outputs)
    busy = results.environment.busy_warning()
    if busy:
        reporter.warn(busy)
    counts = results.verdict_counts()
    reporter.info(f"wrote {outputs.summary} and {outputs.json}: {counts_line(counts)} "
                  f"(wall {results.timing.wall_seconds:.0f} s, hyperfine {results.timing.hyperfine_seconds:.0f} s)")
    for sc, st, c in results.regressions():
        reporter.info(f"  slower: {sc} / {st}: {c.contender} {fmt_pct(c.rel)} vs {c.baseline}")
    stop = pipeline.stop_error(results)
    if stop is not None:
        raise stop
    return results
