"""The optional views a run or a merge writes beside its summary."""
from __future__ import annotations

from pathlib import Path

from ..analysis import analyse
from .csv import write_csv
from .html import write_html


def write_extras(results, html_path: str | None, csv_path: str | None) -> None:
    """--html and --csv: each written when its path is given."""
    if html_path:
        write_html(results, analyse(results), Path(html_path))
    if csv_path:
        write_csv(results, Path(csv_path))
