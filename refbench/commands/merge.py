"""`bench.py merge shard*.json -o results.json`: one results file from the shards of a run,
judged as the unsharded run (refbench.judge); exit 1 on a regression with --fail-on-regression or
--fail-on, as the run itself would."""
from __future__ import annotations

import sys
from pathlib import Path

from .. import results as rs
from ._args import Parser, add_fail_args, fails, write_views
from ..errors import EXIT_OK, EXIT_REGRESSION, writing
from ..merge import merge_files
from ..render import markdown
from ..verdict import counts_line


def parser() -> Parser:
    p = Parser(prog="bench.py merge", description="merge the results files of a sharded comparison "
                "(--shard I/N): same builds and settings required; the run-wide p-value adjustment is "
                "recomputed over all shards. summary, report, compare and comment then read the merged file.")
    p.add_argument("shards", nargs="+", metavar="SHARD.json")
    p.add_argument("-o", "--output", required=True, metavar="RESULTS.json", help="merged results file")
    p.add_argument("--summary", metavar="FILE", help="also write the markdown summary")
    p.add_argument("--format", choices=("md", "github"), default="md", help="summary flavour")
    p.add_argument("--html", help="also write the HTML report")
    p.add_argument("--csv", help="also write the CSV")
    p.add_argument("--allow-missing", action="store_true", help="merge even when some shard's results are missing")
    add_fail_args(p)
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    merged, warnings = merge_files([Path(s) for s in args.shards], args.allow_missing)
    for w in warnings:
        print(f"refbench: warning: {w}", file=sys.stderr)
    with writing(args.output, "the merged results"):
        rs.write(merged, Path(args.output))
    if args.summary:
        with writing(args.summary, "the summary") as out:
            out.write_text(markdown.render_markdown(merged, args.format), encoding="utf-8")
    write_views(merged, args.html, args.csv)
    counts = merged.verdict_counts()
    print(f"merged {len(args.shards)} shards into {args.output}: {counts_line(counts)}", file=sys.stderr)
    if fails(args, (c for _, st in merged.steps() for c in st.all_contrasts())):
        return EXIT_REGRESSION
    return EXIT_OK
