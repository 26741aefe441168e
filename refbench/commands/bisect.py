"""`bench.py bisect GOOD BAD --only STEP [run options ...]`: the first commit where a step turns
slower (the search is refbench.bisect; each probe a pipeline run with these run options)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from .. import bisect as bs, paths, pipeline
from ..errors import EXIT_ERROR, EXIT_OK, RefbenchError
from ..pipeline import RunRequest
from ._args import Parser, positive
from ._run_options import pass_through, request_from_args, run_env

# run options that would change what is compared: bisect sets them itself
RESERVED = ("refs", "json", "output", "fail_on_regression", "fail_on", "format", "html", "csv", "dry_run", "list")


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="bench.py bisect", description="Find the first commit between GOOD and BAD where a step "
               "turns slower than GOOD. Other options (--repo, --quick, -r, -w, --rounds, --threshold, "
               "--builds-dir, --until-decided, ...) pass through to each comparison.")
    p.add_argument("good", help="a ref where the step is fast (tag, commit, branch)")
    p.add_argument("bad", help="a later ref where the step is slower")
    p.add_argument("--only", required=True, metavar="STEP", help="the step to bisect ('scenario/step' or a unique name)")
    p.add_argument("-t", "--target", default=None, help="(default: the target of the checkout around the "
                   "current directory, else s5cmd)")
    p.add_argument("--repo", help="origin to build from (default: that checkout, else the target's repo)")
    p.add_argument("--scenarios", default=None, help="(default: ./refbench.toml, else the bundled file)")
    p.add_argument("--builds-dir", default=None)
    p.add_argument("--no-verify", dest="verify", action="store_false",
                   help="trust that BAD is slower than GOOD (saves one comparison)")
    p.add_argument("--no-until-decided", dest="until_decided", action="store_false",
                   help="do not add interleaved rounds to an inconclusive probe (by default each probe is "
                   "measured until decided or out of budget: --max-runs, --max-time)")
    p.add_argument("--max-probes", type=positive, default=20, help="give up after this many comparisons")
    p.add_argument("--variant", action="append", default=[], metavar="go=GO,flags=FLAGS,env=K=V|NAME",
                   help="build and run every build (GOOD, BAD, each probe) under these settings: the target's "
                   "flags, environment variables, Go; or NAME, a [[variants]] table of the scenarios file "
                   "(its ref is not used: bisect chooses the refs)")
    p.add_argument("--log", help="write every probe and the outcome here as JSON")
    return p


def parse(argv: list[str]) -> tuple[argparse.Namespace, bs.Search, RunRequest]:
    """bisect's own options, the search, and the run request of every probe (the other options
    parsed as `bench.py` parses them)."""
    args, extra = parser().parse_known_args(argv)
    run_args = pass_through(extra, "bench.py bisect", RESERVED, "bisect sets {} itself; leave it out")
    base = request_from_args(run_args, ["bisect", *argv]).replace(
        target=args.target, repo=args.repo, scenarios=args.scenarios,
        builds_dir=args.builds_dir or str(paths.default_builds_dir()),
        until_decided=args.until_decided or run_args.until_decided,
        # a probe is kept as its verdict alone: perf's runs of the probes that moved would be read by
        # no one, so none is taken unless --profile asks for them
        profile="off" if run_args.profile == "auto" else run_args.profile)
    if base.implementations:  # an implementation is pinned at one version: there is no history to walk
        raise RefbenchError(f"bisect walks a ref's commits; --impl {base.implementations[0]} is an implementation, "
                            f"installed at its pinned version")
    if len(args.variant) > 1:
        raise RefbenchError("bisect takes one --variant: every build it makes runs under it")
    search = bs.Search(args.good, args.bad, args.only, verify=args.verify, max_probes=args.max_probes,
                       variant=args.variant[0] if args.variant else None)
    args.executor, args.mock = run_args.executor, run_args.mock  # every probe's RunEnv (main: run_env)
    return args, search, base


def main(argv: list[str]) -> int:
    args, search, base = parse(argv)
    env = run_env(args)
    outcome = bs.bisect(search, base, run=lambda request, reporter: pipeline.run(request, env.with_reporter(reporter)),
                        env=env)
    bs.print_outcome(outcome)
    if args.log:
        Path(args.log).write_text(json.dumps(outcome.to_json(), indent=1))
    return EXIT_OK if outcome.candidates else EXIT_ERROR
