"""`bench.py report RESULTS`: render views of a saved results.json (any schema version this
refbench reads): the markdown summary or PR comment, and optionally HTML and CSV."""
from __future__ import annotations

import sys
from pathlib import Path

from .. import results as rs
from ..analysis import analyse
from ..errors import EXIT_OK, writing
from ..render.csv import write_csv
from ..render.html import write_html
from ..render.markdown import render_markdown
from ._args import Parser


def main(argv: list[str]) -> int:
    p = Parser(prog="bench.py report",
               description="render views of a saved results.json (any schema version this refbench reads)")
    p.add_argument("results", help="results.json of a run")
    p.add_argument("--html", help="write the self-contained HTML report here")
    p.add_argument("--csv", help="write one CSV row per step and build here")
    p.add_argument("-o", "--output", help="write the markdown summary here")
    p.add_argument("--format", choices=("md", "github"), default="md",
                   help="markdown flavour: md (summary.md) or github (PR comment, within GitHub's size limit)")
    args = p.parse_args(argv)
    results = rs.load(Path(args.results))
    if args.html:
        with writing(args.html, "the HTML report") as out:
            write_html(results, analyse(results), out)
        print(f"wrote {args.html}", file=sys.stderr)
    if args.csv:
        with writing(args.csv, "the CSV") as out:
            write_csv(results, out)
        print(f"wrote {args.csv}", file=sys.stderr)
    if args.output:
        with writing(args.output, "the summary") as out:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(render_markdown(results, args.format), encoding="utf-8")
        print(f"wrote {args.output}", file=sys.stderr)
    if not (args.html or args.csv or args.output):
        sys.stdout.write(render_markdown(results, args.format))
    return EXIT_OK
