"""A cached clone whose entries are not of the kind git makes them (a `config` directory, an
`objects` or `refs` file, a `FETCH_HEAD` directory, ...), planted in a throw-away cache as a
pull-request job's restored cache may hold it. `config`, `objects` and `refs` crashed every run
(IsADirectoryError, InvalidGitRepositoryError: exit 3), a `FETCH_HEAD` directory failed every fetch
("cannot fetch", exit 2), until someone removed the cache by hand. Each is a clone fault now
(sources.clone_faults): cloned anew with one line naming the entry and the kind refbench's clones
hold there, and the run goes on."""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import run_cli
from origins import new_origin
from refbench import sources
from refbench.errors import RefbenchError, RefError

GOMOD = "module example.com/kinds\n\ngo 1.21\n"
FILE, DIR = "a file", "a directory"
#: (entry, what is planted there (None: it is removed), the kind refbench's clones hold there)
PLANTED = [
    ("config", DIR, FILE),  # own_clone's rename over it: IsADirectoryError
    ("objects", FILE, DIR),  # git and GitPython take the clone for no repository
    ("refs", FILE, DIR),
    ("objects", None, DIR),
    ("refs", None, DIR),
    ("HEAD", DIR, FILE),
    ("FETCH_HEAD", DIR, FILE),  # every fetch failed, the clone kept
    ("packed-refs", DIR, FILE),
    ("shallow", DIR, FILE),
    ("description", DIR, FILE),
    ("info", FILE, DIR),
    ("objects/pack", FILE, DIR),
    ("objects/info", FILE, DIR),
    ("refs/heads", FILE, DIR),
    ("refs/tags", FILE, DIR),
]
IDS = [f"{entry}-{planted.split()[-1] if planted else 'missing'}" for entry, planted, _ in PLANTED]


@pytest.fixture(scope="module")
def kinds_origin(tmp_path_factory):
    """master: one (v1.0.0) - two (v1.1.0), annotated tags; nothing is built from it."""
    o = new_origin(tmp_path_factory.mktemp("kinds-origin"))
    o.commit("one", {"go.mod": GOMOD, "main.go": "package main\n\nfunc main() {}\n"}, "one", tags=["v1.0.0"])
    o.commit("two", {"README.md": "two\n"}, "two", tags=["v1.1.0"])
    return o


def _clone(origin, tmp_path: Path, offline: bool = False) -> sources.Clone:
    """The cached clone of `origin` under tmp_path/builds, as a Builder makes one (each call: a new run)."""
    root = tmp_path / "builds" / "kinds"
    root.mkdir(parents=True, exist_ok=True)
    return sources.Clone(root, str(origin.path), offline=offline)


def _planted(origin, tmp_path: Path, entry: str, planted: str | None) -> Path:
    """A clone an earlier run left (its objects packed, as a real origin's fetch leaves them), with
    `entry` made `planted`: a directory holding a file (no git removes it as an empty one), a file,
    or nothing."""
    clone = _clone(origin, tmp_path)
    clone.resolve("v1.0.0")
    d = clone.clone_dir
    subprocess.run(["git", "--git-dir", str(d), "repack", "-a", "-d", "-q"], check=True)
    path = d / entry
    shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    if planted == DIR:
        path.mkdir()
        (path / "planted").write_text("planted\n")
    elif planted == FILE:
        path.write_text("planted\n")
    return d


def _said(entry: str, planted: str | None, held: str) -> str:
    return f"{entry}: {planted or 'missing'}, where refbench's clones hold {held}"


@pytest.mark.parametrize("entry,planted,held", PLANTED, ids=IDS)
def test_an_entry_of_another_kind_is_a_clone_fault_and_the_run_goes_on(kinds_origin, tmp_path, caplog, entry,
                                                                       planted, held):
    d = _planted(kinds_origin, tmp_path, entry, planted)
    assert any(_said(entry, planted, held) in fault for fault in sources.clone_faults(d))
    with caplog.at_level(logging.WARNING):
        resolved = _clone(kinds_origin, tmp_path).resolve("v1.1.0")
    assert resolved.sha == kinds_origin.shas["two"]
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(said) == 1 and _said(entry, planted, held) in said[0] and "anew" in said[0], said
    assert sources.clone_faults(d) == []


@pytest.mark.parametrize("entry,planted,held", PLANTED, ids=IDS)
def test_offline_an_entry_of_another_kind_is_one_line_not_a_crash(kinds_origin, tmp_path, caplog, entry, planted,
                                                                  held):
    """Offline, a faulty clone is made anew too and nothing fills it: a RefError, never a traceback."""
    _planted(kinds_origin, tmp_path, entry, planted)
    with caplog.at_level(logging.WARNING), pytest.raises(RefError, match="ref not found"):
        _clone(kinds_origin, tmp_path, offline=True).resolve("v1.1.0")
    assert _said(entry, planted, held) in caplog.text


def test_each_nested_entry_has_its_parent_directory_in_the_table():
    """_kind_faults looks at an entry only below its parent, as the table says it is."""
    nested = [rel for rel in sources.CLONE_KINDS if "/" in rel]
    assert nested and all(sources.CLONE_KINDS.get(rel.rpartition("/")[0]) == DIR for rel in nested)


