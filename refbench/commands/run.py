"""`bench.py -s OLD NEW [...]`: the main run. Parses the options into a RunRequest, runs the
pipeline, writes the summary, results.json and the extras, and turns the verdicts into an exit code.

Exit codes: 0 success; 1 a `slower` verdict with --fail-on-regression (wall) or --fail-on METRICS;
2 bad input or a failed build/run (a run the watchdog stopped writes what finished first); 3
refbench itself failed; 130 interrupted (cli.main maps them).
"""
from __future__ import annotations

import shlex

from .. import dryrun, pipeline, runenv
from ..errors import EXIT_OK, EXIT_REGRESSION
from ..units import format_size
from ._args import bind_flag_values, fails
from ._run_options import Outputs, request_from_args, run_and_write, run_env, run_parser


def main(argv: list[str], env: runenv.RunEnv | None = None) -> int:
    """`env`: the RunEnv the run goes through (default: the one the options ask for, run_env)."""
    args = run_parser().parse_args(bind_flag_values(argv))
    request = request_from_args(args, argv)
    env = env or run_env(args)
    if args.list:
        print_list(pipeline.load_target(request).cfg, request.quick, request.network)
        return EXIT_OK
    if args.dry_run:
        validated, res = pipeline.plan(request, env)
        print_plan(request, validated.target, validated.scenarios, validated.step_filter, res.builder, res.refs,
                   res.labels, validated.sampling, validated.networks, validated.implementations)
        return EXIT_OK
    results = run_and_write(request, Outputs.from_args(args), env)
    if fails(args, (c for _, st in results.steps() for c in st.all_contrasts())):
        return EXIT_REGRESSION
    return EXIT_OK


def print_list(cfg, quick: bool, network: str | None = None) -> None:
    """Every target, scenario and step; an S3 step with the network profile it runs under (with
    --network, where the step names none), an opt-in scenario with how to run it."""
    for t in cfg.targets.values():
        print(f"target {t.name}: {t.repo} (backend {t.backend}, binary {t.binary})")
        for s in cfg.scenarios_for(t.name):
            s = s.for_quick(quick)
            f = s.fixture
            shape = (f"tree dirs={f.dirs} files={f.count} depth={f.depth} max {format_size(f.size)}"
                     if f.kind == "tree" else f"{f.kind} {format_size(f.size)} x {f.count}")
            how = f"; daemon {s.daemon_mode}" + (", cached state" if s.state else "") if t.backend == "ipfs" else ""
            how += f"; opt-in: runs with --only {s.name!r}" if s.opt_in else ""
            clients = [i.label for i in cfg.implementations.values() if any(i.supports(s.name, st.name) for st in s.steps)]
            how += f" or with --impl ({', '.join(clients)})" if clients else ""
            steps = s.with_network(network).steps if t.backend == "s3" else s.steps
            print(f"  {s.name}: {shape}{how}; steps: "
                  + ", ".join(st.name + (f" [{st.network}]" if st.network else "") for st in steps))


def print_plan(args, target, scenarios, step_filter, builder, resolved, labels, sampling, networks=None,
               implementations=()) -> None:
    print(dryrun.render_plan(
        target, builder.repo_url if args.source == "git" else target.module, scenarios, step_filter,
        dryrun.planned_builds(builder, resolved, labels), bucket=args.bucket, prefix=args.prefix,
        endpoint=args.endpoint_url, sampling=sampling,
        cache_dir=builder.builds_dir, target_flags=shlex.split(args.target_flags or ""),
        hyperfine_flags=shlex.split(args.hyperfine_flags or ""), networks=networks or {},
        implementations=implementations))
