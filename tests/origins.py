"""Throw-away local git origins holding small Go wrapper modules around real s5cmd / kubo code.

Each commit of an origin is an ordinary Go module (go.mod, go.sum, main.go) that imports the real
tool at a pinned version from the Go module proxy; tags, branches and refs/pull/N/head are made
like GitHub's, so refbench resolves and builds them exactly as it would the real repository.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
S5CMD_OLD, S5CMD_NEW = "v2.2.2", "v2.3.0"
KUBO_OLD = "v0.40.1"
GENPROTO_PIN = "v0.0.0-20250422160041-2d3770c4ea7f"  # genproto after the googleapis/api split

# main.go of the s5cmd wrapper, as s5cmd's own main.go calls command.Main. SLOW_PERCENT > 0 makes
# the binary sleep that share of its own run time before exiting: an injected slow-down of a
# known size, proportional to whatever the step costs. HOLD_MIB > 0 makes it hold that much more
# resident memory (a file beside the binary, mapped: page-cache pages cost little time to map);
# BUSY_PERCENT > 0 makes it spin on the CPU for that share of its run time before exiting.
S5CMD_MAIN = """package main

import (
	"bytes"
	"context"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/peak/s5cmd/v2/command"
)

const slowPercent = {slow}
const holdMiB = {hold}
const busyPercent = {busy}

func hold() []byte {{
	if holdMiB == 0 {{
		return nil
	}}
	// a file beside the binary, mapped and populated: its pages come from the page cache once it
	// is written, so the extra resident memory costs page-table work only, not zeroing
	exe, err := os.Executable()
	if err != nil {{
		panic(err)
	}}
	path, size := exe+".hold", holdMiB<<20
	if st, err := os.Stat(path); err != nil || st.Size() != int64(size) {{
		tmp := path + "." + strconv.Itoa(os.Getpid())
		if err := os.WriteFile(tmp, bytes.Repeat([]byte{{1}}, size), 0o644); err != nil {{
			panic(err)
		}}
		_ = os.Rename(tmp, path)
	}}
	f, err := os.Open(path)
	if err != nil {{
		panic(err)
	}}
	defer f.Close()
	m, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED|syscall.MAP_POPULATE)
	if err != nil {{
		panic(err)
	}}
	return m
}}

func main() {{
	start := time.Now()
	held := hold()
	err := command.Main(context.Background(), os.Args)
	if slowPercent > 0 {{
		time.Sleep(time.Since(start) * slowPercent / 100)
	}}
	if busyPercent > 0 {{
		spin := time.Since(start) * busyPercent / 100
		for t := time.Now(); time.Since(t) < spin; {{
		}}
	}}
	runtime.KeepAlive(held)
	if err != nil {{
		os.Exit(1)
	}}
}}
"""

# kubo's own cmd/ipfs/main.go (kubo.Start(kubo.BuildDefaultEnv)), with the wrapper's own line kept
# in the binary ({wrapper}): two wrappers of one kubo that differ there are two binaries (not
# `identical binary`) that behave the same
KUBO_MAIN = """package main

import (
	"os"

	"github.com/ipfs/kubo/cmd/ipfs/kubo"
)

var wrapper = "{wrapper}"

