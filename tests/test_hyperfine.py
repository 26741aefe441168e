"""refbench.hyperfine: version detection, locating the binary, reading --export-json files.

The data files are real exports (tests/data): hyperfine 1.15.0 (Debian's), 1.20.0 (the fallback
`refbench setup` builds) and 2.0.0 (the pin), each of `-n first 'sleep 0.01' -n second
'sh -c "exit 0"' --runs 3` (2.0 with --metrics all); hyperfine-2.0-failed.json of `-i -n ok true
-n fails 'sh -c "exit 3"' --runs 2`; and *-interleaved.json of one run each of `-n small 'python3
-c pass' -n big 'python3 -c "x=bytearray(64<<20)"' -n small 'python3 -c pass'`, which shows 1.x's
running maximum: the second `small` reports `big`'s 80 MB.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import need
from refbench import hyperfine, pins, tools
from refbench.errors import RefbenchError

DATA = Path(__file__).resolve().parent / "data"


def test_reads_a_hyperfine_1_15_export_without_memory():
    first, second = hyperfine.read_export(DATA / "hyperfine-1.15.json")
    assert (first.name, second.name) == ("first", "second")
    assert first.runs == 3 and len(first.times) == 3
    assert first.times[0] == pytest.approx(0.08904802744000001)
    # 1.15 exports the mean user/system time: spread over the runs
    assert first.user == (pytest.approx(0.00200874),) * 3 and first.system == (0.0,) * 3
    assert not first.per_run_cpu
    assert second.cpu == tuple(pytest.approx(0.00116674 + 0.0005751466666666667) for _ in range(3))
    assert first.exit_codes == (0, 0, 0)
    assert first.memory_bytes is None and first.peak_memory_bytes is None


def test_reads_a_hyperfine_1_20_export_with_memory_per_run():
    first, second = hyperfine.read_export(DATA / "hyperfine-1.20.json")
    assert first.name == first.command == "first"
    assert first.memory_bytes == (2932736, 2932736, 2932736)
    assert first.peak_memory_bytes == 2932736
    assert len(second.memory_bytes) == second.runs == 3
    assert first.user == (pytest.approx(0.0013153666666666664),) * 3
    assert all(isinstance(c, int) for c in first.exit_codes)


def test_reads_a_hyperfine_2_0_export_with_every_runs_own_figures():
    first, second = hyperfine.read_export(DATA / "hyperfine-2.0.json")
    assert (first.name, second.name) == ("first", "second")
    assert first.runs == 3 and first.times[0] == pytest.approx(0.011553793000000001)
    assert first.per_run_cpu and first.user == (pytest.approx(0.001361), pytest.approx(0.001559), pytest.approx(0.00153))
    assert first.system == (0.0, 0.0, 0.0) and first.exit_codes == (0, 0, 0)
    assert first.memory_bytes == (3145728,) * 3 and first.own_memory
    assert all(isinstance(m, int) for m in second.memory_bytes)
    assert first.instructions is None  # this machine's kernel lets hyperfine count none


def test_hyperfine_2_0_failed_runs_keep_their_exit_codes():
    ok, fails = hyperfine.read_export(DATA / "hyperfine-2.0-failed.json")
    assert ok.failed_runs == () and fails.exit_codes == (3, 3) and fails.failed_runs == (3, 3)


def test_1_x_memory_is_a_running_maximum_and_2_0_memory_is_each_runs_own():
    small, big, again = hyperfine.read_export(DATA / "hyperfine-1.20-interleaved.json")
    assert again.memory_bytes == big.memory_bytes and big.memory_bytes[0] > 64 * 2 ** 20  # small "has" big's peak
    assert not again.own_memory
    small, big, again = hyperfine.read_export(DATA / "hyperfine-2.0-interleaved.json")
    assert again.own_memory and again.memory_bytes[0] < 20 * 2 ** 20 < 64 * 2 ** 20 < big.memory_bytes[0]


def test_the_executor_keeps_only_figures_that_are_each_runs_own():
    from refbench.executor import own_results
    v1 = hyperfine.HyperfineInfo("hf", (1, 20, 0))
    v2 = hyperfine.HyperfineInfo("hf", (2, 0, 0))
    kept = own_results(hyperfine.read_export(DATA / "hyperfine-1.20-interleaved.json"), v1, interleaved=True)
    assert all(r.memory_bytes is None for r in kept) and all(len(r.user) == 1 for r in kept)
    kept = own_results(hyperfine.read_export(DATA / "hyperfine-1.20.json"), v1, interleaved=False)
    assert all(r.memory_bytes is None and r.user == () for r in kept)  # 3 runs: a mean is no run's own CPU
    kept = own_results(hyperfine.read_export(DATA / "hyperfine-2.0.json"), v2, interleaved=False)
    assert kept[0].memory_bytes == (3145728,) * 3 and len(kept[0].user) == 3
    assert v1.metrics() == ("wall", "cpu") and v1.metrics(interleaved=False) == ("wall",)
    assert v2.metrics() == ("wall", "cpu", "memory") and v2.missing() == ("instructions",)
    assert hyperfine.HyperfineInfo("hf", (2, 0, 0), counts_instructions=True).metrics()[-1] == "instructions"


def test_results_are_matched_to_the_names_refbench_gave():
    first, second = hyperfine.read_export(DATA / "hyperfine-2.0.json")
    assert hyperfine.match_results((first, second), ["first", "second"], "w") == (first, second)
    for names in (["second", "first"], ["first"], ["first", "second", "first"]):
        with pytest.raises(RefbenchError, match="w: hyperfine returned results for"):
            hyperfine.match_results((first, second), names, "w")


def test_exit_codes_signals_parameters_and_single_runs():
    data = {"results": [
        {"command": "echo 1", "times": [0.5, 0.25], "user": [0.1, 0.2], "system": [0.0, 0.01],
         "exit_codes": [0, None], "memory_usage_byte": [100, 300], "stddev": None, "parameters": {"n": "1"}},
        {"command": "old", "times": [1.0], "user": 0.5, "system": 0.25},  # pre-1.13: no exit_codes
    ]}
    a, b = hyperfine.parse_export(data)
    assert a.exit_codes == (0, None) and a.per_run_cpu and a.user == (0.1, 0.2)
    assert a.peak_memory_bytes == 300 and a.parameters == (("n", "1"),)
    assert b.exit_codes == (0,) and b.cpu == (0.75,) and b.memory_bytes is None


@pytest.mark.parametrize("bad", [{}, {"results": [{"times": [1.0]}]}, {"results": [{"command": "x"}]},
                                 {"results": [{"command": "x", "times": [1, 2], "memory_usage_byte": [1]}]},
                                 {"results": [{"command": "x", "times": [1], "exit_codes": [0, 0]}]}])
def test_malformed_exports_are_one_error(bad, tmp_path):
    with pytest.raises(RefbenchError, match="not a hyperfine --export-json file"):
        hyperfine.parse_export(bad)
    f = tmp_path / "x.json"
    f.write_text("{not json")
    with pytest.raises(RefbenchError, match="cannot read hyperfine results"):
        hyperfine.read_export(f)


def test_parse_version():
    assert hyperfine.parse_version("hyperfine 1.20.0\n") == (1, 20, 0)
    assert hyperfine.parse_version("hyperfine 1.15.0") == (1, 15, 0)
    assert hyperfine.parse_version("hyperfine 2.1") == (2, 1, 0)
    assert hyperfine.parse_version("nonsense") is None


def _fake_hyperfine(d: Path, ver: str) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    f = d / "hyperfine"
    f.write_text(f"#!/bin/sh\necho 'hyperfine {ver}'\n")
    f.chmod(0o755)
    return f


@pytest.fixture
def no_wheel():
    """No pinned wheel can be had (offline, another platform): setup falls back to cargo."""
    def refuse(tool, out_dir):
        raise RefbenchError("pip download astral-dev-toolchain-hyperfine==2.0.0 failed (exit 1)")
    with pins.installed(pins.Pinning(from_wheel=refuse)):
        yield


def _pinned(binary: Path, **pinning) -> pins.Pinning:
    """Pinning that makes `binary` the pinned hyperfine of this platform (as if the wheel held it)."""
    return pins.Pinning(table=(pins.Pin("hyperfine", hyperfine.PINNED_VERSION, pins.WHEEL, pins.current_platform(),
                                        pins.sha256_of(binary)),), **pinning)


def test_locate_prefers_the_pinned_cached_build(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("REFBENCH_TOOLS_BIN", str(tmp_path / "bin"))
    monkeypatch.setenv("PATH", f"{tmp_path / 'path'}:/usr/bin:/bin")
    monkeypatch.delenv("REFBENCH_UNPINNED_TOOLS", raising=False)
    on_path = _fake_hyperfine(tmp_path / "path", "1.15.0")
    assert hyperfine.locate() == str(on_path)
    assert hyperfine.version() == (1, 15, 0) and not hyperfine.exports_memory()
    fallback = _fake_hyperfine(hyperfine.pinned_path(hyperfine.FALLBACK_VERSION).parent, hyperfine.FALLBACK_VERSION)
    assert hyperfine.locate() == str(on_path)  # a cargo build is not pinned: only where unpinned tools are allowed
    monkeypatch.setenv("REFBENCH_UNPINNED_TOOLS", "1")
    assert hyperfine.locate() == str(fallback)
    monkeypatch.delenv("REFBENCH_UNPINNED_TOOLS")
    pinned = _fake_hyperfine(hyperfine.pinned_path().parent, hyperfine.PINNED_VERSION)
    assert pinned == hyperfine.pinned_path() and pinned.is_relative_to(tmp_path / "cache" / "refbench")
    with pytest.raises(RefbenchError, match="refusing .*hyperfine.*pins.py"):  # not the pinned bytes
        hyperfine.locate()
    with pins.installed(_pinned(pinned)):
        assert hyperfine.locate() == str(pinned)
        assert hyperfine.version() == hyperfine.parse_version(hyperfine.PINNED_VERSION)
        assert hyperfine.exports_memory() and hyperfine.measures_own_runs()


def test_a_hyperfine_on_path_is_used_when_it_measures_each_runs_own_figures(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("REFBENCH_TOOLS_BIN", str(tmp_path / "bin"))
    monkeypatch.setenv("PATH", f"{tmp_path / 'path'}:/usr/bin:/bin")
    _fake_hyperfine(hyperfine.pinned_path(hyperfine.FALLBACK_VERSION).parent, hyperfine.FALLBACK_VERSION)
    on_path = _fake_hyperfine(tmp_path / "path", "2.1.0")
    assert hyperfine.locate() == str(on_path)


def test_install_without_cargo_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(RefbenchError, match="cargo not found"):
        hyperfine.install()


def test_a_real_pinned_hyperfine_exports_what_the_reader_expects(tmp_path):
    """Whatever hyperfine this machine has: the reader takes its export; >= 1.20 has memory."""
    binary = hyperfine.locate()
    if not binary:
        need("hyperfine", "run `refbench setup`")
    info = hyperfine.HyperfineInfo.probe(binary)
    out = tmp_path / "x.json"
    argv = hyperfine.command_line(out, ["py"], ["python3 -c 'x = bytearray(50_000_000)'"], [None], 2, 0, info=info)
    subprocess.run(argv, check=True, capture_output=True, cwd=tmp_path)
    (res,) = hyperfine.read_export(out)
    assert res.name == "py" and res.runs == 2 and res.exit_codes == (0, 0)
    if hyperfine.exports_memory(binary):
        assert res.peak_memory_bytes > 50_000_000
    else:
        assert res.memory_bytes is None


def test_install_builds_once_where_no_cache_restore_writes(tmp_path, monkeypatch):
    """`cargo install --locked --version PIN hyperfine --root TMP`, then TMP renamed into place, in
    refbench's data directory (hyperfine.cargo_path), not its cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    log = tmp_path / "cargo.log"
    cargo = tmp_path / "cargo"
    cargo.write_text(f"""#!/bin/sh
echo "$@" >> {log}
while [ $# -gt 0 ]; do [ "$1" = --root ] && root=$2; shift; done
mkdir -p "$root/bin" && printf '#!/bin/sh\\necho hyperfine {hyperfine.PINNED_VERSION}\\n' > "$root/bin/hyperfine"
chmod +x "$root/bin/hyperfine"
""")
    cargo.chmod(0o755)
    said = []
    rustup = tmp_path / "rustup"
    rustup.write_text(f"#!/bin/sh\necho rustup \"$@\" >> {log}\n")
    rustup.chmod(0o755)
    path = hyperfine.install(cargo=str(cargo), say=said.append, rustup=str(rustup))
    assert path == hyperfine.cargo_path(hyperfine.PINNED_VERSION) and path.is_file()
    assert path.is_relative_to(tmp_path / "data") and not (tmp_path / "cache").exists()
    assert hyperfine.version(str(path)) == hyperfine.parse_version(hyperfine.PINNED_VERSION)
    first, args = (line.split() for line in log.read_text().splitlines())
    assert first == ["rustup", "toolchain", "install", hyperfine.PINNED_TOOLCHAIN, "--profile", "minimal"]
    assert args[0] == f"+{hyperfine.PINNED_TOOLCHAIN}"
    assert args[1:7] == ["install", "--locked", "--quiet", "--version", hyperfine.PINNED_VERSION, "hyperfine"]
    assert said and any("crates.io" in m for m in said)
    assert hyperfine.install(cargo=str(cargo)) == path  # cached: cargo not run again
    assert len(log.read_text().splitlines()) == 2
    assert [p.name for p in path.parent.parent.parent.iterdir()] == [path.parent.parent.name]  # no temp left


