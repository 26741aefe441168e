"""The tests' local origins (tests/origins.py) are made from the Go module cache when it holds every
module they pin (issue 38 part 6): the module proxy is asked only on a machine that lacks one, so
an origin made again in each pass and worker costs no network round trips (kubo's: 24.8 s -> 2.8 s)."""
from __future__ import annotations

import origins


def test_an_origin_is_made_again_from_the_module_cache_alone(tmp_path, monkeypatch, s5_origin):
    """s5_origin's making cached every module s5cmd's wrappers pin. Made again with the proxy a closed
    loopback port and no checksum database, it comes out the same, byte for byte; before, `go get`
    asked the proxy about every prefix of the package path and failed without one."""
    made = dict(origins._MODFILES)
    monkeypatch.setattr(origins, "_MODFILES", {})
    monkeypatch.setenv("GOPROXY", "http://127.0.0.1:9")  # nothing listens: a question to it fails
    monkeypatch.setenv("GOSUMDB", "off")
    origins.make_s5cmd_origin(tmp_path)
    assert origins._MODFILES and origins._MODFILES.items() <= made.items()


def test_a_module_missing_from_the_cache_is_fetched_through_the_proxy(tmp_path, monkeypatch):
    """A fresh machine: the module cache is empty, so the wrapper's modules come through the proxy
    (here a directory, tests/origins.module_proxy), as they always did."""
    proxy = origins.module_proxy(tmp_path, "example.com/dep", {"dep.go": "package dep\n\nfunc Hello() {}\n"})
    monkeypatch.setattr(origins, "_MODFILES", {})
    monkeypatch.setenv("GOMODCACHE", str(tmp_path / "modcache"))
    monkeypatch.setenv("GOPROXY", f"file://{proxy}")
    monkeypatch.setenv("GOSUMDB", "off")
    main = 'package main\n\nimport (\n\t"example.com/dep"\n)\n\nfunc main() { dep.Hello() }\n'
    gomod, gosum = origins.module_files("example.com/wrap", ("example.com/dep@v1.0.0",), main, tmp_path / "scratch")
    assert "example.com/dep v1.0.0" in gomod and "example.com/dep v1.0.0 h1:" in gosum
    assert (tmp_path / "modcache" / "cache" / "download" / "example.com" / "dep").is_dir()  # fetched