func main() {{
	if os.Getenv("KUBOWRAP_SAY") != "" {{
		println(wrapper)
	}}
	os.Exit(kubo.Start(kubo.BuildDefaultEnv))
}}
"""


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "refbench tests", "GIT_AUTHOR_EMAIL": "tests@refbench.invalid",
           "GIT_COMMITTER_NAME": "refbench tests", "GIT_COMMITTER_EMAIL": "tests@refbench.invalid"}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout.strip()


def go_env() -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{ROOT / 'tools' / 'bin'}:{env.get('PATH', '')}"
    env.setdefault("GOFLAGS", "-buildvcs=false")
    return env


def module_proxy(root: Path, module: str, files: dict[str, str], version: str = "v1.0.0") -> Path:
    """A Go module proxy in a directory (GOPROXY=file://<the path returned>) serving one version of
    one module: a go.mod on go 1.21 and `files` beside it, as `go mod download` fetches them."""
    import json
    import zipfile
    at = root / "proxy" / module / "@v"
    at.mkdir(parents=True)
    mod = f"module {module}\n\ngo 1.21\n"
    (at / "list").write_text(f"{version}\n")
    (at / f"{version}.info").write_text(json.dumps({"Version": version, "Time": "2026-01-01T00:00:00Z"}))
    (at / f"{version}.mod").write_text(mod)
    with zipfile.ZipFile(at / f"{version}.zip", "w") as z:
        z.writestr(f"{module}@{version}/go.mod", mod)
        for name, text in files.items():
            z.writestr(f"{module}@{version}/{name}", text)
    return root / "proxy"


GO_LINE_FLOOR = "1.21"  # the wrappers' go line before `go get` raises it (module_files)
_LOCAL_GO: list[str] = []


def local_go() -> str:
    """This machine's Go as `go env GOVERSION` names it (go1.26.8), asked once."""
    if not _LOCAL_GO:
        env = {**go_env(), "GOTOOLCHAIN": "local"}
        _LOCAL_GO.append(subprocess.run(["go", "env", "GOVERSION"], check=True, capture_output=True, text=True,
                                        env=env).stdout.strip())
    return _LOCAL_GO[0]


def toolchain_line() -> str:
    """A go.mod `toolchain` line naming this machine's Go. refbench builds each ref with the Go its
    go.mod asks for (refbench/toolchain.py): without this line a test origin's go line would make
    every test build fetch that line's newest patch from the module proxy (`go mod init` writes
    the local version, go 1.26.8: go1.26.11); with it, the tests keep building with the Go that
    is here. It must be newer than the go line (see module_files)."""
    return f"toolchain {local_go()}\n"


_MODFILES: dict[tuple, tuple[str, str]] = {}


def module_files(module: str, requires: tuple[str, ...], main_go: str, scratch: Path) -> tuple[str, str]:
    """go.mod and go.sum for a wrapper module requiring the given module@versions (cached per set).
    From the module cache alone first (GOPROXY=off), then through the module proxy: with every
    module cached, `go get` still asked the proxy about each prefix of the package path (404s are
    not cached), 15 s of waiting for kubo's and 1.6 s without; the versions are pinned, so both
    ways give the same files (an origin made twice had the same go.sum)."""
    # main.go's imports decide what `go mod tidy` keeps; its other lines do not (s5cmd's variants)
    imports = re.search(r"^import \((.*?)^\)", main_go, re.S | re.M)
    key = (module, requires, imports.group(1) if imports else "")
    if key not in _MODFILES:
        d = scratch / f"mod-{len(_MODFILES)}"
        try:
            _resolve_module(d, module, requires, main_go, {**go_env(), "GOPROXY": "off"})
        except RuntimeError:  # a module not in the cache yet (a fresh machine): ask the proxy
            _resolve_module(d, module, requires, main_go, go_env())
        _MODFILES[key] = ((d / "go.mod").read_text(), (d / "go.sum").read_text())
    return _MODFILES[key]


def _resolve_module(d: Path, module: str, requires: tuple[str, ...], main_go: str, env: dict) -> None:
    """Write go.mod and go.sum for the wrapper module in `d` (made afresh), under `env`."""
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    (d / "main.go").write_text(main_go)

    def go(*args: str) -> None:
        p = subprocess.run(["go", *args], cwd=d, capture_output=True, text=True, env=env)
        if p.returncode != 0:
            raise RuntimeError(f"go {' '.join(args)} failed: {p.stderr[-2000:]}")
    go("mod", "init", module)
    # `go mod init` writes this machine's version as the go line (go 1.26.8); a floor instead,
    # which `go get` raises to what the required modules ask, so the toolchain line below
    # stays newer than the go line (one equal to it is invalid: `go: updates to go.mod needed`)
    go("mod", "edit", f"-go={GO_LINE_FLOOR}")
    for req in requires:
        go("get", req)
    go("mod", "tidy")
    # the local Go, as go.mod asks for it: see toolchain_line()
    go("mod", "edit", f"-toolchain={local_go()}")


@dataclass
class Origin:
    path: Path  # the bare origin repository (what --repo points at)
    work: Path  # a working clone used to make commits
    shas: dict[str, str] = field(default_factory=dict)  # name -> commit sha

    def commit(self, name: str, files: dict[str, str], message: str, *, tags=(), parent: str | None = None,
               branch: str | None = None, pull: int | None = None, tag_date: str | None = None) -> str:
        """Commit on `branch` (default master), or on top of `parent` (detached, pushed only to
        `branch` and the given tags / pull ref when named)."""
        if parent:
            git(self.work, "checkout", "-q", "--detach", self.shas.get(parent, parent))
        else:
            branch = branch or "master"
            exists = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"],
                                    cwd=self.work, capture_output=True).returncode == 0
            git(self.work, "checkout", "-q", *([branch] if exists else ["-b", branch]))
        for rel, text in files.items():
            p = self.work / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        git(self.work, "add", "-A")
        git(self.work, "commit", "-q", "--allow-empty", "-m", message)
        sha = git(self.work, "rev-parse", "HEAD")
        self.shas[name] = sha
        for t in tags:
            env_date = {"GIT_COMMITTER_DATE": tag_date} if tag_date else {}
            subprocess.run(["git", "tag", "-a", t, "-m", t], cwd=self.work, check=True, capture_output=True,
                           env={**os.environ, **env_date, "GIT_COMMITTER_NAME": "t",
                                "GIT_COMMITTER_EMAIL": "t@refbench.invalid"})
        if branch:
            git(self.work, "push", "-q", "--force", "origin", f"HEAD:refs/heads/{branch}")
        if tags:
            git(self.work, "push", "-q", "--force", "origin", *[f"refs/tags/{t}" for t in tags])
        if pull is not None:
            git(self.work, "push", "-q", "--force", "origin", f"{sha}:refs/pull/{pull}/head")
        return sha