def test_setup_falls_back_to_an_older_hyperfine_without_cargo(tmp_path, monkeypatch, capsys, no_wheel):
    from refbench.commands import setup

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("REFBENCH_TOOLS_BIN", str(tmp_path / "bin"))
    old = _fake_hyperfine(tmp_path / "path", "1.15.0")
    # only the fake on PATH: no cargo, no apt-get, whatever this machine has in /usr/bin
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    assert setup.ensure_hyperfine(tmp_path / "bin") == str(old)
    assert "GNU time" in capsys.readouterr().err


def test_setup_takes_the_pinned_wheel_links_it_and_refuses_it_swapped(tmp_path, monkeypatch):
    """The pinned hyperfine is its wheel's binary (refbench.pins): setup puts it in the cache and
    links it; a swapped file in its place is refused wherever refbench looks for hyperfine."""
    from refbench.commands import setup

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("REFBENCH_TOOLS_BIN", str(tmp_path / "bin"))
    monkeypatch.delenv("REFBENCH_UNPINNED_TOOLS", raising=False)
    wheel_binary = _fake_hyperfine(tmp_path / "wheel", hyperfine.PINNED_VERSION)

    def from_wheel(tool, out_dir):
        (out_dir / tool).write_bytes(wheel_binary.read_bytes())
        return out_dir / tool
    with pins.installed(_pinned(wheel_binary, from_wheel=from_wheel)):
        got = setup.ensure_hyperfine(tmp_path / "bin")
        assert got == str(hyperfine.pinned_path()) and os.readlink(tmp_path / "bin" / "hyperfine") == got
        assert hyperfine.locate() == got and hyperfine.measures_own_runs(got)
        Path(got).write_text("#!/bin/sh\necho 'hyperfine 2.0.0 (planted)'\n")
        with pytest.raises(RefbenchError, match="refusing"):
            hyperfine.locate()
        with pytest.raises(RefbenchError, match="refusing"):
            tools.find_tool("hyperfine")
        assert setup.ensure_hyperfine(tmp_path / "bin") == got  # setup puts the pinned one back
        assert hyperfine.locate() == got


