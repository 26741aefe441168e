"""Which Go builds each ref (refbench/toolchain.py, issue 25): the pure parts (versions, go.mod
lines, --go values, the pick, the failure hint) without a process, then real builds with the real
go command and the real Go module proxy on a throw-away stdlib-only origin whose go.mod says
`go 1.25` (no toolchain line): built by default with the newest go1.25.N the proxy serves, fetched
through GOTOOLCHAIN; `--go local` keeps this machine's Go; a per-build --go gives two builds of
one ref, told apart by their labels; a failed build names both Gos. The suite fetches one
toolchain besides the local one (go1.25.N, ~70 MB, a few seconds, once per machine)."""
from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import need
from origins import git, local_go, new_origin
from refbench import builds as bl, pipeline, runenv, toolchain as tc
from refbench.commands._run_options import request_from_args, run_parser
from refbench.config import TargetSpec
from refbench.errors import BuildError, RefbenchError
from refbench.progress import Reporter
from refbench.refs import ResolvedRef

import factories


def v(text: str) -> tc.GoVersion:
    return tc.parse_version(text, listed=True)


LISTED = tuple(v(n) for n in ("go1.19.13", "go1.20", "go1.20.14", "go1.21.0", "go1.21.13", "go1.24.0", "go1.24.4",
                              "go1.24.13", "go1.25.0", "go1.25.14", "go1.26rc1", "go1.26.0", "go1.26.8", "go1.26.11"))


def listed() -> tuple[tc.GoVersion, ...]:
    return LISTED


def never() -> tuple[tc.GoVersion, ...]:
    raise AssertionError("the proxy's list was asked for where the answer does not depend on it")


# ---- the pure parts ---------------------------------------------------------------------------------
def test_versions_order_as_the_go_command_orders_them():
    lang, rc, first, patch = (tc.parse_version(t) for t in ("1.24", "go1.24rc1", "1.24.0", "go1.24.4"))
    assert lang.key < rc.key < first.key < patch.key
    assert (lang.name, rc.name, first.name, patch.number) == ("go1.24", "go1.24rc1", "go1.24.0", "1.24.4")
    assert not lang.released and not rc.released and first.released and patch.line == (1, 24)
    assert tc.parse_version("go1.20", listed=True).released  # Go before 1.21 named a line's first release go1.N
    assert tc.parse_version("1.20").key < tc.parse_version("go1.20", listed=True).key
    for bad in ("", "1", "go", "1.24.x", "latest", "1.24.4-rc1", "go1.24.4.1", "go 1.24"):
        assert tc.parse_version(bad) is None, bad


def test_go_mod_lines():
    gm = tc.parse_gomod("module example.com/x // the module\n\ngo 1.24 // language\n\ntoolchain go1.24.4\n"
                        "require (\n\tgolang.org/x/sys v0.1.0\n)\n")
    assert gm.go.name == "go1.24" and gm.toolchain.name == "go1.24.4"
    assert gm.asks is gm.toolchain and gm.describe() == "toolchain go1.24.4"
    older = tc.parse_gomod("go 1.25.3\ntoolchain go1.24.4\n")  # the go command ignores an older toolchain line
    assert older.asks is older.go and older.describe() == "go 1.25.3"
    assert tc.parse_gomod("module x\n").describe() == "no Go version"
    assert tc.parse_gomod("toolchain default\n").asks is None
    assert tc.parse_gomod("module x\ngodebug default=go1.21\n").go is None  # godebug is not the go line


def test_the_proxy_list_is_read_for_this_machine_only():
    out = ("golang.org/toolchain v0.0.1-go1.24.4.linux-amd64 v0.0.1-go1.24.4.darwin-arm64 "
           "v0.0.1-go1.25.0.linux-amd64 v0.0.1-go1.26rc1.linux-amd64 v0.0.1-go1.20.linux-amd64 "
           "v0.0.1-junk.linux-amd64\n")
    assert [x.name for x in tc.listed_versions(out, "linux-amd64")] == ["go1.24.4", "go1.25.0", "go1.26rc1", "go1.20"]
    assert [x.name for x in tc.listed_versions(out, "darwin-arm64")] == ["go1.24.4"]


