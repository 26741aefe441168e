"""`bench.py report RESULTS`: render views of a saved results.json (any schema version this
refbench reads): the markdown summary or PR comment, and optionally HTML and CSV."""
from __future__ import annotations

import sys
from pathlib import Path

from .. import results as rs
from ..analysis import analyse
from ..errors import EXIT_OK
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
        write_html(results, analyse(results), Path(args.html))
        print(f"wrote {args.html}", file=sys.stderr)
    if args.csv:
        write_csv(results, Path(args.csv))
        print(f"wrote {args.csv}", file=sys.stderr)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(render_markdown(results, args.format), encoding="utf-8")
        print(f"wrote {args.output}", file=sys.stderr)
    if not (args.html or args.csv or args.output):
        sys.stdout.write(render_markdown(results, args.format))
    return EXIT_OK
