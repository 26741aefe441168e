"""`bench.py compare OLD NEW`: the same steps of two saved runs (e.g. last night's and tonight's),
as markdown on stdout, optionally as JSON; exit 1 on a regression with --fail-on-regression (or
--fail-on METRICS). The verdict options (--threshold, --metric-threshold, --alpha) judge it as
they judge a run (refbench.judge)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from .. import results as rs
from ..pairing import pair_runs
from ..errors import EXIT_OK, EXIT_REGRESSION, RefbenchError, writing
from ..render.markdown import render_pairing_md
from ._args import Parser, add_fail_args, add_stats_args, criteria_of, fails


def _names(old: str, new: str) -> tuple[str, str]:
    """How the pairing names the two files: their file names, or whole paths when those agree
    (tonight/results.json vs last/results.json)."""
    if Path(old).name != Path(new).name:
        return Path(old).name, Path(new).name
    return old, new


def parser() -> Parser:
    p = Parser(prog="bench.py compare",
               description="compare the same steps of two saved runs (e.g. last night's and tonight's)")
    p.add_argument("old", help="results.json of the earlier run")
    p.add_argument("new", help="results.json of the later run")
    p.add_argument("--match", choices=("label", "position"), default="label",
                   help="pair builds by label (default) or by position (baseline with baseline, ...)")
    p.add_argument("-o", "--output", help="also write the markdown comparison here")
    p.add_argument("--json", help="also write the comparison as JSON here")
    add_fail_args(p, "step and build")
    add_stats_args(p)
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    old, new = rs.load(Path(args.old)), rs.load(Path(args.new))
    cmp = pair_runs(old, new, criteria_of(args), args.match)
    if not cmp.pairs:
        raise RefbenchError(f"no build label is in both files ({', '.join(cmp.old_builds)} vs "
                            f"{', '.join(cmp.new_builds)}): use --match position")
    text = render_pairing_md(cmp, *_names(args.old, args.new))
    sys.stdout.write(text)
    if args.output:
        with writing(args.output, "the comparison") as out:
            out.write_text(text, encoding="utf-8")
    if args.json:
        with writing(args.json, "the comparison's JSON") as out:
            out.write_text(json.dumps(cmp.to_json(), indent=1), encoding="utf-8")
    if fails(args, (c for r in cmp.rows for c in r.all_contrasts())):
        return EXIT_REGRESSION
    return EXIT_OK