def test_newest_patch_is_never_older_than_asked():
    assert tc.newest_patch(LISTED, tc.parse_version("1.24")).name == "go1.24.13"
    assert tc.newest_patch(LISTED, tc.parse_version("1.24.0")).name == "go1.24.13"
    assert tc.newest_patch(LISTED, tc.parse_version("1.26")).name == "go1.26.11"  # not the rc
    assert tc.newest_patch(LISTED, tc.parse_version("1.22")).name == "go1.24.13"  # no 1.22 here: the next line
    assert tc.newest_patch(LISTED, tc.parse_version("1.22"), same_line=True) is None
    assert tc.newest_patch(LISTED, tc.parse_version("1.20")).name == "go1.20.14"
    assert tc.newest_patch(LISTED, tc.parse_version("1.25.20")).name == "go1.26.11"  # newer than its line has
    assert tc.newest_patch(LISTED, tc.parse_version("1.27")) is None


def test_go_option_values():
    assert tc.parse_choices("1.24.4") == ("go1.24.4",)
    assert tc.parse_choices("go1.24.4, 1.24,LOCAL,mod,1.25rc1") == ("go1.24.4", "go1.24", "local", "mod", "go1.25rc1")
    for bad in ("", "1.24,", "newest", "1.24.4.1", "go"):
        with pytest.raises(RefbenchError, match="expected local, mod, or a Go version such as 1.24.4"):
            tc.parse_choices(bad)
    assert tc.per_build(("go1.25",), 3) == ("go1.25",) * 3
    assert tc.per_build(("go1.25", "local"), 2) == ("go1.25", "local")
    assert tc.per_build((), 2, "local") == ("local", "local")
    with pytest.raises(RefbenchError, match="--go gives 3 values for 2 builds: give one for every build, or one per"):
        tc.per_build(("mod", "local", "go1.25"), 2)
    assert tc.default_choice({}) == "mod" and tc.default_choice({"REFBENCH_GO": " 1.25 "}) == "go1.25"
    with pytest.raises(RefbenchError, match="REFBENCH_GO='1.25,local': one value for every build"):
        tc.default_choice({"REFBENCH_GO": "1.25,local"})
    with pytest.raises(RefbenchError, match="REFBENCH_GO 'newest': expected local, mod"):
        tc.default_choice({"REFBENCH_GO": "newest"})


def test_refbench_go_is_read_at_the_command_line_only(monkeypatch):
    """REFBENCH_GO becomes the request's go (runenv.environ_go); a build without a choice is mod,
    whatever the variable says below the command line."""
    monkeypatch.setenv("REFBENCH_GO", "1.25")
    assert tc.per_build((), 2) == ("mod", "mod")
    from refbench import runenv
    assert runenv.environ_go() == ("go1.25",)


def test_the_command_line_takes_go_and_refuses_a_bad_value(capsys):
    args = ["-s", "v1", "v1", "--go", "1.25,local"]
    assert request_from_args(run_parser().parse_args(args), args).go == ("go1.25", "local")
    assert request_from_args(run_parser().parse_args(["-s", "a", "b"]), []).go == ()  # REFBENCH_GO, else mod
    with pytest.raises(SystemExit) as e:
        run_parser().parse_args(["-s", "a", "b", "--go", "1.25,newest"])
    assert e.value.code == 2
    assert "argument --go: 'newest': expected local, mod, or a Go version" in capsys.readouterr().err


