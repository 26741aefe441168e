"""What a cached bare clone may hold on disk that refbench never puts there, read with lstat only
(nothing in the clone is followed): entries of another kind than git makes them, one git needs
missing, a directory that cannot be listed, files in the info directories, a HEAD git init would
not write, symbolic refs (clone_faults). A restored cache may hold any of them (the threat model is
docs/threat-model.md's); a clone with one is removed and made anew (sources.Clone.repo).

Pure reading of one directory, apart from git: sources re-exports its names."""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from . import paths

_FILE, _DIR, _OTHER = "a file", "a directory", "a link or special file"
#: each entry a bare clone refbench made may hold where git puts it (git init, fetch, pack-refs), and
#: its kind. One of another kind is a clone fault: a `config` directory crashed own_clone, an
#: `objects` or `refs` file made git and GitPython take the clone for no repository, a `FETCH_HEAD`
#: directory failed every fetch, in every run until the cache was removed by hand. Each nested
#: entry's parent is here too, a directory (_kind_faults looks below it). Deeper entries (a ref, a
#: pack) are named by the origin: git failing on one is the fetch's fault (Clone.fetch)
CLONE_KINDS: Mapping[str, str] = MappingProxyType({
    **dict.fromkeys(("HEAD", "config", "description", "packed-refs", "FETCH_HEAD", "ORIG_HEAD", "shallow",
                     "info/exclude", "info/refs", "objects/info/packs"), _FILE),
    **dict.fromkeys(("objects", "refs", "info", "logs", "branches", "objects/info", "objects/pack", "refs/heads",
                     "refs/tags", "refs/remotes", "refs/remotes/origin", "refs/refbench"), _DIR),
})
#: the entries git cannot do without: a directory lacking one is no repository to git (a missing
#: HEAD is not among them: Clone.repo makes the clone anew without one)
CLONE_NEEDS = frozenset({"objects", "refs"})
#: what the top level of a bare clone refbench made holds; anything else was put there by someone else
CLONE_ENTRIES = frozenset(name for name in CLONE_KINDS if "/" not in name)
#: what refbench's clones hold under info/ and objects/info/: no attributes, grafts, alternates, and
#: no commit-graph or multi-pack-index (SAFE_GIT writes none; a planted one rewrites history)
ALLOWED_INFO = {rel: frozenset(name.rpartition("/")[2] for name in CLONE_KINDS if name.rpartition("/")[0] == rel)
                for rel in ("info", "objects/info")}


def clone_faults(d: Path, allowed_info: Mapping[str, frozenset[str]] = ALLOWED_INFO) -> list[str]:
    """What makes the bare clone at `d` something refbench did not make: a symbolic link or special
    file anywhere in it, an entry git reads to go elsewhere or run something (commondir, gitdir,
    worktrees, hooks, config.worktree, info/attributes, info/grafts, objects/info/alternates, ...),
    an entry of another kind than git makes it or one git needs missing (_kind_faults), or anything
    else refbench never writes. Empty: only what git init and fetch make. A restored
    cache may hold any of them (the threat model is refbench.trust's): a `commondir` naming the
    user's checkout made refbench's `fetch --prune` run there, one naming a config of its own ran
    an `ext::` remote's command. Read with lstat only: nothing in the clone is followed."""
    names, fault = _clone_listing(d)
    if fault:
        return [fault]
    faults = [f"{name}: not something refbench's clones hold" for name in names if name not in CLONE_ENTRIES]
    faults += _kind_faults(d)
    if not _head_as_made(d / "HEAD"):
        faults.append("HEAD: not the branch `git init` names (git and GitPython refuse the clone)")
    faults += _symbolic_refs(d)
    faults += _info_faults(d, allowed_info)
    # an unlistable directory is a fault, not skipped: git opens a loose ref in it by path
    # (`rev-parse refs/tags/NAME`) while every listing, and os.walk's default, passes it over
    walk = os.walk(d, onerror=lambda e: faults.append(f"{os.path.relpath(e.filename, d)}: cannot be listed ({e.strerror})"))
    for top, dirs, files in walk:
        for name in dirs + files:
            rel = os.path.relpath(os.path.join(top, name), d)
            try:
                mode = os.lstat(os.path.join(top, name)).st_mode
            except OSError as e:  # listed (r), not searchable (x): a restored 0600 directory
                faults.append(_unsearchable(d, rel, e))
                continue
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                faults.append(f"{rel}: a link or special file")
            elif stat.S_ISDIR(mode) and mode & 0o700 != 0o700:
                faults.append(f"{rel}: a directory of mode {oct(stat.S_IMODE(mode))}, which git never makes")
            elif stat.S_ISREG(mode) and not mode & stat.S_IRUSR:
                faults.append(f"{rel}: a file its owner cannot read")
    return list(dict.fromkeys(faults))  # one line each: an unsearchable directory is met by several looks


def _clone_listing(d: Path) -> tuple[list[str], str | None]:
    """The names in the clone directory `d`, sorted, or the fault that keeps it from being verified:
    no directory, one that cannot be listed, or one of a mode git never makes. A restored clone of
    mode 000 (tar sets a directory's mode last) raised PermissionError here for a runner that is
    not root, and every run crashed (exit 3) until the cache was removed by hand. Such a clone is
    removed whole (_remove_clone), so nothing more is looked for in it."""
    try:
        st = os.lstat(d)
        if not stat.S_ISDIR(st.st_mode):
            return [], f"{d} is not a directory"
        names = sorted(os.listdir(d))
    except OSError as e:
        return [], f"{d}: cannot be listed ({e.strerror or e})"
    if st.st_mode & 0o700 != 0o700:  # listed, yet its entries may not be looked at: a 0600 one
        return [], f"{d}: a directory of mode {oct(stat.S_IMODE(st.st_mode))}, which git never makes"
    return names, None


