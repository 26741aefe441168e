"""`bench.py nightly --history DB [--since-last] [run options ...]`: tonight's run, recorded
in the history, with the trend page redrawn and the alarm as the exit code (see refbench.nightly).

Run options (--repo, --quick, --only, -r, -w, --rounds, --threshold, --builds-dir, ...) are parsed
by the main command's parser into the night's RunRequest.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Callable

from .. import changepoints as cpd, implementations as impls, nightly, results as rs, runenv, trust, variants as vr
from ..config import load_config
from ..errors import EXIT_OK, RefbenchError
from ..history import History, is_url, local_machine, open_history
from ..nightly import ALARMS, NightRequest, Shift
from ..pipeline import RunRequest, implementations_of
from ..render.format import fmt_interval, fmt_p, fmt_pct
from ..render.trend import render_trend, write_trend
from ..verdict import counts_line
from ._args import Parser, budget, fraction, positive
from ._run_options import Outputs, pass_through, request_from_args, run_and_write, run_env

DEFAULT_BUDGET = "30m"  # a night has time: undecided steps get more rounds while they can still be decided
# run options that would change what is compared or where it goes: nightly sets them itself
RESERVED = ("refs", "json", "output", "format", "dry_run", "list", "shard")


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="bench.py nightly", description="Compare latest_release with master (or last night's "
               "master with tonight's), keep the run in a history (SQLite file or postgresql:// URL), render "
               "the trend page, and exit 1 on a lasting regression: a step slower two nights running, or a new "
               "change point (--alarm says which). Other options (--repo, --quick, --only, -r, -w, --rounds, --threshold, "
               "--builds-dir, ...) pass through to the comparison.")
    # from a 0600 file (or the environment), so a URL with a password is on no command line (ps
    # shows those) and, from the file, in no environment (/proc/PID/environ: trust.history_url)
    url = trust.history_url()
    p.add_argument("--history", default=url, required=not url, metavar="DB",
                   help="SQLite history file (created if missing) or a postgresql://host/db URL (default: the "
                        "file REFBENCH_HISTORY_URL_FILE names, else REFBENCH_HISTORY_URL); a URL with a password "
                        "belongs in that 0600 file, not here: every process can read a command line")
    p.add_argument("--base", default="latest_release", help="baseline ref (default latest_release)")
    p.add_argument("--head", default="master", help="the ref to watch (default master)")
    p.add_argument("--since-last", action="store_true",
                   help="baseline = the HEAD commit of the last recorded run (falls back to --base on the first night)")
    p.add_argument("--machine", help="machine type recorded with the run; series and change points are per "
                   "machine type (default: CPU model x CPUs; env REFBENCH_MACHINE)")
    p.add_argument("--trend", help="trend page to write (default: trend.html beside the history)")
    p.add_argument("--out-dir", help="where each run's results.json and summary.md go "
                   "(default: nightly/<date> beside the history)")
    p.add_argument("--render-only", action="store_true", help="only re-render the trend page from the history")
    p.add_argument("--replay", metavar="FILE", help="record a night whose record the history could not take "
                   f"(the {nightly.RECORD_FILE} it left beside its results) and judge its alarm now; nothing is "
                   "measured")
    p.add_argument("--show-target", help="trend page: only this target")
    p.add_argument("--show-machine", help="trend page: only this machine type")
    p.add_argument("--budget", default=DEFAULT_BUDGET, metavar="DURATION",
                   help="time for the run's measuring: sequential sampling spent on the steps closest to a verdict "
                        f"(default {DEFAULT_BUDGET}; 'none' for the fixed-size run)")
    p.add_argument("--variant", action="append", default=[], metavar="NAME=REF[,go=GO][,flags=FLAGS][,env=K=V]",
                   help="also watch REF under these settings (its Go, the target's flags, environment), or NAME, a "
                   "[[variants]] table: a series of its own, labelled 'REF [NAME]', compared each night with the "
                   "baseline under the same settings, with its own alarms and trend charts (repeatable)")
    p.add_argument("--impl", action="append", default=[], metavar="NAME[@VERSION]",
                   help="also watch an implementation at its pinned version (bundled, or the scenarios file's "
                   "[implementations.NAME]): each night the head against it on the scenarios it supports, a "
                   "series of its own labelled 'impl:NAME@VERSION' (a new pin starts a new series); it never "
                   "alarms (repeatable)")
    p.add_argument("-t", "--target", default="s5cmd")
    p.add_argument("--repo", help="origin to build from (default: the target's repo)")
    g = p.add_argument_group("alarm")
    g.add_argument("--alarm", choices=ALARMS, default="lasting",
                   help="lasting (default): a step slower on two nights running (since-last: a jump that held "
                   "the next night), or a new change point to slower; changepoint: only a new change point; "
                   "verdict: tonight's comparison calls a step slower (a one-night spike alarms); both: "
                   "changepoint or verdict")
    g.add_argument("--cp-statistic", choices=("median", "mean"), default="median",
                   help="per night value of the watched build (default median)")
    g.add_argument("--cp-window", type=positive, default=cpd.Params.window, help="Otava window_len (nights)")
    g.add_argument("--cp-pvalue", type=fraction, default=cpd.Params.max_pvalue,
                   help="a change point's p-value must be below this (Otava max_pvalue)")
    g.add_argument("--cp-magnitude", type=fraction, default=None,
                   help="... and its relative change beyond this (Otava min_magnitude; default: the run's --threshold)")
    g.add_argument("--cp-min-nights", type=positive, default=cpd.Params.min_nights,
                   help="nights a new level must hold before it alarms (1: a single slow night can)")
    return p


def parse(argv: list[str]) -> tuple[argparse.Namespace, RunRequest]:
    """nightly's own options, and the night's run request (refs filled in when the night starts):
    the other options parsed as `bench.py` parses them, so `--scenarios=FILE` is the same as
    `--scenarios FILE`."""
    p = parser()
    args, extra = p.parse_known_args(argv)
    try:
        seconds = budget(args.budget)
    except argparse.ArgumentTypeError as e:
        p.error(f"argument --budget: {e}")
    run_args = pass_through(extra, "bench.py nightly", RESERVED,
                            "nightly sets {} itself; use --base/--head/--since-last")
    # command_line holds the pass-through options as given until the night's record is known (record_line)
    request = request_from_args(run_args, extra).replace(target=args.target, repo=args.repo, budget=seconds)
    args.executor, args.mock = run_args.executor, run_args.mock  # the night's RunEnv (main: run_env)
    return args, request


def cp_params(args: argparse.Namespace, request: RunRequest) -> cpd.Params:
    """The change-point rule; its magnitude defaults to the run's --threshold."""
    magnitude = args.cp_magnitude if args.cp_magnitude is not None else request.threshold
    return cpd.Params(window=max(2, args.cp_window), max_pvalue=args.cp_pvalue, min_magnitude=magnitude,
                      min_nights=args.cp_min_nights)