def test_the_pick():
    mod125 = tc.parse_gomod("go 1.25\n")
    assert tc.pick("local", mod125, "go1.26.8", never) == tc.Pick("go1.26.8")
    assert tc.pick("mod", mod125, "go1.26.8", listed) == tc.Pick("go1.25.14")
    assert tc.pick("mod", tc.parse_gomod("go 1.25\ntoolchain go1.25.3\n"), "go1.26.8", never).name == "go1.25.3"
    assert tc.pick("mod", None, "go1.26.8", never).name == "go1.26.8"  # no go.mod: nothing asked
    old = tc.pick("mod", tc.parse_gomod("go 1.16\n"), "go1.26.8", listed)
    assert old.name == "go1.19.13" and "serves no go1.16 toolchain, so go1.19.13 builds it" in old.note
    with pytest.raises(BuildError, match="go.mod asks for go 1.28, newer than any Go toolchain .* --go local"):
        tc.pick("mod", tc.parse_gomod("go 1.28\n"), "go1.26.8", listed)
    assert tc.pick("go1.24", mod125, "go1.26.8", listed).name == "go1.24.13"
    assert tc.pick("go1.24.4", mod125, "go1.26.8", listed).name == "go1.24.4"
    assert tc.pick("go1.26.8", mod125, "go1.26.8", never).name == "go1.26.8"  # this machine's own
    with pytest.raises(BuildError, match=r"--go 1.24.5: the Go module proxy serves no such toolchain \(its go1.24 "
                                         r"releases there: 1.24.0, 1.24.4, 1.24.13\); --go local"):
        tc.pick("go1.24.5", mod125, "go1.26.8", listed)
    with pytest.raises(BuildError, match="--go 1.22: .*it has no go1.22 release"):
        tc.pick("go1.22", mod125, "go1.26.8", listed)
    assert tc.gotoolchain("go1.26.8", "go1.26.8") == "local" and tc.gotoolchain("go1.25.14", "go1.26.8") == "go1.25.14"


def test_a_failure_hint_names_what_go_mod_asks_for():
    gm = tc.parse_gomod("go 1.24\n")
    assert tc.hint("go1.26.8", gm, "go1.24.13") == "go.mod asks for go 1.24; try --go mod or --go 1.24.13"
    assert tc.hint("go1.24.13", gm, "go1.24.13") == "go.mod asks for go 1.24"
    assert tc.hint("go1.26.8", gm, None) == "go.mod asks for go 1.24"  # the proxy could not say
    assert tc.hint("go1.26.8", None, None) == "its go.mod asks for no Go version"


def test_labels_say_the_go_when_one_ref_is_built_with_two():
    a, b = (ResolvedRef("v1.0.0", "tag", "a" * 40, "v1.0.0", toolchain=t) for t in ("go1.25.14", "go1.26.8"))
    c = ResolvedRef("v1.1.0", "tag", "c" * 40, "v1.1.0", toolchain="go1.26.8")
    assert bl.unique_labels([a, b, c]) == ["v1.0.0 (go1.25.14)", "v1.0.0 (go1.26.8)", "v1.1.0"]
    assert bl.unique_labels([a, a, b]) == ["v1.0.0 (go1.25.14)", "v1.0.0 (go1.25.14) #2", "v1.0.0 (go1.26.8)"]
    assert bl.unique_labels([b, b]) == ["v1.0.0", "v1.0.0 #2"]  # one Go: an A/A comparison, as before


def test_the_listing_is_kept_for_a_day_and_an_old_one_serves_when_the_proxy_cannot(tmp_path, monkeypatch):
    path = tmp_path / tc.LIST_FILE  # a listing this machine kept (sealed under its key: tc._write_listing)
    tc._write_listing(path, time.time() - 3600, "linux-amd64", [tc.parse_version(n, listed=True)
                                                                 for n in ("go1.25.14", "go1.26.8")])
    monkeypatch.setenv("PATH", str(tmp_path / "no-go-here"))  # a fresh listing runs no process
    assert [x.name for x in tc.available(tmp_path)] == ["go1.25.14", "go1.26.8"]
    monkeypatch.undo()
    stale = tmp_path / "stale"
    stale.mkdir()
    tc._write_listing(stale / tc.LIST_FILE, 0, "linux-amd64", [tc.parse_version("go1.24.4", listed=True)])
    monkeypatch.setenv("GOPROXY", "off")  # the proxy cannot be reached
    if not shutil.which("go"):
        need("go", "run `make setup`")
    assert [x.name for x in tc.available(stale)] == ["go1.24.4"]  # yesterday's answer beats none
    with pytest.raises(BuildError, match=r"cannot list the Go toolchains the module proxy serves .*GOPROXY=off.*; "
                                         r"build with this machine's Go instead: --go local$"):
        tc.available(tmp_path / "empty")


