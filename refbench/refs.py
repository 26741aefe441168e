"""Turn what the user typed (tag, PR number, commit, branch, latest_release, HEAD) into a commit."""
from __future__ import annotations

import re
from dataclasses import dataclass

import git

from .errors import RefError

# What may reach git at all: ref-name characters only; nothing that a shell or git would read
# as an option, a range, a reflog expression or a glob.
_SAFE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._/+-]{0,199}$")
_PR = re.compile(r"^#?(\d{1,6})$")
_SHA = re.compile(r"^[0-9a-fA-F]{7,40}$")
_WHOLE = re.compile(r"[0-9a-fA-F]{40}|[0-9a-fA-F]{64}")
_SEMVER = re.compile(
    r"^v?(?P<major>0|[1-9]\d*)\.(?P<minor>0|[1-9]\d*)\.(?P<patch>0|[1-9]\d*)"
    r"(?:-(?P<pre>[0-9A-Za-z.-]+))?(?:\+(?P<build>[0-9A-Za-z.-]+))?$"
)

KINDS = ("pr", "latest_release", "head", "tag", "commit", "branch")


@dataclass(frozen=True)
class Ref:
    text: str  # what the user typed
    kind: str  # one of KINDS (tag/commit/branch are a first guess until resolved)
    pr: int | None = None


@dataclass(frozen=True)
class ResolvedRef:
    text: str
    kind: str
    sha: str
    display: str  # e.g. "v2.2.2", "PR #478", "master@1a2b3c4", "latest_release (v2.3.0)"
    version: str | None = None  # module version, for --source module
    toolchain: str | None = None  # the Go that builds it (builds.Builder settles it: toolchain.pick)

    @property
    def short(self) -> str:
        return self.sha[:10]


def validate(text: str) -> None:
    """Refuse anything that is not a plausible ref before it reaches git or a shell."""
    if not isinstance(text, str) or not text:
        raise RefError("not a valid ref: '' (empty)")
    bad = (not _SAFE.fullmatch(text) or ".." in text or "//" in text or text.endswith((".", "/", ".lock"))
           or "/." in text or "@{" in text)
    if bad and not _PR.fullmatch(text):
        raise RefError(f"not a valid ref: {text!r} (expected a tag, PR number, commit, branch, "
                       "latest_release or HEAD)")


def classify(text: str) -> Ref:
    validate(text)
    m = _PR.fullmatch(text)
    if m:
        return Ref(text, "pr", int(m.group(1)))
    if text == "latest_release":
        return Ref(text, "latest_release")
    if text == "HEAD":
        return Ref(text, "head")
    if _SEMVER.fullmatch(text):
        return Ref(text, "tag")
    if _SHA.fullmatch(text) and not text.isalpha():
        return Ref(text, "commit")
    return Ref(text, "branch")


def semver_key(tag: str) -> tuple | None:
    m = _SEMVER.fullmatch(tag)
    if not m:
        return None
    pre = m.group("pre")
    # A release sorts after its pre-releases; pre-release identifiers compare as in semver 2.0.
    pre_key: tuple = (1,) if pre is None else (0, *[(0, int(p), "") if p.isdigit() else (1, 0, p)
                                                   for p in pre.split(".")])
    return (int(m.group("major")), int(m.group("minor")), int(m.group("patch")), pre_key)


def is_stable(tag: str) -> bool:
    m = _SEMVER.fullmatch(tag)
    return bool(m) and m.group("pre") is None


def latest_release(tags: list[str]) -> str | None:
    """The highest *stable* semver tag (not the newest by date, which picks a back-ported patch)."""
    stable = [t for t in tags if is_stable(t)]
    return max(stable, key=semver_key) if stable else None


def is_whole_commit(text: str) -> bool:
    """Whether `text` is a commit's whole id (40 hex, or 64 in a SHA-256 repository), not a prefix."""
    return bool(_WHOLE.fullmatch(text))


