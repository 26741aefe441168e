"""The views of committed results files, byte for byte, in benchstat's style: each view is
rendered from a committed results.json and compared with a committed golden file. A change to
a view is a reviewed diff: `pytest tests/test_golden.py --update-golden` rewrites them."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ROOT
from refbench import results as rs
from refbench.compare import compare_runs
from refbench.github import comment_body
from refbench.render.csv import write_csv
from refbench.render.markdown import render_compare_md, render_markdown

DATA = ROOT / "tests" / "data"
# real runs: the bundled s5cmd scenarios (--quick, s5cmd v2.2.2 vs v2.3.0) and an injected slow-down
FILES = sorted(p.name for p in DATA.glob("results-*.json"))


@pytest.fixture(params=FILES)
def named_results(request) -> tuple[str, rs.Results]:
    return Path(request.param).stem, rs.load(DATA / request.param)


def test_summary_md(named_results, golden):
    name, results = named_results
    golden(f"{name}.summary.md", render_markdown(results, "md"))


def test_github_comment(named_results, golden):
    name, results = named_results
    golden(f"{name}.comment.md", comment_body(render_markdown(results, "github"), "https://example.invalid/run/1"))


def test_csv(named_results, golden, tmp_path):
    name, results = named_results
    write_csv(results, tmp_path / "r.csv")
    golden(f"{name}.csv", (tmp_path / "r.csv").read_text(encoding="utf-8"))


def test_compare_md_and_json(named_results, golden):
    """A run compared with itself: every step's samples against the same samples."""
    name, results = named_results
    cmp = compare_runs(results, results)
    golden(f"{name}.compare.md", render_compare_md(cmp, "old/results.json", "new/results.json"))
    golden(f"{name}.compare.json", json.dumps(cmp.to_json(), indent=1) + "\n")
