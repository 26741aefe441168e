"""Every walk that decides trust sees every directory: one it cannot list is refused, never skipped
(review35d HIGH 2 / LOW 13). Root lists a 0311 directory anyway, so the unlistable case is stood in
by an os.scandir that raises PermissionError for the planted directory only."""
from __future__ import annotations

import json
import os

import pytest

from refbench import implementations as impls
from refbench import toolchain as tc


def _unlistable(monkeypatch, planted):
    real = os.scandir

    def scandir(path="."):
        if os.path.realpath(path) == os.path.realpath(planted):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)
    monkeypatch.setattr(os, "scandir", scandir)


def fake_registry(tmp_path, monkeypatch):
    """s3cmd and installers standing in for its registry (a function that writes its program), in a cache of tmp_path's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))

    def fake_pypi(impl, d):
        (d / "root" / "bin").mkdir(parents=True)
        program = d / "root" / "bin" / impl.program
        program.write_text("#!/bin/sh\necho pinned\n")
        program.chmod(0o755)
        return program, "python3.11"
    return impls.bundled()["s3cmd"], {"pypi": fake_pypi}


def _sealed_install(tmp_path, monkeypatch):
    impl, installers = fake_registry(tmp_path, monkeypatch)
    got = impls.install(impl, installers=installers)
    assert impls.cached(impl) is not None
    return impl, got.root


def test_a_planted_unlistable_directory_in_a_sealed_install_is_refused(tmp_path, monkeypatch):
    impl, root = _sealed_install(tmp_path, monkeypatch)
    planted = root / "bin" / "logging"
    planted.mkdir()
    (planted / "__init__.py").write_text("print('PLANTED')\n")
    planted.chmod(0o311)
    _unlistable(monkeypatch, planted)
    with pytest.raises(OSError, match="cannot list a directory of"):
        impls.tree_digest(root)
    assert impls.cached(impl) is None


def test_a_planted_empty_directory_or_a_changed_directory_mode_changes_the_digest(tmp_path, monkeypatch):
    impl, root = _sealed_install(tmp_path, monkeypatch)
    (root / "bin" / "sitecustomize").mkdir()
    assert impls.cached(impl) is None
    (root / "bin" / "sitecustomize").rmdir()
    assert impls.cached(impl) is not None
    (root / "bin").chmod(0o777)
    assert impls.cached(impl) is None


def test_the_toolchain_hash_refuses_an_unlistable_directory(tmp_path, monkeypatch):
    d = tmp_path / "toolchain"
    (d / "bin").mkdir(parents=True)
    (d / "bin" / "go").write_text("go\n")
    planted = d / "src" / "hidden"
    planted.mkdir(parents=True)
    before = tc.dir_hash(d, "golang.org/toolchain@v0.0.1-go1.26.8.linux-amd64")
    assert before.startswith("h1:")
    _unlistable(monkeypatch, planted)
    with pytest.raises(OSError, match="cannot list a directory of"):
        tc.dir_hash(d, "golang.org/toolchain@v0.0.1-go1.26.8.linux-amd64")