def _fake_cargo(where: Path) -> None:
    """A cargo in `where` that "builds" the pinned hyperfine into its --root, and a rustup whose
    toolchain install (the one 2.0 needs) succeeds."""
    where.mkdir(parents=True, exist_ok=True)
    cargo = where / "cargo"
    cargo.write_text(f"""#!/bin/sh
while [ $# -gt 0 ]; do [ "$1" = --root ] && root=$2; shift; done
mkdir -p "$root/bin" && printf '#!/bin/sh\\necho hyperfine {hyperfine.PINNED_VERSION}\\n' > "$root/bin/hyperfine"
chmod +x "$root/bin/hyperfine"
""")
    cargo.chmod(0o755)
    rustup = where / "rustup"
    rustup.write_text("#!/bin/sh\nexit 0\n")
    rustup.chmod(0o755)


def test_setup_builds_the_pin_with_cargo_and_links_it(tmp_path, monkeypatch, no_wheel):
    from refbench.commands import setup

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("REFBENCH_TOOLS_BIN", str(tmp_path / "bin"))
    _fake_hyperfine(tmp_path / "path", "1.15.0")
    _fake_cargo(tmp_path / "path")
    monkeypatch.setenv("PATH", f"{tmp_path / 'path'}:/usr/bin:/bin")
    monkeypatch.setenv("REFBENCH_UNPINNED_TOOLS", "1")  # a cargo build is not the pinned bytes
    got = setup.ensure_hyperfine(tmp_path / "bin")
    assert got == str(hyperfine.cargo_path(hyperfine.PINNED_VERSION))
    assert os.readlink(tmp_path / "bin" / "hyperfine") == got
    assert hyperfine.locate() == got  # and from now on it is the one refbench runs