# ---- real builds: the real go command and the real module proxy -----------------------------------------
MAIN = 'package main\n\nimport (\n\t"fmt"\n\t"runtime"\n)\n\nfunc main() { fmt.Println(runtime.Version()) }\n'
# errors.AsType is new in Go 1.26: code that needs a newer Go than its go.mod asks for
NEEDS_126 = ('package main\n\nimport (\n\t"errors"\n\t"fmt"\n\t"io/fs"\n)\n\n'
             'func main() {\n\t_, ok := errors.AsType[*fs.PathError](errors.New("x"))\n\tfmt.Println(ok)\n}\n')


@pytest.fixture(scope="module")
def go125(tmp_path_factory):
    """v1.0.0: go.mod `go 1.25` and no toolchain line, a main that prints the Go that built it;
    branch needs-1.26: uses a Go 1.26 API; branch broken: does not compile."""
    if not shutil.which("go"):
        need("go", "run `make setup`")
    o = new_origin(tmp_path_factory.mktemp("go125-origin"))
    o.commit("one", {"go.mod": "module example.com/go125\n\ngo 1.25\n", "main.go": MAIN}, "one", tags=["v1.0.0"])
    o.commit("new-api", {"main.go": NEEDS_126}, "uses errors.AsType", branch="needs-1.26", parent="one")
    o.commit("broken", {"main.go": "package main\n\nfunc main() { not go }\n"}, "broken", branch="broken",
             parent="one")
    git(o.work, "checkout", "-q", "master")
    return o