def _info_faults(d: Path, allowed_info: Mapping[str, frozenset[str]]) -> list[str]:
    """Each entry of the clone's info directories (info/, objects/info/) that refbench's clones do not
    hold there (`allowed_info`: attributes, grafts, alternates, a commit-graph are not). One that
    cannot be listed is a fault too, naming it: what it holds cannot be known, and git reads it
    all the same (a restored mode 000 `info` raised PermissionError here, for a runner that is
    not root, in every run)."""
    faults = []
    for rel, allowed in allowed_info.items():
        try:
            kind = _kind(d / rel)
        except OSError as e:
            faults.append(_unsearchable(d, rel, e))
            continue
        if kind != _DIR:
            continue
        try:
            names = sorted(os.listdir(d / rel))
        except OSError as e:
            faults.append(f"{rel}: cannot be listed ({e.strerror or e})")
            continue
        faults += [f"{rel}/{name}: not something refbench's clones hold" for name in names if name not in allowed]
    return faults


def _kind_faults(d: Path) -> list[str]:
    """Each entry of CLONE_KINDS in the clone at `d` that is of another kind, and each of CLONE_NEEDS
    that is missing, named with the kind refbench's clones hold there. An entry is looked at only
    below a directory (parents first: sorted), so no link on its way is followed; a link or special
    file itself is left to clone_faults' walk, which names it."""
    found: dict[str, str | None] = {}
    faults = []
    for rel in sorted(CLONE_KINDS):
        parent, held = rel.rpartition("/")[0], CLONE_KINDS[rel]
        try:
            found[rel] = kind = _kind(d / rel) if not parent or found[parent] == _DIR else None
        except OSError as e:  # not absent, yet not to be looked at: not "missing" either
            found[rel] = None
            faults.append(_unsearchable(d, rel, e))
            continue
        if kind is None and rel in CLONE_NEEDS:
            faults.append(f"{rel}: missing, where refbench's clones hold {held} "
                          "(git takes the clone for no repository)")
        elif kind in (_FILE, _DIR) and kind != held:
            faults.append(f"{rel}: {kind}, where refbench's clones hold {held}")
    return faults


def _kind(path: Path) -> str | None:
    """What `path` is, read with lstat: _FILE, _DIR, _OTHER, or None when there is nothing. Any
    other OSError is raised: an entry in a directory that may not be searched (a restored mode 000
    `objects`, for a runner that is not root) is no missing one, and its caller names it."""
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    return _FILE if stat.S_ISREG(mode) else _DIR if stat.S_ISDIR(mode) else _OTHER


def _unsearchable(d: Path, rel: str, e: OSError) -> str:
    """The fault of the clone's entry `rel` that lstat refused (`e`): the fault of the directory it
    is in (the clone itself for a top-level one), whose entries cannot be looked at. Named so once
    for all its entries (clone_faults keeps one line of each)."""
    parent = rel.rpartition("/")[0]
    return f"{parent or d}: its entries cannot be looked at ({e.strerror or e})"


#: what `git init` writes in HEAD, and all a clone of refbench's holds there (it never checks out)
_INIT_HEAD = re.compile(rb"ref: refs/heads/[A-Za-z0-9._/-]{1,200}\n?")


def _head_as_made(head: Path) -> bool:
    """Whether the clone's HEAD is absent (git init makes it) or names a branch, as git init writes
    it. Any other HEAD (a restored `garbage`) makes git and GitPython refuse the whole directory, so
    every run crashed on it instead of cloning anew (review35e LOW). Read through no link, no FIFO."""
    if not os.path.lexists(head):
        return True
    data = paths.read_regular(head, limit=512)
    return data is not None and bool(_INIT_HEAD.fullmatch(data))


#: the one symbolic ref a clone of refbench's holds: the origin's HEAD, naming one of its branches
ORIGIN_HEAD = "refs/remotes/origin/HEAD"
_ORIGIN_HEAD_TARGET = re.compile(rb"ref: refs/remotes/origin/[A-Za-z0-9._/-]{1,200}\n?")


def _symbolic_refs(d: Path) -> list[str]:
    """Every loose ref under refs/ that is symbolic (a file reading `ref: ...`), but the origin's HEAD
    naming an origin branch. Read from the files, not git's listing: for-each-ref skips a symbolic
    ref whose target is missing, so a restored `refs/tags/v99.0.0 -> refs/remotes/origin/feature`
    without its target survived the sweep, and the fetch then made it a release tag holding an
    unmerged branch (review35f F1). Packed refs are never symbolic."""
    found = []
    for top, _, files in os.walk(d / "refs"):
        for name in files:
            path = Path(top) / name
            rel = path.relative_to(d).as_posix()
            data = paths.read_regular(path, limit=4096)
            if data is None or not data.startswith(b"ref:"):
                continue
            if rel == ORIGIN_HEAD and _ORIGIN_HEAD_TARGET.fullmatch(data):
                continue
            found.append(f"{rel}: a symbolic ref ({data[:80].decode(errors='replace').strip()}), which refbench never makes")
    return found