def refuse_prefix(text: str) -> None:
    """A RefError for a commit named by a prefix, in a run that holds the cache key: a prefix is
    resolved where refbench looks it up (its cached clone, the module cache), and a restored cache
    may hold another commit of that prefix, which would then be built and sealed (issue 35's second
    reading). scripts/key-gate.sh prints the whole id of each commit it checked."""
    raise RefError(f"{text!r}: a run holding the cache key (REFBENCH_CACHE_KEY_FILE) takes a commit as its whole "
                   "40-hex id, not a prefix (a cached clone may hold another commit that starts the same; "
                   "scripts/key-gate.sh prints the whole id)")


def plain_tags(repo: git.Repo) -> list[str]:
    """The clone's tags that are refs of their own. A symbolic tag is never a release: `fetch --prune`
    does not prune one, so one planted in a cached clone (`v99.0.0 -> refs/refbench/evil`) would
    otherwise be what latest_release picks (sources.Clone's sweep deletes them too)."""
    return [name for name, symref in symbolic_listing(repo, "%(refname:strip=2)", "refs/tags") if not symref]


def symbolic_listing(repo: git.Repo, name_format: str, *patterns: str) -> list[tuple[str, str]]:
    """(name, what it points to, or "" for a plain ref) of every ref matching `patterns` (all without):
    the one way refbench tells a symbolic ref, which `fetch --prune` never prunes, from a plain one."""
    listing = repo.git.for_each_ref(f"--format={name_format}%00%(symref)", *patterns)
    return [(name, symref) for name, symref in (ln.split("\0") for ln in _lines(listing))]


def containing(repo: git.Repo, sha: str, *patterns: str) -> str | None:
    """The first plain ref matching `patterns` that reaches `sha` (`for-each-ref --contains`), or
    None. A symbolic one is no ref of the origin's: `refs/tags/v99.0.0 -> <an unmerged branch>`
    would contain every commit of that branch (review35f F1)."""
    listing = repo.git.for_each_ref("--format=%(refname)%00%(symref)", f"--contains={sha}", *patterns)
    return next((name for name, symref in (ln.split("\0") for ln in _lines(listing)) if not symref), None)


def _lines(listing: str) -> list[str]:
    """git's listing, one ref a line: split at newlines only. str.splitlines also breaks at U+2028,
    U+0085 and U+001C to U+001E, which a ref name may hold: a planted tag named with U+2028 crashed
    every run's sweep (review35f F6)."""
    return [ln for ln in listing.split("\n") if ln]


def head_branch(ls_remote_symref: str) -> str | None:
    """The branch an origin's HEAD names, from `git ls-remote --symref ORIGIN HEAD`'s output."""
    m = re.search(r"ref: refs/heads/(\S+)\s+HEAD", ls_remote_symref)
    return m.group(1) if m else None


def resolve(repo: git.Repo, text: str, remote: str = "origin", head: str | None = None,
            whole: bool = False) -> ResolvedRef:
    """Resolve against a clone whose tags and branches have been fetched (see sources.Clone.fetch).
    `head`: the ref HEAD resolves to where refbench fetched it itself (a checkout's HEAD, which
    may be detached), else the origin's default branch; never the clone's own HEAD file, which a
    restored cache may have written (issue 35's second reading). `whole`: a commit must be named
    by its whole id (refuse_prefix), as in a run that holds the cache key."""
    return resolve_reaching(repo, text, remote, head, whole)[0]