def test_setup_falls_back_to_1_20_where_2_0_cannot_be_built_and_says_what_is_lost(tmp_path, monkeypatch, capsys,
                                                                                     no_wheel):
    from refbench.commands import setup

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("REFBENCH_TOOLS_BIN", str(tmp_path / "bin"))
    (tmp_path / "path").mkdir()
    cargo = tmp_path / "path" / "cargo"  # builds whatever version it is asked for; no rustup at all
    cargo.write_text("""#!/bin/sh
while [ $# -gt 0 ]; do [ "$1" = --root ] && root=$2; [ "$1" = --version ] && v=$2; shift; done
mkdir -p "$root/bin" && printf '#!/bin/sh\\necho hyperfine %s\\n' "$v" > "$root/bin/hyperfine"
chmod +x "$root/bin/hyperfine"
""")
    cargo.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'path'}:/usr/bin:/bin")
    got = setup.ensure_hyperfine(tmp_path / "bin")
    assert got == str(hyperfine.pinned_path(hyperfine.FALLBACK_VERSION))
    err = capsys.readouterr().err
    assert f"needs Rust {hyperfine.PINNED_TOOLCHAIN}" in err and "running maximum" in err


def test_setup_never_runs_a_hyperfine_a_cache_restore_planted_where_cargo_builds_went(tmp_path, monkeypatch,
                                                                                     no_wheel):
    """Issue 54, 1: with no wheel to be had and cargo on PATH, setup took the file at the cargo
    build's place in the cache (a restore may have planted it) as "built here" and ran it
    (`--version`) before the key was written. Now cargo builds live in the data directory, so the
    planted file is neither returned nor run, and what setup reports is what cargo built now."""
    from refbench.commands import setup

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("REFBENCH_TOOLS_BIN", str(tmp_path / "bin"))
    monkeypatch.delenv("REFBENCH_UNPINNED_TOOLS", raising=False)
    marker = tmp_path / "planted-ran"
    for version in (hyperfine.PINNED_VERSION, hyperfine.FALLBACK_VERSION):  # where cargo builds used to go
        planted = tmp_path / "cache" / "refbench" / f"hyperfine-{version}" / "bin" / "hyperfine"
        planted.parent.mkdir(parents=True)
        planted.write_text(f"#!/bin/sh\necho planted >> {marker}\necho hyperfine {version}\n")
        planted.chmod(0o755)
    _fake_cargo(tmp_path / "path")
    monkeypatch.setenv("PATH", f"{tmp_path / 'path'}:/usr/bin:/bin")
    hyperfine._version_of.cache_clear()
    got = setup.ensure_hyperfine(tmp_path / "bin")
    assert hyperfine.version(got) == hyperfine.parse_version(hyperfine.PINNED_VERSION)  # what run_setup prints
    assert not marker.exists(), "setup ran the hyperfine planted in the cache"
    assert got == str(hyperfine.cargo_path(hyperfine.PINNED_VERSION)) and Path(got).is_relative_to(tmp_path / "data")
    with pytest.raises(RefbenchError, match="refusing"):  # a run refuses the unpinned build, as before
        hyperfine.locate()
    assert not marker.exists()


