"""Whether the objects a cached clone holds are what their ids say: git reads an object by its id
and does not always re-hash it, so a restored clone may hold a commit replaced under its id, or a
history routed through a planted commit (the threat model is docs/threat-model.md's). Each verification
reads the objects back and hashes them here: each ref's own object (tip_fault), the line between
two commits (line_fault; bisect's commits_between), the whole history every ref reaches
(missing_objects); and each built commit's objects are copied into a fresh repository where git
computes every id anew (verify_into_scratch).

Functions of one clone (a clone_git.ClonePlace, and its opened git.Repo where git's listing is
asked); sources.Clone calls them and decides what a fault costs (a clone made anew, once)."""
from __future__ import annotations

import contextlib
import hashlib
import re
import subprocess
import tempfile
import weakref
from pathlib import Path

import git

from . import paths, tools
from .clone_git import SAFE_GIT, CloneFault, ClonePlace, clone_git_env, git_msg, gitpython_env, safe_git_args
from .errors import BuildError, RefError


def _drop_scratch(scratch: Path, cache: Path) -> None:
    """A verified scratch repository goes with its Clone; at exit, a cache changed since (a link
    planted where it was) leaves it in place rather than fail the exit."""
    with contextlib.suppress(paths.CacheLinkError):
        paths.remove_tree(scratch, cache, ignore_errors=True)


def hashes_to(sha: str, kind: str, body: bytes) -> bool:
    """Whether an object of type `kind` holding `body` has the id `sha` (SHA-1, or SHA-256 for a
    64-hex id): what git computes and, where refbench reads an object, does not always check."""
    algo = hashlib.sha1 if len(sha) == 40 else hashlib.sha256
    return algo(kind.encode() + b" %d\0" % len(body) + body).hexdigest() == sha


def commit_parents(body: bytes) -> list[str] | None:
    """The parents git reads from a commit's content, lower case: only the run of `parent` lines
    right after the `tree` line (parse_commit_buffer). git ignores a `parent` line further down
    (after `committer`), and hash-object and fsck accept one, so counting it called every line
    through such a merged commit forged, for good (review35h H3). None: no `tree` line first."""
    lines = body.split(b"\n\n", 1)[0].split(b"\n")
    if not lines[0].startswith(b"tree "):
        return None
    parents = []
    for line in lines[1:]:
        if not line.startswith(b"parent "):
            break
        parents.append(line[7:].decode(errors="replace").lower())
    return parents


def read_objects(place: ClonePlace, shas: list[str]) -> list[tuple[str, bytes] | None]:
    """(type, content) of the object stored under each of `shas` in the clone, None where there
    is none: one `cat-file --batch`, which re-hashes nothing (hashes_to does)."""
    if not shas:
        return []
    with place.lock():
        proc = subprocess.run([tools.git(), *safe_git_args(), "cat-file", "--batch"],
                              input="".join(sha + "\n" for sha in shas).encode(), capture_output=True,
                              env=place.git_env())
    data, at, found = proc.stdout, 0, []
    for _ in shas:
        end = data.find(b"\n", at)
        header = data[at:end].split() if end >= 0 else []
        if len(header) != 3 or not header[2].isdigit():  # `<id> missing`, or git died
            found.append(None)
            at = end + 1 if end >= 0 else len(data)
            continue
        size = int(header[2])
        found.append((header[1].decode(errors="replace"), data[end + 1:end + 1 + size]))
        at = end + 2 + size
    return found


def holds_object(place: ClonePlace, sha: str) -> bool:
    """Whether the clone has an object stored under `sha` (`cat-file -e`, which re-hashes nothing)."""
    with place.lock():
        return subprocess.run([tools.git(), *safe_git_args(), "cat-file", "-e", sha], capture_output=True,
                              env=place.git_env()).returncode == 0


def named_fault(place: ClonePlace, named: dict[str, str]) -> str | None:
    """The first of the objects `named` (id -> what names it), or of what an annotated tag among
    them names down to a commit, that is missing or does not hash to its id; None when all do.
    One `cat-file --batch` a level of tags; the commits below a tip are the line's to verify
    (line_fault)."""
    named, todo = dict(named), sorted(named)
    while todo:
        below = []
        for sha, obj in zip(todo, read_objects(place, todo)):
            if obj is None:
                return f"{named[sha]}: no object {sha[:12]} here"
            if not hashes_to(sha, *obj):
                return f"{named[sha]}: the object {sha[:12]} hashes to another id"
            target = re.match(rb"object ([0-9a-f]{40}|[0-9a-f]{64})\n", obj[1]) if obj[0] == "tag" else None
            if target and target.group(1).decode() not in named:
                named[target.group(1).decode()] = named[sha]
                below.append(target.group(1).decode())
        todo = below
    return None