def new_origin(root: Path) -> Origin:
    bare = root / "origin.git"
    work = root / "work"
    git(root, "init", "-q", "--bare", "-b", "master", str(bare))
    git(root, "clone", "-q", str(bare), str(work))
    git(work, "config", "user.name", "refbench tests")
    git(work, "config", "user.email", "tests@refbench.invalid")
    return Origin(bare, work)


def s5cmd_files(version: str, scratch: Path, slow: int = 0, note: str = "", hold: int = 0,
                busy: int = 0) -> dict[str, str]:
    main_go = S5CMD_MAIN.format(slow=slow, hold=hold, busy=busy)
    gomod, gosum = module_files("example.com/s5wrap", (f"github.com/peak/s5cmd/v2/command@{version}",),
                                main_go, scratch)
    return {"go.mod": gomod, "go.sum": gosum, "main.go": main_go, "NOTE": note or f"s5cmd {version}\n"}


def make_s5cmd_origin(root: Path) -> Origin:
    """master: v1.0.0 (s5cmd v2.2.2) -> v1.1.0 (s5cmd v2.3.0); v1.0.1 (a patch of the old line,
    tagged last), v1.2.0-rc1 (pre-release); refs/pull/7/head: v2.3.0 with a +30% slow-down;
    branches hold-memory (v1.0.0 holding 64 MiB more) and busy-cpu (v1.0.0 spinning on the CPU for
    50% of its run time); branch docs-only: v1.0.0 plus a README."""
    scratch = root / "scratch"
    o = new_origin(root)
    o.commit("old", s5cmd_files(S5CMD_OLD, scratch), "wrap s5cmd v2.2.2", tags=["v1.0.0"],
             tag_date="2026-01-01T00:00:00Z")
    o.commit("new", s5cmd_files(S5CMD_NEW, scratch), "wrap s5cmd v2.3.0", tags=["v1.1.0"],
             tag_date="2026-02-01T00:00:00Z")
    o.commit("slow", s5cmd_files(S5CMD_NEW, scratch, slow=30), "PR 7: a 30% slower s5cmd", parent="new",
             pull=7)
    o.commit("patch", {**s5cmd_files(S5CMD_OLD, scratch), "NOTE": "patch release of the 1.0 line\n"},
             "1.0.1: back-port", parent="old", tags=["v1.0.1"], tag_date="2026-03-01T00:00:00Z")
    o.commit("rc", {**s5cmd_files(S5CMD_NEW, scratch), "NOTE": "release candidate\n"}, "1.2.0-rc1",
             parent="new", tags=["v1.2.0-rc1"], tag_date="2026-04-01T00:00:00Z")
    # branch docs-only: v1.0.0 plus a README, the same Go code: a byte-identical binary
    o.commit("docs", {"README.md": "docs only\n"}, "docs: a README", parent="old", branch="docs-only")
    o.commit("hold", s5cmd_files(S5CMD_OLD, scratch, hold=64), "hold 64 MiB more", parent="old",
             branch="hold-memory")
    o.commit("busy", s5cmd_files(S5CMD_OLD, scratch, busy=50), "burn 50% more CPU", parent="old",
             branch="busy-cpu")
    o.commit("broken", {"main.go": "package main\n\nfunc main() { this does not compile }\n"},
             "a commit that does not build", parent="new", branch="broken")
    git(o.work, "checkout", "-q", "master")
    return o