@pytest.mark.parametrize("cmd,shell", [
    ("s5cmd cp '/a/*' s3://x/y/", False), ("rm -rf '/tmp/a b'", False), ("ipfs get -o /d QmX", False),
    ("export A=1; s5cmd ls", True), ("ipfs add -r -Q /x > /y", True), ('echo "$HOME"', True),
    ("A=1 s5cmd ls", True), ("ls /tmp/*", True), ("a | b", True), ("cd ~", True),
])
def test_needs_shell(cmd, shell):
    assert hyperfine.needs_shell(cmd) is shell


# ---- the command line ----------------------------------------------------------------------------
V1 = hyperfine.HyperfineInfo("hyperfine", (1, 20, 0), dashdash=True)
V1_OLD = hyperfine.HyperfineInfo("hyperfine", (1, 15, 0), dashdash=False)
V2 = hyperfine.HyperfineInfo("/c/hyperfine", (2, 0, 0))


def test_command_line_gives_each_command_its_name_and_prepare():
    argv = hyperfine.command_line(Path("/w/r.json"), ["a", "b"], ["x go", "y go"], ["rm -rf /d", None], 2, 1,
                                  extra_flags=["-i"], info=V1)
    assert argv == ["hyperfine", "--export-json", "/w/r.json", "--runs", "2", "--warmup", "1", "--style", "none",
                    "-N", "-n", "a", "-n", "b", "--prepare", "rm -rf /d", "--prepare", ":", "-i", "--", "x go", "y go"]