def tip_fault(place: ClonePlace, repo: git.Repo, *patterns: str) -> str | None:
    """Why an object a ref of the clone (`repo`) names (all refs, or those matching `patterns`) is
    not what its id says, or None (named_fault). A fetch verifies nothing when a ref's id is unchanged,
    and neither does missing_objects' walk, while every later rev-parse re-hashes the tip and finds
    no commit: a release tag's object (or a branch's tip) replaced under its id was "ref not
    found" in every run, and the clone was never made anew (review35h H1)."""
    try:
        listing = repo.git.for_each_ref("--format=%(objectname) %(refname)", *patterns)
    except git.GitCommandError as e:
        return f"its refs cannot be listed ({git_msg(e)})"
    named: dict[str, str] = {}  # object id -> the ref that names it, for the one line
    for row in listing.split("\n"):
        sha, _, ref = row.partition(" ")
        if sha:
            named.setdefault(sha, ref)
    return named_fault(place, named)


def ancestry_line(repo: git.Repo, since: str, until: str) -> list[tuple[str, list[str], str]]:
    """(commit, the parents git walked, subject) of every commit after `since` up to `until`
    that descends from `since` (`rev-list --ancestry-path`), oldest first. Rows split at
    newlines only: a subject may hold U+2028, where str.splitlines would break a row."""
    out = repo.git.rev_list("--ancestry-path", "--topo-order", "--reverse", "--format=%H %P%x09%s",
                            f"{since}..{until}")
    return [(ids.split()[0], ids.split()[1:], subject) for ids, _, subject in
            (row.partition("\t") for row in out.split("\n") if row and not row.startswith("commit "))]


def line_fault(place: ClonePlace, rows: list[tuple[str, list[str], str]], since: str, until: str) -> str | None:
    """Why `rows` (ancestry_line(since, until), oldest first) is not the whole line from `since` to
    `until`, or None: it must end at `until`, its oldest commit must name `since` as a parent, and
    every commit must hash to its id and name the parents git walked. An empty line passes only
    when since == until: git lists it from the same unverified parents, so two commits replaced
    under their ids can empty it while merge-base still says 'reached' (review35g G1)."""
    if since == until:
        return None
    if not rows or rows[-1][0] != until or since not in rows[0][1]:
        return f"the line from {since[:12]} to {until[:12]} is not whole ({len(rows)} commits listed)"
    return unauthentic(place, [(sha, parents) for sha, parents, _ in rows])


def unauthentic(place: ClonePlace, commits: list[tuple[str, list[str]]]) -> str | None:
    """The first commit whose object in the clone does not hash to its id or does not name
    `parents` as its parents (as git reads them: commit_parents), or None (one `cat-file --batch`
    for all of them)."""
    for (sha, parents), obj in zip(commits, read_objects(place, [sha for sha, _ in commits])):
        if obj is None or obj[0] != "commit":
            return f"{sha[:12]}: not a commit here"
        if not hashes_to(sha, *obj):
            return f"{sha[:12]}: its content hashes to another id"
        named = commit_parents(obj[1])
        if named != parents:
            return (f"{sha[:12]}: git walked parents {[p[:12] for p in parents]}, the commit names "
                    f"{[p[:12] for p in named or []]}")
    return None


def authentic_line(place: ClonePlace, repo: git.Repo, sha: str, reached: str, by: str) -> None:
    """A CloneFault unless every commit from `sha` up to `reached` (the commit of the ref `by`)
    hashes to its id and names the parents git walked: git's reachability (merge-base,
    for-each-ref --contains) reads parents without re-hashing a commit (review35f F2).
    0.01-0.65 s on kubo's 15,943 commits (one commit, or 9,405 from v0.4.0 to master)."""
    wrong = line_fault(place, ancestry_line(repo, sha, reached), sha, reached)
    if wrong:
        raise CloneFault(f"the cached clone {place.clone_dir} does not hold the history from {sha[:12]} to {by} "
                         f"as the commits' ids say ({wrong})")