def test_a_run_over_a_clone_whose_config_is_a_directory_goes_on(kinds_origin, tmp_path, caplog):
    """The report's case through the command line: exit 3 (an internal error) in every run before.
    A cache of the test's own: a crash report goes to XDG_CACHE_HOME. (In process, the warning goes
    to the test's log capture, not to stderr.)"""
    args = ("--dry-run", "-s", "v1.0.0", "v1.1.0", "--repo", str(kinds_origin.path), "--builds-dir",
            str(tmp_path / "builds"), "--go", "local", "--quick", "--only", "small files")
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    assert run_cli(*args, cwd=tmp_path, env=env).returncode == 0
    (config,) = (tmp_path / "builds").glob("*/clones/*/config")
    config.unlink()
    config.mkdir()
    with caplog.at_level(logging.WARNING):
        proc = run_cli(*args, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert _said("config", DIR, FILE) in caplog.text
    assert config.is_file()


# ---- a restored clone directory of mode 000, for a runner that is not root ----------------------
#: the directories a restored cache left at mode 000 (tar sets a directory's mode last), by their
#: path in the clone ("." the clone itself): clone_faults' listing of each raised PermissionError
#: for a runner that is not root, and the run crashed (exit 3) every time until the cache was
#: removed by hand. Root lists them anyway: the runner here is nobody, a forked child.
SHUT = [".", "objects", "info", "objects/info"]


@pytest.fixture
def nobodys():
    """A temporary directory outside pytest's (root's own, 0700 above it), for nobody to own."""
    import tempfile
    if os.geteuid() != 0:
        from conftest import need
        need("root", "runs as a second user, nobody")
    top = Path(tempfile.mkdtemp(prefix="refbench-shut-"))
    try:
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)  # root: whatever the modes


def _shut(origin, top: Path, shut: str, owned_by_root: bool = False) -> tuple[sources.Clone, Path]:
    """A copy of `origin` and its cached clone (made by root, so every module the fault path uses is
    imported before the child, which may read none of root's), given to nobody, with `shut` at mode
    000: a Clone to open it as a new run does, and the directory made 000. `owned_by_root`: that
    directory stays root's, so nobody cannot give it its permissions back."""
    url = str(top / "origin.git")
    shutil.copytree(origin.path, url)
    root = top / "builds" / "kinds"
    root.mkdir(parents=True)
    sources.Clone(root, url).resolve("v1.0.0")
    shut_dir = sources.Clone(root, url).clone_dir / shut
    for where, dirs, files in os.walk(top):
        for name in [".", *dirs, *files]:
            path = os.path.join(where, name)
            if not (owned_by_root and os.path.samefile(path, shut_dir)):
                os.lchown(path, 65534, 65534)
    shut_dir.chmod(0)
    return sources.Clone(root, url), shut_dir


def _as_runner(top: Path, fn) -> int:
    """fn() as nobody, with a home of its own (git reads the user's config there), its exit code."""
    from test_trust_r9 import _as_nobody

    def run() -> None:
        os.environ["HOME"] = str(top)
        fn()
    return _as_nobody(run)


def _unlisted(clone: sources.Clone, shut: str) -> str:
    """The fault naming the shut directory: the clone's own path for the clone itself."""
    return f"{clone.clone_dir if shut == '.' else shut}: cannot be listed (Permission denied)"


@pytest.mark.parametrize("shut", SHUT)
def test_a_clone_directory_of_mode_000_is_a_clone_fault_for_a_runner_that_is_not_root(kinds_origin, nobodys,
                                                                                      caplog, shut):
    """The reviewer's case: cloned anew with one warning naming the directory, and the run goes on."""
    clone, _ = _shut(kinds_origin, nobodys, shut)
    fault = _unlisted(clone, shut)

    def run() -> None:
        assert fault in sources.clone_faults(clone.clone_dir)  # raised PermissionError
        caplog.clear()
        assert clone.resolve("v1.1.0").sha == kinds_origin.shas["two"]
        said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(said) == 1 and fault in said[0] and "anew" in said[0], said
        assert sources.clone_faults(clone.clone_dir) == []
    with caplog.at_level(logging.WARNING):
        assert _as_runner(nobodys, run) == 0


@pytest.mark.parametrize("shut", SHUT)
def test_offline_a_clone_directory_of_mode_000_is_one_line_not_a_crash(kinds_origin, nobodys, caplog, shut):
    """Offline, the clone is made anew and nothing fills it: a RefError (exit 2), the fault warned."""
    clone, _ = _shut(kinds_origin, nobodys, shut)
    clone.offline = True
    fault = _unlisted(clone, shut)

    def run() -> None:
        caplog.clear()
        with pytest.raises(RefError, match="ref not found"):
            clone.resolve("v1.1.0")
        assert fault in caplog.text, caplog.text
    with caplog.at_level(logging.WARNING):
        assert _as_runner(nobodys, run) == 0


def test_a_faulty_clone_that_cannot_be_removed_is_one_line_not_a_crash(kinds_origin, nobodys):
    """A mode 000 directory of another user's (root's) in nobody's clone: nobody cannot give it its
    permissions back, so the clone cannot be removed. One line naming the clone (exit 2), not the
    PermissionError's traceback (exit 3), and it is left as it was for the next run to refuse."""
    clone, shut_dir = _shut(kinds_origin, nobodys, "objects", owned_by_root=True)

    def run() -> None:
        with pytest.raises(RefbenchError) as got:
            clone.resolve("v1.1.0")
        said = str(got.value)
        assert f"cannot remove the cached clone {clone.clone_dir}" in said and "\n" not in said, said
        assert "Permission denied" in said or "Operation not permitted" in said, said
        assert shut_dir.parent.is_dir()
    assert _as_runner(nobodys, run) == 0
