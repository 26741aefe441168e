"""The views a command writes beside its summary: --html and --csv."""
from __future__ import annotations

from ..errors import writing
from ..results import Results
from .csv import write_csv


def write_extras(results: Results, html_path: str | None, csv_path: str | None) -> None:
    """--html and --csv: each written when its path is given (the HTML report from the results'
    analysis, computed here, before it renders)."""
    if html_path:
        # imported here: the analysis and the charts need numpy, a markdown or CSV report does not
        from ..analysis import analyse
        from .html import write_html
        with writing(html_path, "the HTML report") as out:
            write_html(results, analyse(results), out)
    if csv_path:
        with writing(csv_path, "the CSV") as out:
            write_csv(results, out)