# kubo's main with `ipfs add` made to hold HOLD_MIB more of the Go heap, touched, for as long as the
# command runs. The command runs where kubo runs it: in the daemon when one is online (the CLI only
# sends the request), so the daemon's peak memory grows and the CLI's does not.
KUBO_HOLD_MAIN = """package main

import (
	"os"
	"runtime"

	cmds "github.com/ipfs/go-ipfs-cmds"
	"github.com/ipfs/kubo/cmd/ipfs/kubo"
	commands "github.com/ipfs/kubo/core/commands"
)

const holdMiB = {hold}

func main() {{
	add := commands.Root.Subcommands["add"]
	run := add.Run
	add.Run = func(req *cmds.Request, re cmds.ResponseEmitter, env cmds.Environment) error {{
		held := make([]byte, holdMiB<<20)
		for i := 0; i < len(held); i += 4096 {{
			held[i] = 1
		}}
		err := run(req, re, env)
		runtime.KeepAlive(held)
		return err
	}}
	os.Exit(kubo.Start(kubo.BuildDefaultEnv))
}}
"""


def kubo_files(version: str, scratch: Path, note: str = "", hold: int = 0, wrapper: str = "kubowrap") -> dict[str, str]:
    """A wrapper module whose ./cmd/ipfs is kubo's own main at the given version, so the kubo
    target's build command (`go build -o OUT ./cmd/ipfs`) builds it unchanged; with hold > 0, an
    `ipfs add` that holds `hold` MiB more while it runs (KUBO_HOLD_MAIN); `wrapper`: the line that
    tells two wrappers of one kubo apart (KUBO_MAIN)."""
    main = KUBO_HOLD_MAIN.format(hold=hold) if hold else KUBO_MAIN.format(wrapper=wrapper)
    # the genproto pin: without it `go mod tidy` finds googleapis/api both in the pre-split genproto
    # monolith (pulled in by a test dependency of grpc-gateway) and in its own module
    gomod, gosum = module_files("example.com/kubowrap", (f"github.com/ipfs/kubo/cmd/ipfs/kubo@{version}",
                                                         f"google.golang.org/genproto@{GENPROTO_PIN}"),
                                main, scratch)
    return {"go.mod": gomod, "go.sum": gosum, "cmd/ipfs/main.go": main, "NOTE": note or f"kubo {version}\n"}


def make_kubo_origin(root: Path) -> Origin:
    """master: v1.0.0 -> v1.1.0, both kubo v0.40.1, whose wrappers differ in one line (KUBO_MAIN):
    two binaries that behave the same. One kubo, not two releases: on a machine with no Go build
    cache each kubo release is a full compile (the second took ~400 s of the suite's CPU on 2 cores,
    issue 38), and no test here reads a difference between releases."""
    scratch = root / "scratch"
    o = new_origin(root)
    o.commit("old", kubo_files(KUBO_OLD, scratch, wrapper="kubowrap v1.0.0"), f"wrap kubo {KUBO_OLD}",
             tags=["v1.0.0"], tag_date="2026-01-01T00:00:00Z")
    o.commit("new", kubo_files(KUBO_OLD, scratch, f"kubo {KUBO_OLD}, wrapper v1.1.0\n", wrapper="kubowrap v1.1.0"),
             "wrap kubo again", tags=["v1.1.0"], tag_date="2026-02-01T00:00:00Z")
    git(o.work, "checkout", "-q", "master")
    return o


def make_kubo_hold_origin(root: Path, hold: int = 64) -> Origin:
    """master: v1.0.0 (kubo v0.40.1) -> v1.1.0, the same kubo whose `ipfs add` holds `hold` MiB more
    while it runs: a daemon-memory change of known size that the CLI cannot see (issue 36)."""
    scratch = root / "scratch"
    o = new_origin(root)
    o.commit("old", kubo_files(KUBO_OLD, scratch), f"wrap kubo {KUBO_OLD}", tags=["v1.0.0"],
             tag_date="2026-01-01T00:00:00Z")
    o.commit("hold", kubo_files(KUBO_OLD, scratch, hold=hold), f"ipfs add holds {hold} MiB more", tags=["v1.1.0"],
             tag_date="2026-02-01T00:00:00Z")
    git(o.work, "checkout", "-q", "master")
    return o


