"""`bench.py calibrate`: what this machine and these settings can detect, for any target, without
a second build (A/A and injected proportional slow-downs, repeated K times).

    bench.py calibrate -s REF [-t TARGET] [--repo ...] [--quick] [--only ...] [-K 5]
                       [--slowdowns 5,10,20 | --aa] [-o calibration.md] [--json calibration.json]
                       [run options: -r -w --rounds --budget --until-decided --interleave --cpus ...]
"""
from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path

from .. import calibrate as cal, pipeline
from ..errors import EXIT_OK, RefbenchError, writing
from ..pipeline import RunHooks
from ..progress import Reporter
from ..render.calibrate import render_calibration
from ..render.format import fmt_share
from ..results import Results
from ._args import bind_flag_values
from ._run_options import request_from_args, run_env, run_parser


def _slowdowns(text: str) -> list[int]:
    try:
        values = [int(x.strip().rstrip("%")) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole percentages like 5,10,20, got {text!r}") from None
    if not values or any(not 0 < v <= 500 for v in values):
        raise argparse.ArgumentTypeError(f"expected percentages between 1 and 500, got {text!r}")
    return sorted(set(values))


def parser() -> argparse.ArgumentParser:
    p = run_parser()
    p.prog = "bench.py calibrate"
    p.description = ("Measure what this machine can detect: one build against itself (A/A) and against "
                     "itself made P%% slower, repeated K times; per step the noise, false alarms, power, time "
                     "to a verdict and the runs that would reach 90%% power at +10%%.")
    g = p.add_argument_group("calibrate")
    g.add_argument("-K", "--repetitions", type=int, default=5, help="how many times to repeat the run")
    g.add_argument("--slowdowns", type=_slowdowns, default=None,
                   help="injected slow-downs in percent (default 5,10,20)")
    g.add_argument("--aa", action="store_true",
                   help="A/A only: the build against itself under two labels, run as it is (no shim, so its CPU and "
                        "memory are its own), to find the steps whose identical builds measure apart (bias)")
    p.set_defaults(output="calibration.md")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(bind_flag_values(argv))
    if args.repetitions < 1:
        raise RefbenchError(f"-K must be at least 1, got {args.repetitions}")
    if not args.refs or len(args.refs) != 1:
        raise RefbenchError("calibrate measures one build: give exactly one ref, -s REF")
    if args.aa and args.slowdowns:
        raise RefbenchError("calibrate --aa measures no slow-downs: drop --slowdowns, or --aa")
    slowdowns = [] if args.aa else args.slowdowns or [5, 10, 20]
    arm_list = cal.arms(slowdowns)
    ref = args.refs[0]
    # measure as a two-build run would: each arm its own family, the budget of two builds
    make = cal.aa_builds if args.aa else cal.shim_builds
    hooks = RunHooks(builds=partial(make, arm_list=arm_list), family_per_contender=True,
                     budget_scale=len(arm_list) / 2)
    request = request_from_args(args, argv, hooks).replace(refs=(ref, ref))
    # the settings a repetition records, read back as calibrate's line and json say them
    args.runs, args.interleave = request.runs, request.interleave
    results = []
    env = run_env(args)  # one for every repetition: a mock's seeds and clock go on from one to the next
    for k in range(args.repetitions):
        print(f"refbench: calibrate repetition {k + 1}/{args.repetitions}", file=sys.stderr)
        rep = env.with_reporter(Reporter())
        results.append(_measured(pipeline.run(request, rep), rep.reporter))
    criteria = request.criteria  # what the repetitions were judged by (figures.criteria)
    sampling = request.sampling
    run_settings = {**{k: v for k, v in sampling.record().items() if k != "until_decided"}, "quick": args.quick,
                    "sequential": sampling.sequential, "cpus": args.cpus if isinstance(args.cpus, str)
                    else None, "only": args.only, "threshold": args.threshold, "alpha": args.alpha}
    c = cal.analyse(results, arm_list, criteria, target=results[0].target.name, ref=ref,
                    run_settings=run_settings)
    out = Path(args.output)
    json_path = Path(args.json) if args.json else out.with_suffix(".json")
    with writing(out, "the calibration note"):
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(render_calibration(c, alpha=args.alpha, settings_line=settings_line(args)))
    with writing(json_path, "the calibration's JSON"):
        json_path.write_text(json.dumps(c.to_json(), indent=2) + "\n")
    biased = ", ".join(f"{s.scenario} / {s.step}" for s in c.biased_steps) or "none"
    print(f"refbench: wrote {out} and {json_path}: false verdicts in {c.runs_with_false_verdict}/{c.reps} runs "
          f"(wall: {c.runs_with_false_alarm}); biased steps: {biased}"
          + "".join(f"; +{p}% called slower in {fmt_share(c.power_overall(p))}" for p in c.slowdowns),
          file=sys.stderr)
    return EXIT_OK


def _measured(results: Results, reporter: Reporter) -> Results:
    """A repetition's results, or its failure: a run the watchdog stopped ends calibrate too."""
    busy = results.environment.busy_warning()
    if busy:
        reporter.warn(busy)
    stop = pipeline.stop_error(results)
    if stop is not None:
        raise stop
    return results


def settings_line(args: argparse.Namespace) -> str:
    """The run options the repetitions measured with, as the note's Settings line spells them."""
    return (f"-r {args.runs}, -w {args.warmup}, --rounds {args.rounds}, --interleave {args.interleave}"
            + (f", --budget {args.budget:.0f}s" if args.budget else "") + (", --until-decided" if args.until_decided else "")
            + (", --quick" if args.quick else "") + (f", --only {' / '.join(args.only)}" if args.only else ""))