def test_command_line_without_dashdash_support_or_shell_free_commands():
    argv = hyperfine.command_line(Path("j"), ["a"], ["x | y"], [None], 1, 0, verbose=True, info=V1_OLD)
    assert argv[-1] == "x | y" and "--" not in argv and "-N" not in argv and "--prepare" not in argv
    assert argv[argv.index("--style") + 1] == "basic"
    assert "-N" in hyperfine.command_line(Path("j"), ["a"], ["x | y"], [None], 1, 0, no_shell="on", info=V1)


def test_command_line_of_hyperfine_2_asks_for_the_metrics_and_a_shell_only_where_needed():
    argv = hyperfine.command_line(Path("j"), ["a"], ["x go"], [None], 1, 0, info=V2)
    assert argv[0] == "/c/hyperfine" and "-N" not in argv and "-S" not in argv
    assert argv[argv.index("--metrics") + 1] == "time_wall_clock,time_user,time_system,memory_peak_resident"
    assert "-S" in hyperfine.command_line(Path("j"), ["a"], ["x | y"], [None], 1, 0, info=V2)
    counted = hyperfine.HyperfineInfo("hf", (2, 0, 0), counts_instructions=True)
    argv = hyperfine.command_line(Path("j"), ["a"], ["x"], [None], 1, 0, info=counted)
    assert argv[argv.index("--metrics") + 1].endswith(",instructions")


@pytest.mark.parametrize("flag", ["--runs=3", "-w", "--export-json", "-n", "--prepare", "-r5", "-S", "--shell=bash"])
def test_flags_refbench_manages_are_refused(flag):
    name = flag.split("=")[0] if flag.startswith("--") else flag[:2]
    with pytest.raises(RefbenchError, match=f"hyperfine flag {name} is managed by refbench"):
        hyperfine.check_hyperfine_flags(["-i", flag])


@pytest.mark.parametrize("flags", [["--reference", "true"], ["--setup", "x"], ["-ix"], ["--conclude=x"], ["x"],
                                   ["-i", "--output"]])
def test_only_allowed_flags_pass(flags):
    with pytest.raises(RefbenchError, match="hyperfine flag"):
        hyperfine.check_hyperfine_flags(flags)


def test_allowed_flags_pass_with_their_values():
    hyperfine.check_hyperfine_flags(["-i", "--ignore-failure=1,2", "--show-output", "--output", "pipe",
                                     "--output=null", "--input", "/dev/null"])


def test_failure_message_names_the_error_line():
    assert hyperfine.failure_message("Benchmark 1: x\nError: Command terminated with non-zero exit code\n", 1) \
        == "Error: Command terminated with non-zero exit code"
    assert hyperfine.failure_message("last words\n", 2) == "last words"
    assert hyperfine.failure_message("", 3) == "exit 3"


def test_doctor_says_what_the_found_hyperfine_cannot_measure():
    from refbench.commands import doctor

    status, tool, text, required = doctor.hyperfine_check(V1, "run `refbench setup`")
    assert (status, tool, required) == (doctor.WARN, "hyperfine", True)
    assert "running maximum" in text and "memory gets no verdict" in text and hyperfine.PINNED_VERSION in text
    status, _, text, _ = doctor.hyperfine_check(V2, "run `refbench setup`")
    assert status == doctor.OK and "wall, cpu, memory" in text and "instructions: not counted here" in text
    counted = hyperfine.HyperfineInfo("hf", (2, 0, 0), counts_instructions=True)
    assert "not counted" not in doctor.hyperfine_check(counted, "")[2]