def make_bisect_origin(root: Path, n: int = 8, slow_from: int = 5, broken: tuple[int, ...] = (6,),
                       slow: int = 50) -> Origin:
    """A line of n commits on master (c1 .. cn, all s5cmd v2.3.0): from c<slow_from> on the binary
    sleeps `slow`% of its run time (the regression to find); the commits in `broken` do not
    compile (bisect must skip them). c1 is tagged v1.0.0. The line holds two trees that build:
    c1's (s5cmd v2.3.0 as it is, the tree of the s5cmd origin's v1.1.0) and the slow one's; each
    is built once and its binary serves every commit of that tree (builds.Builder.same_tree_build)."""
    scratch = root / "scratch"
    o = new_origin(root)
    for i in range(1, n + 1):
        if i in broken:
            files = {"main.go": "package main\n\nfunc main() { this does not compile }\n"}
            msg = f"c{i}: a commit that does not build"
        else:
            files = s5cmd_files(S5CMD_NEW, scratch, slow=slow if i >= slow_from else 0)
            msg = f"c{i}: " + ("the slow-down" if i == slow_from else "more work" if i > slow_from else "tidy up")
        o.commit(f"c{i}", files, msg, tags=["v1.0.0"] if i == 1 else ())
    return o


# Contenders whose difference is known exactly, for the tests of what explains a change
# (tests/test_accounting.py, tests/test_profile.py). TWICE runs every command twice, one process after
# the other: twice the requests and bytes of the same work (the second remove finds nothing left to delete).
# BURN spins in main.burnCPU for half of its own run time after the command: a CPU hot spot of a
# known name.
S5CMD_TWICE_MAIN = """package main

import (
	"context"
	"os"
	"os/exec"

	"github.com/peak/s5cmd/v2/command"
)

// s5cmd's Main closes its logger on the way out, so it runs once per process: the command runs
// in two child processes of this binary, one after the other.
func main() {
	if os.Getenv("S5WRAP_CHILD") == "1" {
		if command.Main(context.Background(), os.Args) != nil {
			os.Exit(1)
		}
		return
	}
	var first error
	for i := 0; i < 2; i++ {
		c := exec.Command(os.Args[0], os.Args[1:]...)
		c.Env = append(os.Environ(), "S5WRAP_CHILD=1")
		c.Stdout, c.Stderr = os.Stdout, os.Stderr
		if err := c.Run(); i == 0 {
			first = err
		}
	}
	if first != nil {
		os.Exit(1)
	}
}
"""

S5CMD_BURN_MAIN = """package main

import (
	"context"
	"os"
	"time"

	"github.com/peak/s5cmd/v2/command"
)

var sink uint64

//go:noinline
func burnCPU(d time.Duration) {
	x := uint64(88172645463325252)
	for end := time.Now().Add(d); time.Now().Before(end); {
		for i := 0; i < 4096; i++ {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
		}
	}
	sink = x
}

func main() {
	start := time.Now()
	err := command.Main(context.Background(), os.Args)
	burnCPU(time.Since(start) / 2)
	if err != nil {
		os.Exit(1)
	}
}
"""


def make_explain_origin(root: Path) -> Origin:
    """master: v1.0.0 (s5cmd v2.3.0, as it is); refs/pull/21/head: every command run twice;
    refs/pull/22/head: plus half its run time spent in main.burnCPU."""
    scratch = root / "scratch"
    o = new_origin(root)
    o.commit("base", s5cmd_files(S5CMD_NEW, scratch), "wrap s5cmd v2.3.0", tags=["v1.0.0"])
    for name, main_go, pull in (("twice", S5CMD_TWICE_MAIN, 21), ("burn", S5CMD_BURN_MAIN, 22)):
        gomod, gosum = module_files("example.com/s5wrap", (f"github.com/peak/s5cmd/v2/command@{S5CMD_NEW}",),
                                    main_go, scratch)
        o.commit(name, {"go.mod": gomod, "go.sum": gosum, "main.go": main_go, "NOTE": f"{name}\n"},
                 f"PR {pull}: {name}", parent="base", pull=pull)
    git(o.work, "checkout", "-q", "master")
    return o