#: one run with its files written: (request, outputs, RunEnv) -> its results
Measure = Callable[[RunRequest, Outputs, runenv.RunEnv], rs.Results]


def main(argv: list[str], env: runenv.RunEnv | None = None, measure: Measure = run_and_write) -> int:
    """`env`: the RunEnv the night builds and runs with (this machine's, as the options ask, unless
    given); `measure`: how it measures one run (run_and_write unless given: a test's series)."""
    args, request = parse(argv)
    args.machine = args.machine or os.environ.get("REFBENCH_MACHINE") or local_machine()
    where = args.history if is_url(args.history) else str(Path(args.history).expanduser())
    home = Path.cwd() if is_url(where) else Path(where).parent
    trend = Path(args.trend) if args.trend else home / "trend.html"
    params = cp_params(args, request)
    db = open_history(where)
    try:
        if args.render_only:
            page = write_trend(db, trend, target=args.show_target, machine=args.show_machine, params=params,
                               statistic=args.cp_statistic)
            print(f"nightly: wrote {page}", file=sys.stderr)
            return EXIT_OK
        req = night_request(args, request, home, trend, params)
        if args.replay:
            return said(db, nightly.replay(db, req, Path(args.replay)), args)
        return night(db, args, req, env or run_env(args), measure)
    finally:
        db.close()


def night_request(args: argparse.Namespace, request: RunRequest, home: Path, trend: Path,
                  params: cpd.Params) -> NightRequest:
    return NightRequest(run=request, machine=args.machine, home=home, trend=trend, params=params, base=args.base,
                        head=args.head, since_last=args.since_last, alarm=args.alarm, statistic=args.cp_statistic,
                        budget_text=args.budget, out_dir=Path(args.out_dir) if args.out_dir else None,
                        show_target=args.show_target, show_machine=args.show_machine, draw=render_trend,
                        **night_series(args.variant, args.impl, request, args.head))