def resolve_reaching(repo: git.Repo, text: str, remote: str = "origin", head: str | None = None,
                     whole: bool = False) -> tuple[ResolvedRef, str | None]:
    """resolve, and for a commit named by a prefix the ref that reaches it (REACHING_REFS), else
    None: the caller re-hashes the line up to that ref (sources.Clone) without asking git the same
    `for-each-ref --contains` a second time."""
    ref = classify(text)
    if ref.kind == "pr":
        name = f"refs/refbench/pull/{ref.pr}"
        sha = commit_of(repo, name)
        if sha is None:
            raise RefError(f"PR #{ref.pr} not found in {repo_url(repo, remote)} (no refs/pull/{ref.pr}/head)")
        return ResolvedRef(text, "pr", sha, f"PR #{ref.pr}"), None
    if ref.kind == "latest_release":
        tag = latest_release(plain_tags(repo))
        if tag is None:
            raise RefError(f"latest_release: no stable semver tag in {repo_url(repo, remote)}")
        sha = commit_of(repo, f"refs/tags/{tag}")
        if sha is None:  # its object is not what its id says (review35h H1): no commit, never a None one
            raise RefError(f"latest_release: the tag {tag} names no commit in {repo_url(repo, remote)} "
                           "(its object does not hash to its id, or is missing)")
        return ResolvedRef(text, "latest_release", sha, f"latest_release ({tag})"), None
    if ref.kind == "head":
        sha = commit_of(repo, head) if head else commit_of(repo, f"refs/remotes/{remote}/HEAD")
        if sha is None:
            raise RefError(f"HEAD: the origin has no default branch")
        return ResolvedRef(text, "head", sha, f"HEAD@{sha[:7]}"), None
    # a whole id is the commit first, as git itself takes 40 hex: scripts/key-gate.sh prints the
    # whole id of the commit it checked, and a branch or tag named by those 40 hex digits must not
    # be built in its place (review35c); key-gate.sh looks a whole id up in the same order
    if is_whole_commit(text):
        sha = commit_of(repo, text)
        if sha:
            return ResolvedRef(text, "commit", sha, sha[:10]), None
    # tag, branch or commit: try in that order whatever the first guess was
    sha = commit_of(repo, f"refs/tags/{text}")
    if sha:
        return ResolvedRef(text, "tag", sha, text), None
    sha = commit_of(repo, f"refs/remotes/{remote}/{text}")
    if sha:
        return ResolvedRef(text, "branch", sha, f"{text}@{sha[:7]}"), None
    if _SHA.fullmatch(text):
        if whole and not is_whole_commit(text):
            refuse_prefix(text)
        sha = commit_of(repo, text)
        if sha:
            by = None if is_whole_commit(text) else _reaching(repo, sha)
            if not is_whole_commit(text) and by is None:
                raise RefError(f"{text!r} names {sha[:12]}, which no branch, tag or fetched PR of {repo_url(repo, remote)} "
                               "reaches: give the commit's whole 40-hex id (a cached clone may hold another commit "
                               "of that prefix, which the origin never had)")
            return ResolvedRef(text, "commit", sha, sha[:10]), by
    raise RefError(f"ref not found: {text!r} is not a tag, branch, PR or commit of {repo_url(repo, remote)}")


#: where a commit named by a prefix must be reachable from: the refs a fetch brings from the origin
#: (pruned to its own) and the PR and checkout heads this run fetched by name (the sweep before
#: every fetch leaves nothing under refs/refbench/: sources.KEPT_REFS)
REACHING_REFS = ("refs/remotes/origin/", "refs/tags/", "refs/refbench/")


def _reaching(repo: git.Repo, sha: str) -> str | None:
    """The first ref the origin gave that reaches `sha`, or None. A commit planted in a restored
    clone is reached by none once the fetch has pruned the clone's refs to the origin's, so a
    prefix, which the clone alone answers, never names it, keyed run or not (review35c's LOW: a
    machine's own key seals what later runs on that machine trust). `for-each-ref --contains`: only
    for a prefix; git walks unverified parents there, so the caller re-hashes the line to the ref."""
    try:
        return containing(repo, sha, *REACHING_REFS)
    except git.GitCommandError:
        return None


def commit_of(repo: git.Repo, name: str) -> str | None:
    """The commit `name` (a ref or an id) names in `repo`, or None: `rev-parse --verify NAME^{commit}`,
    which re-hashes the object it ends at (a commit replaced under its id gives None)."""
    try:
        return repo.git.rev_parse("--verify", "--quiet", "--end-of-options", f"{name}^{{commit}}")
    except git.GitCommandError:
        return None


def repo_url(repo: git.Repo, remote: str = "origin") -> str:
    try:
        return repo.remote(remote).url
    except ValueError:
        return repo.git_dir
