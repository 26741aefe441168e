"""The views a command writes beside its summary: --html and --csv."""
from __future__ import annotations

from ..errors import writing
from ..figures import Analysis
from ..results import Results
from .csv import write_csv


def write_extras(results: Results, analysis: Analysis | None, html_path: str | None, csv_path: str | None) -> None:
    """--html and --csv: each written when its path is given. The HTML report shows the results'
    analysis, computed before (analysis.analyse): a writer only writes."""
    if html_path:
        if analysis is None:
            raise ValueError(f"{html_path}: the HTML report needs the results' analysis (analysis.analyse)")
        from .html import write_html  # here: a markdown or CSV report loads no Jinja HTML template code
        with writing(html_path, "the HTML report") as out:
            write_html(results, analysis, out)
    if csv_path:
        with writing(csv_path, "the CSV") as out:
            write_csv(results, out)
