"""`bench.py report RESULTS`: render views of a saved results.json (any schema version this
refbench reads): the markdown summary or PR comment, and optionally HTML and CSV."""
from __future__ import annotations

import sys
from pathlib import Path

from .. import results as rs
from ..errors import EXIT_OK, writing
from ..render.markdown import render_markdown
from ._args import Parser, write_views


def parser() -> Parser:
    p = Parser(prog="bench.py report",
               description="render views of a saved results.json (any schema version this refbench reads)")
    p.add_argument("results", help="results.json of a run")
    p.add_argument("--html", help="write the self-contained HTML report here")
    p.add_argument("--csv", help="write one CSV row per step and build here")
    p.add_argument("-o", "--output", help="write the markdown summary here")
    p.add_argument("--format", choices=("md", "github"), default="md",
                   help="markdown flavour: md (summary.md) or github (PR comment, within GitHub's size limit)")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    results = rs.load(Path(args.results))
    write_views(results, args.html, args.csv)
    for written in (args.html, args.csv):
        if written:
            print(f"wrote {written}", file=sys.stderr)
    if args.output:
        with writing(args.output, "the summary") as out:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(render_markdown(results, args.format), encoding="utf-8")
        print(f"wrote {args.output}", file=sys.stderr)
    if not (args.html or args.csv or args.output):
        sys.stdout.write(render_markdown(results, args.format))
    return EXIT_OK
