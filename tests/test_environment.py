"""Issue 38 part 4: the environment is read in one place, never at import, and every REFBENCH_
variable the code reads is listed in docs/usage.md's table."""
from __future__ import annotations

import re
from pathlib import Path

from refbench import paths, pins

ROOT = Path(__file__).resolve().parent.parent


def test_every_refbench_variable_the_code_names_is_in_the_docs_table():
    used = set()
    for f in (ROOT / "refbench").rglob("*.py"):
        used |= set(re.findall(r"REFBENCH_[A-Z_]+[A-Z]", f.read_text()))
    table = (ROOT / "docs" / "usage.md").read_text().split("## Environment", 1)[1]
    listed = set(re.findall(r"`(REFBENCH_[A-Z_]+)`", table))
    assert used - listed == set()


def test_tool_versions_and_places_are_read_when_asked_not_at_import(monkeypatch, tmp_path):
    """pins read MINIO_VERSION and TOXIPROXY_VERSION when it was imported."""
    monkeypatch.setenv("MINIO_VERSION", "v9.9.9")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert pins.version_of("minio") == "v9.9.9"
    assert paths.cache_root() == tmp_path / "refbench"
    monkeypatch.delenv("MINIO_VERSION")
    assert pins.version_of("minio") == pins.MINIO_VERSION


def test_the_places_are_one_record_read_from_a_given_environment(tmp_path):
    got = paths.Layout.from_environ({"XDG_CACHE_HOME": str(tmp_path), "REFBENCH_TOOLS_BIN": str(tmp_path / "b"),
                                     "REFBENCH_UNPINNED_TOOLS": "1", "TOXIPROXY_VERSION": "v1"})
    assert got.cache_root == tmp_path / "refbench" and got.tools_bin == tmp_path / "b"
    assert got.unpinned_tools and dict(got.tool_versions) == {"toxiproxy-server": "v1"}
    assert paths.default_builds_dir(paths.Layout.from_environ({"REFBENCH_BUILDS_DIR": "/x"})) == Path("/x")
