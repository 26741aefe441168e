"""The thirteenth reading (issue 35, /work/wt/review35m.md): what is left around the edges of the
trust boundary, LOWs each, closed with the attack planted in a throw-away place."""
from __future__ import annotations

import io
import zipfile

import pytest

from refbench.errors import RefbenchError


def test_setup_refuses_a_go_zip_entry_whose_name_holds_an_empty_component(tmp_path, monkeypatch):
    """The toolchain zip's entries are written under the name with the zip's prefix cut off, so
    `PREFIX//abs/path` was written at /abs/path, outside the data directory, although no entry
    starts with `/` or holds `..` (review35m M1). It takes a Go refbench pins no hash for
    (REFBENCH_UNPINNED_TOOLS=1), whose contents are unchecked anyway; its names are checked still.
    A loopback server stands in for the proxy."""
    from fakes.loopback import serving
    from refbench.commands import setup
    outside = tmp_path / "outside" / "written-by-the-zip"
    prefix = "golang.org/toolchain@v0.0.1-go1.99.0.linux-amd64/"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(prefix + "bin/go", "#!/bin/sh\necho go1.99.0\n")
        z.writestr(prefix + str(outside), "x")  # PREFIX//abs/path: the absolute path once cut
    with serving(buf.getvalue()) as url:
        monkeypatch.setenv("GOPROXY", url)
        monkeypatch.setenv("GO_TOOLCHAIN", "go1.99.0")
        monkeypatch.setenv("REFBENCH_UNPINNED_TOOLS", "1")
        monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
        monkeypatch.setenv("PATH", str(tmp_path / "no-go"))  # no Go on it: setup fetches one
        monkeypatch.setattr("platform.machine", lambda: "x86_64")
        with pytest.raises(RefbenchError, match="refusing the Go toolchain .*an entry named"):
            setup.ensure_go(tmp_path / "bin")
    assert not outside.exists()
    assert not list((tmp_path / "data").rglob("bin/go"))