def night_variants(specs: list[str], request: RunRequest) -> tuple[vr.Variant, ...]:
    """The --variant series, parsed as a run parses them (names unique; NAME alone a [[variants]]
    table of the scenarios file) before anything is measured."""
    if not specs:
        return ()
    return vr.builds((), tuple(specs), load_config(request.scenarios_path()).variants)


def night_series(variant_specs: list[str], impl_specs: list[str], request: RunRequest, head: str) -> dict:
    """NightRequest's variants, implementations and impl_variants: the --variant series of refs, the
    --impl series, and the --variant NAME=impl:IMPL,env=... series (a named variant of an
    implementation), each checked as a run checks it (pipeline.implementations_of: an unknown name,
    another version than the pinned one, a client of another backend, one given twice, go= or
    flags= where its commands place none: one line) before anything is measured."""
    variants = night_variants(variant_specs, request)
    on_impls = tuple(v for v in variants if v.ref.startswith(impls.VARIANT_PREFIX))
    out = {"variants": tuple(v for v in variants if v not in on_impls), "implementations": (), "impl_variants": ()}
    if not impl_specs and not on_impls:
        return out
    cfg = load_config(request.scenarios_path())
    target = cfg.targets.get(request.target)
    if target is None:
        raise RefbenchError(f"unknown target {request.target!r} in {request.scenarios_path()}")
    chosen = implementations_of(request.replace(refs=(head,), implementations=tuple(impl_specs)), cfg, target,
                                on_impls)[0]
    return {**out, "implementations": chosen[:len(impl_specs)],
            "impl_variants": tuple(zip(on_impls, chosen[len(impl_specs):]))}


def night(db: History, args: argparse.Namespace, req: NightRequest, env: runenv.RunEnv,
          measure: Measure = run_and_write) -> int:
    """The night as nightly.night runs it, each series' run measured and written as the main command's
    (run_and_write)."""
    def one(tonight: RunRequest, summary: Path, json_path: Path):
        return measure(tonight, Outputs(summary=summary, json=json_path), env)

    return said(db, nightly.night(db, req, one, env=env), args)


def said(db: History, outcome, args: argparse.Namespace) -> int:
    """A night's (or a replayed night's) outcome on stderr and stdout, a variant's series after the
    head's, each line of a variant's saying which; the night's exit code."""
    for o in (outcome, *outcome.variants):
        if o.results is None:
            continue
        label = nightly.series_label(o.head_ref)
        series = f" [{label}]" if label else ""
        print(f"nightly{series}: run {o.run_id} recorded in {db.display} (machine {o.machine}); trend page "
              f"{o.trend}", file=sys.stderr)
        say_night(o.results, list(o.regressions), list(o.found), args.alarm, list(o.lasting), series)
    return outcome.code


def say_night(results, slower: list, found: list[Shift], rule: str, lasting: list[Shift] = (), series: str = ""
              ) -> None:
    """Tonight's verdicts, its regressions and the change points found, on stdout; `series` is
    ' [NAME]' for a variant's series (the alarm lines name it after the step)."""
    counts = results.verdict_counts()
    print(f"nightly{series}: {counts_line(counts)}")
    for sc, st, c in slower:
        print(f"REGRESSION {sc} / {st}{series}: {c.contender} is {fmt_pct(c.rel)} vs {c.baseline} "
              f"(95% CI {fmt_interval(c.ci_low, c.ci_high)}, p {fmt_p(c.p_value)})"
              + ("" if rule in ("verdict", "both") else " (tonight's verdict; the alarm needs a second night)"))
    for c in lasting:
        before = f"run {c.prev_run_id}" if c.prev_run_id is not None else "its baseline"
        print(f"LASTING REGRESSION {c.scenario} / {c.step}{series}: {fmt_pct(c.rel)}, slower since "
              f"{c.bad_sha[:10]} (run {c.run_id}; before it {c.good_sha[:10] or 'nothing'}, {before}); "
              f"bisect: {c.bisect}")
    for c in found:
        kind = ("CHANGE POINT" if c.alarm else "change point (faster)" if (c.rel or 0) < 0
                else "change point (an implementation's series: no alarm)")
        print(f"{kind} {c.scenario} / {c.step}{series}: {fmt_pct(c.rel)} (p {fmt_p(c.pvalue)}) "
              f"between {c.good_sha[:10]} (run {c.prev_run_id}) and {c.bad_sha[:10]} (run {c.run_id}); "
              f"bisect: {c.bisect}")