def commits_between(place: ClonePlace, repo: git.Repo, good: str, bad: str) -> list[tuple[str, str]]:
    """(sha, subject) of the commits after GOOD up to and including BAD, oldest first (bisect's
    line), each listed commit read back and hashed: its content must hash to its id and name
    the parents git walked. BAD is a commit trusted by its id, so a line whose every commit
    names its own parents is the line the origin's history holds; parents taken from anything
    else (a planted commit-graph, shallow file or pack index) fail here (review35c)."""
    try:
        if not repo.is_ancestor(good, bad):
            raise RefError(f"GOOD ({good[:10]}) is not an ancestor of BAD ({bad[:10]})")
        rows = ancestry_line(repo, good, bad)
    except git.GitCommandError as e:
        raise RefError(f"cannot list the commits between GOOD and BAD: {git_msg(e)}") from None
    wrong = line_fault(place, rows, good, bad)
    if wrong:
        raise RefError(f"the clone {place.clone_dir} does not hold the history between GOOD and BAD as the "
                       f"commits' ids say ({wrong}): remove it to fetch it anew")
    return [(sha, subject) for sha, _, subject in rows]


def missing_objects(place: ClonePlace) -> str | None:
    """Why the clone's refs are not whole (the first object git cannot read, walking every
    object every ref reaches), or None. `rev-list --objects --all --missing=error`: 0.02 s on
    s5cmd's clone (604 commits), 0.36 s on kubo's (16,360 commits, 385 branches and tags)."""
    with place.lock():
        proc = subprocess.run([tools.git(), *safe_git_args(), "rev-list", "--objects", "--all", "--missing=error"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=place.git_env())
    if proc.returncode == 0:
        return None
    return ((proc.stderr.decode(errors="replace").strip().splitlines() or ["git rev-list failed"])[-1]
            .removeprefix("fatal: "))


def verify_into_scratch(place: ClonePlace, root: Path, sha: str, owner: object) -> git.Repo:
    """A fresh bare repository under `root`, shallow at `sha`, holding the objects of commit `sha`
    and its tree as `index-pack --strict` took them from the clone, each id computed anew from its
    content; a BuildError when the clone does not hold them as their ids say. Removed when `owner`
    (the Clone asking) goes, made or not: the finalizer is set before anything can fail."""
    scratch = Path(tempfile.mkdtemp(prefix=f".verified-{sha[:10]}-", dir=paths.make_dirs(root, place.cache)))
    weakref.finalize(owner, _drop_scratch, scratch, place.cache)
    git_bin, env = tools.git(), tools.child_env()
    subprocess.run([git_bin, *safe_git_args(), "init", "--quiet", "--bare", str(scratch)], check=True,
                   capture_output=True, env=env)
    paths.remove_tree(scratch / "hooks", place.cache, ignore_errors=True)
    paths.replace_file(scratch / "shallow", sha + "\n", within=place.cache)  # its parents are not needed, nor fetched
    src = {**env, **clone_git_env(place.clone_dir)}
    with place.lock():
        listing = subprocess.run([git_bin, *safe_git_args(), "rev-list", "--objects", "--no-walk", sha],
                                 capture_output=True, env=src)
        # no delta search, no compression: the pack lives for one run, and this is 4x faster
        # (0.27 s instead of 1.16 s for s5cmd's 974-file tree; benchmarks/trust_cost.py)
        packed = subprocess.run([git_bin, *safe_git_args(), "pack-objects", "--stdout", "-q", "--window=0",
                                 "--compression=0"],
                                input=listing.stdout, capture_output=True, env=src) if listing.returncode == 0 else None
    indexed = subprocess.run([git_bin, *safe_git_args(), "index-pack", "--stdin", "--strict"], input=packed.stdout,
                             capture_output=True, env={**env, "GIT_DIR": str(scratch)}) if packed else None
    if not indexed or indexed.returncode != 0:
        failed = indexed or packed or listing
        why = (failed.stderr.decode(errors="replace").strip().splitlines() or ["git failed"])[-1]
        raise BuildError(f"the cached clone {place.clone_dir} does not hold commit {sha[:12]} and its files as "
                         f"their ids say ({why.removeprefix('fatal: ')})", sha=None)
    repo = git.Repo(scratch)
    repo.git.set_persistent_git_options(c=list(SAFE_GIT))
    repo.git.update_environment(**gitpython_env(scratch))
    if repo.git.rev_parse("--verify", "--quiet", f"{sha}^{{commit}}") != sha:
        raise BuildError(f"the cached clone {place.clone_dir}: {sha[:12]} is not a commit", sha=None)
    return repo