@pytest.fixture(scope="module")
def builds_dir125(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("builds125")


def hello() -> TargetSpec:
    return TargetSpec(name="hello", repo="", binary="hello", build=("go", "build", "-o", "{out}", "."), backend="s3")


def builder(origin, builds_dir: Path, **kw) -> bl.Builder:
    return bl.Builder(hello(), builds_dir, repo_url=str(origin.path), **kw)


def prints(binary: Path) -> str:
    return subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.slow
def test_by_default_a_ref_is_built_with_the_newest_patch_of_its_go_line(go125, builds_dir125, monkeypatch):
    monkeypatch.delenv("REFBENCH_GO", raising=False)
    b = builder(go125, builds_dir125)
    ref = b.resolve("v1.0.0")
    assert ref.toolchain.startswith("go1.25.") and ref.toolchain != local_go()
    built = b.build(ref, "v1.0.0")
    meta = json.loads((built.binary.parent / "build.json").read_text())
    assert meta["toolchain"] == built.toolchain == built.record().toolchain == ref.toolchain  # results.json's Build
    assert prints(built.binary) == ref.toolchain  # the binary says so itself
    assert built.binary.parent.name == f"{ref.sha}.{ref.toolchain}"  # apart from a build with the local Go
    listing = json.loads((builds_dir125 / tc.LIST_FILE).read_text())
    assert ref.toolchain in listing["versions"]  # asked once, kept for the next run
    again = builder(go125, builds_dir125).build(ref, "v1.0.0")
    assert not again.built_now and again.toolchain == ref.toolchain


@pytest.mark.slow
def test_go_local_keeps_this_machines_go(go125, builds_dir125):
    b = builder(go125, builds_dir125, go="local")
    built = b.build(b.resolve("v1.0.0"), "v1.0.0")
    assert built.toolchain == local_go() and local_go().startswith("go1.26.")
    assert prints(built.binary) == local_go() and built.binary.parent.name == built.ref.sha


@pytest.mark.slow
def test_per_build_go_gives_two_builds_of_one_ref(go125, builds_dir125, tmp_path, monkeypatch):
    """`-s v1.0.0 v1.0.0 --go 1.25,local` through the pipeline's own stages: two builds, their
    labels saying their Go, each binary built by its own."""
    scen = tmp_path / "s.toml"
    scen.write_text(f'''[targets.hello]
repo = "{go125.path}"
build = ["go", "build", "-o", "{{out}}", "."]
binary = "hello"
backend = "s3"

[[scenarios]]
name = "run"
target = "hello"
fixture = {{ kind = "sparse", size = "1K", count = 1 }}
  [[scenarios.steps]]
  name = "hello"
  command = "{{{{ bin }}}}"
''')
    monkeypatch.chdir(tmp_path)
    argv = ["-s", "v1.0.0", "v1.0.0", "-t", "hello", "--scenarios", str(scen), "--builds-dir", str(builds_dir125),
            "--go", "1.25,local"]
    env = dataclasses.replace(runenv.real(runenv.MachineSettings(), Reporter(quiet=True)),
                              find_tool=lambda tool: shutil.which(tool) or f"/usr/bin/{tool}")  # builds only
    checked = pipeline.validate(request_from_args(run_parser().parse_args(argv), argv), env)
    res = pipeline.resolve(checked, env)
    built, _ = pipeline.build_all(res, env)
    go125_name = built[0].toolchain
    assert go125_name.startswith("go1.25.") and built[1].toolchain == local_go()
    assert [b.label for b in built] == [f"v1.0.0 ({go125_name})", f"v1.0.0 ({local_go()})"]
    assert [prints(b.binary) for b in built] == [go125_name, local_go()]
    assert built[0].binary_sha256 != built[1].binary_sha256  # two Gos: two binaries, measured, never `identical`


@pytest.mark.slow
def test_a_failed_build_names_the_go_it_used_and_the_one_go_mod_asks_for(go125, builds_dir125):
    local = builder(go125, builds_dir125, go="local")
    ref = local.resolve("broken")
    with pytest.raises(BuildError) as e:
        local.build(ref, "broken")
    wanted = builder(go125, builds_dir125).resolve("broken").toolchain
    assert (f"build of broken@{ref.sha[:7]} ({ref.short}) failed with {local_go()} (exit 1; go.mod asks for go 1.25; "
            f"try --go mod or --go {wanted.removeprefix('go')}); log: ") in str(e.value)
    assert e.value.sha == ref.sha and "\n" not in str(e.value)
    # code newer than its go.mod says: the Go it asks for cannot build it, this machine's can
    mod = builder(go125, builds_dir125)
    new_api = mod.resolve("needs-1.26")
    with pytest.raises(BuildError) as e:
        mod.build(new_api, "needs-1.26")
    assert f"failed with {wanted} (exit 1; go.mod asks for go 1.25); log: " in str(e.value)
    assert "AsType" in (e.value.detail or "")
    assert prints(local.build(local.resolve("needs-1.26"), "needs-1.26").binary) == "false"


def test_the_summary_says_which_go_built_each_binary_and_warns_when_they_differ():
    from refbench.render import markdown

    doc = factories.basic_doc()
    same = factories.rs.Results.from_json(doc)
    assert same.differing_toolchains() == {}
    text = markdown.render_markdown(same)
    assert "| Go " in text and "builds differ in Go version" not in text
    doc["builds"][1]["toolchain"] = "go1.26.8"
    res = factories.rs.Results.from_json(doc)
    assert res.differing_toolchains() == {"old": "go1.24", "new": "go1.26.8"}
    line = ("> ⚠️ builds differ in Go version: old go1.24, new go1.26.8 — the toolchain is a cause of any "
            "difference")
    for text in (markdown.render_markdown(res), markdown.render_markdown(res, "github")):
        assert line in text
        assert text.index(line) > text.index("| Scenario")  # beside the verdicts
    assert "| go1.26.8 |" in markdown.render_markdown(res)  # the build table's Go column


def test_the_go_version_is_read_the_way_every_go_says_it():
    """`go version`, not `go env GOVERSION` (Go 1.16 on): go1.13.15 builds a go.mod of go 1.13."""
    from refbench.toolchain import version_of
    assert version_of("go version go1.13.15 linux/amd64\n") == "go1.13.15"
    assert version_of("go version go1.26.8 X:nocoverageredesign linux/amd64") == "go1.26.8"
    assert version_of("") == ""
