"""Build refs of a target with `go build`, caching binaries by commit: the build cache's layout.

Layout under the builds directory (see paths.default_builds_dir()):

    builds/<target>/clones/<origin-slug>/   one bare clone per origin, fetched, never re-cloned
    builds/<target>/<sha>/<binary>          the binary built from that commit (git source), or
                                            copied from a build of another commit with the same tree
    builds/<target>/<sha>.module/<binary>   the same commit built through the Go module proxy
    builds/<target>/<sha>.go1.24.4/         built with a Go other than this machine's (GOTOOLCHAIN)
    .../build.log, build.json               how it was built; build.json is written last

Each build uses the Go its go.mod asks for unless --go says otherwise (refbench/toolchain.py); the
Go is settled when the ref is resolved (ResolvedRef.toolchain), is part of the cache key, and
names the directory when it is not this machine's own, so two builds of one commit with two Gos
are kept apart while caches made with the machine's Go keep their place.

A cache vouches for nothing by itself (the threat model is refbench.trust's: on some CI set-ups a
pull request's code can write a cache that a trusted run restores). So:

- build.json records the binary's SHA-256 and a seal, an HMAC of the record under a key that is in
  no cache (trust.seal); a cached binary is used only when its record's seal holds under this
  machine's (or job's) key and the binary still has the sealed hash. A record without a seal, with
  a seal of another key, or a binary of another hash is rebuilt. A binary shared as a CI artifact
  (`bench.py build --out DIR` then `--builds-dir DIR`) is verified the same way, under the key the
  jobs share, and gets its executable bit back: artifacts do not keep file modes. A commit whose
  tree a sealed record names (same target, Go, build command and GOFLAGS) gets a copy of that
  binary when the tree alone makes it (Builder.tree_determined), once the copy's hash is the
  sealed one, and a record of its own;
- the sources come from refbench.sources, which verifies them: nothing is built from the cached
  clone itself, only from a repository of the commit's objects with every id computed anew; a
  module version's commit is asked of the proxy, never a restored module cache, and a module
  build's record seals its module and version too (MODULE_FIELDS);
- which Go builds each ref is refbench.toolchain's (Chooser): this module chooses none;
- builds get an allow-listed environment with no cache directory on PATH (tools.child_env);
- `go mod verify` runs before every build, so a module cache restored with a changed module fails
  the build, naming it, instead of building it in.

Where each part lives: the records, their seals and the cache's checks, refbench.build_cache; the
go commands of a build, refbench.go_build. This module resolves refs, chooses the directory and
the Go of each build, and builds through them; it re-exports their names that other modules
import from here.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import git

from . import paths, refs, results, sources, toolchain as tc, trust
from .build_cache import (  # noqa: F401  (the names other modules import from here)
    MODULE_FIELDS, SEAL_PURPOSE, SEALED_FIELDS, BuildCache, copy_regular, read_record, sealed_keys)
from .config import TargetSpec
from .errors import BuildError, RefbenchError, RefError  # noqa: F401
from .go_build import CACHE_FAULTS, GO_SEARCHED_FILES, GoBuild  # noqa: F401
from .sources import (  # noqa: F401  (the names other modules import from here)
    ALLOWED_INFO, CLONE_ENTRIES, KEPT_REFS, SAFE_GIT, Checkout, clone_config, clone_faults, clone_git_env,
    go_checkout, origin_slug, own_clone, safe_git_args)
from .sources import git_msg as _git_msg

log = logging.getLogger(__name__)
SOURCES = ("git", "module")
REPRODUCIBLE_GOFLAGS = "-trimpath -buildvcs=false"
BUILDVCS_SINCE = (1, 18)  # Go 1.17 refuses all of GOFLAGS over an unknown -buildvcs (and stamps no VCS)


def reproducible_goflags(toolchain: str | None) -> str:
    """The flags that make a build reproducible under `toolchain` (None: this machine's Go):
    without -buildvcs before Go 1.18, which has no VCS stamp to turn off."""
    version = tc.parse_version(toolchain) if toolchain else None
    return "-trimpath" if version is not None and version.line < BUILDVCS_SINCE else REPRODUCIBLE_GOFLAGS


@dataclass(frozen=True)
class BuiltRef:
    target: str
    ref: refs.ResolvedRef
    label: str  # unique display name among the compared builds
    binary: Path
    source: str
    toolchain: str
    built_now: bool  # False: came from the cache
    build_seconds: float
    binary_sha256: str | None = None

    def record(self) -> results.Build:
        """The build as the results file holds it."""
        return results.Build(
            label=self.label, ref=self.ref.text, kind=self.ref.kind, sha=self.ref.sha, display=self.ref.display,
            version=self.ref.version, binary=str(self.binary), source=self.source, toolchain=self.toolchain,
            cached=not self.built_now, build_seconds=round(self.build_seconds, 3), binary_sha256=self.binary_sha256)


file_sha256 = paths.file_sha256
_locked = paths.locked  # one lock helper for builds, clones and fixtures


class Builder:
    """Resolves refs and builds them, for one target from one origin (git) or the module proxy.
    `go`: the Go every build uses unless resolve() is told otherwise (a --go value; default
    REFBENCH_GO, else mod: what each ref's go.mod asks for). `goflags`: the user's own GOFLAGS,
    after refbench's reproducible ones (the command line reads them: MachineSettings.goflags).
    Its go commands are `go_build`'s (refbench.go_build), its cache's records and their checks
    `build_cache`'s (refbench.build_cache); this class settles each ref and its Go, and builds."""

    def __init__(self, target: TargetSpec, builds_dir: Path, repo_url: str | None = None,
                 source: str = "git", offline: bool = False, pr_remote: str | None = None,
                 checkout: bool = False, go: str | None = None, goflags: str = ""):
        if source not in SOURCES:
            raise BuildError(f"unknown source {source!r} (expected git or module)")
        if source == "module" and not (target.module and target.package):
            raise BuildError(f"target {target.name!r} declares no Go module/package; "
                             "--source module needs both in scenarios.toml")
        self.target = target
        # resolved, but never through a link a restore planted at the cache root or its builds/
        self.builds_dir = paths.make_cache_dir(paths.settled_cache_dir(builds_dir))  # marked: `clean` may remove it
        self.repo_url = repo_url or target.repo
        if "://" not in self.repo_url and os.path.exists(os.path.expanduser(self.repo_url)):
            self.repo_url = os.path.abspath(os.path.expanduser(self.repo_url))
        self.source = source
        # what refbench writes or removes below here goes through no link (paths.remove_tree, ...)
        self.root = paths.make_dirs(self.builds_dir / target.name, self.builds_dir)
        # where the sources come from and are verified: git's whole part (refbench.sources)
        self.sources = sources.Clone(self.root, self.repo_url, offline, pr_remote, checkout)
        # or from the Go module proxy (--source module): refbench.sources' too
        self.module = sources.ModuleSource(target.module, offline, self._go_env) if source == "module" else None
        self.go = tc.parse_choice(go) if go else tc.MOD  # REFBENCH_GO comes as the request's go
        self.goflags = goflags  # the user's GOFLAGS, read at the command line (MachineSettings.goflags)
        # which Go builds each ref: refbench.toolchain's to choose; this class builds with it
        self.goes = tc.Chooser(self.go, self.builds_dir, self._go_env, self._read_gomod,
                               lambda r: r.version if self.source == "module" else r.sha)
        self._trees: dict[str, str | None] = {}  # by commit (git)
        # how a build runs go, and the cache's sealed records: each given what this builder alone knows
        self.go_build = GoBuild(target=target, root=self.root, builds_dir=self.builds_dir, env=self._go_env,
                                hint=self.goes.hint)
        self.build_cache = BuildCache(target=target, source=source, root=self.root, builds_dir=self.builds_dir,
                                      goflags=lambda toolchain: self._go_env(toolchain)["GOFLAGS"], tree=self.tree)
        trust.cache_key()  # now: a key given in the environment is refused before any git or go runs

    # ---- git source: refbench.sources' -------------------------------------------------------
    @property
    def clone_dir(self) -> Path:
        return self.sources.clone_dir

    def repo(self) -> git.Repo:
        """The cached clone, opened as refbench's own (sources.Clone.repo)."""
        return self.sources.repo()

    def verified(self, sha: str) -> git.Repo:
        """Commit `sha`'s objects, each id computed anew (sources.Clone.verified)."""
        return self.sources.verified(sha)

    def fetch(self) -> None:
        self.sources.fetch()

    def commits_between(self, good: str, bad: str) -> list[tuple[str, str]]:
        """(sha, subject) of the commits after GOOD up to and including BAD, oldest first: what
        bisect searches, each commit checked against its id (sources.Clone.commits_between; the
        MockBuilder makes a line of its own)."""
        return self.sources.commits_between(good, bad)

    def resolve(self, text: str, go: str | None = None) -> refs.ResolvedRef:
        """The commit `text` names, with the Go that builds it (`go`: a --go value, else the
        builder's)."""
        return self.goes.settle(self._resolve_commit(text), go)

    def resolve_all(self, texts: tuple[str, ...] | list[str], go: tuple[str, ...] = ()) -> list[refs.ResolvedRef]:
        """The refs of one run, each with its Go: `go` holds one --go value for all of
        them or one per ref in their order (none: the builder's choice)."""
        return [self.resolve(t, g) for t, g in zip(texts, tc.per_build(go, len(texts), self.go))]

    def _resolve_commit(self, text: str) -> refs.ResolvedRef:
        if self.source == "module":
            resolved, gomod = self.module.resolve(refs.classify(text))
            self.goes.know(resolved.version, gomod)  # the proxy served it with the version
            return resolved
        return self.sources.resolve(text)

    # ---- what each ref's go.mod asks for (toolchain.Chooser's question) ---------------------------
    def _read_gomod(self, resolved: refs.ResolvedRef) -> tc.GoMod | None:
        """What the ref's go.mod asks for (None without one), for toolchain.Chooser: the top-level
        go.mod of the verified commit (even when the build command runs in a sub-directory), or
        the module's at its version as the proxy serves it."""
        if self.source == "module":
            return self.module.gomod(resolved.text, resolved.version)
        try:
            text = self.verified(resolved.sha).git.show(f"{resolved.sha}:go.mod")
        except git.GitCommandError as e:
            msg = _git_msg(e)
            if "does not exist" in msg or "exists on disk, but not in" in msg:
                return None  # a commit from before modules: nothing asked
            raise BuildError(f"cannot read go.mod of {resolved.display} ({resolved.short}): {msg}") from None
        return tc.parse_gomod(text)

    # ---- building -------------------------------------------------------------------------
    def _go_env(self, toolchain: str | None = None, verified: bool = False) -> dict:
        """Reproducible builds: no VCS stamp and no checkout paths in the binary, so two commits
        with the same Go code (a README change) give byte-identical binaries, answered without
        measuring (pipeline.identical_contenders). The user's own GOFLAGS come after ours.
        GOTOOLCHAIN: `toolchain` (fetched by the go command from the module proxy), or this
        machine's Go with no switching, so the Go recorded is the Go that built. The environment
        is tools.child_env's: an allow-list, with no cache directory on PATH (where go would look
        for a `go1.26.8` before fetching one). `verified`: the environment a go command runs under,
        so a toolchain it switches to is first verified in the module cache (toolchain.verify_cached).
        The Go caches are refbench's own (toolchain.own_caches)."""
        env = tc.go_env()  # allow-listed, refbench's own Go caches, no go settings file
        env["GOFLAGS"] = " ".join(filter(None, (reproducible_goflags(toolchain), self.goflags)))
        env["GOTOOLCHAIN"] = tc.gotoolchain(toolchain, self.goes.local()) if toolchain else tc.LOCAL
        env["GOWORK"] = "off"  # go looks for go.work in every parent: a cache may plant one with a `replace`
        if verified:
            tc.drop_vcs_work(env)
        if verified and env["GOTOOLCHAIN"] != tc.LOCAL:
            tc.verify_cached(env["GOTOOLCHAIN"], env)
        return env

    def toolchain(self, resolved: refs.ResolvedRef | None = None) -> str:
        """The Go that builds `resolved`; without a ref, this machine's (toolchain.Chooser.of)."""
        return self.goes.of(resolved)

    def build_dir(self, sha: str, toolchain: str | None = None) -> Path:
        name = sha if self.source == "git" else f"{sha}.module"
        if toolchain and toolchain != self.goes.local():
            name += f".{toolchain}"
        return self.root / name

    def cached(self, resolved: refs.ResolvedRef) -> Path | None:
        """The binary of a sealed build of `resolved` in its directory, or None (BuildCache.cached)."""
        resolved = self.goes.settle(resolved)
        return self.build_cache.cached(resolved, self.build_dir(resolved.sha, resolved.toolchain))

    def tree(self, resolved: refs.ResolvedRef) -> str | None:
        """The git tree of the ref's commit (git source; None for the module source or a commit the
        clone does not hold), asked once per commit."""
        if self.source != "git":
            return None
        if resolved.sha not in self._trees:
            try:
                self._trees[resolved.sha] = self.verified(resolved.sha).git.rev_parse(
                    "--verify", "--quiet", f"{resolved.sha}^{{tree}}") or None
            except (git.GitCommandError, RefbenchError):
                self._trees[resolved.sha] = None
        return self._trees[resolved.sha]

    def tree_determined(self, toolchain: str | None) -> bool:
        """Whether a build's binary is a function of the commit's tree alone (BuildCache.tree_determined)."""
        return self.build_cache.tree_determined(toolchain)

    def same_tree_build(self, resolved: refs.ResolvedRef) -> tuple[Path, dict, str] | None:
        """A sealed build of another commit with this ref's tree (BuildCache.same_tree_build)."""
        return self.build_cache.same_tree_build(resolved)

    def build_record(self, resolved: refs.ResolvedRef, digest: str, **extra) -> dict:
        """build.json of `resolved` built into a binary of SHA-256 `digest`, sealed (BuildCache.record)."""
        return self.build_cache.record(resolved, digest, **extra)

    def export(self, build: "BuiltRef", out_dir: Path) -> Path:
        """Copy a build into out_dir with the cache's own layout, to be shared (BuildCache.export)."""
        return self.build_cache.export(build.binary, build.built_now, out_dir)

    def build(self, resolved: refs.ResolvedRef, label: str) -> BuiltRef:
        resolved = self.goes.settle(resolved)
        d = self.build_dir(resolved.sha, resolved.toolchain)
        with _locked(d.with_name(d.name + ".lock"), within=self.builds_dir):
            binary = self.cached(resolved)
            if binary:
                log.info("%s: cached build %s", label, binary)
                return BuiltRef(self.target.name, resolved, label, binary, self.source, resolved.toolchain,
                                False, 0.0, file_sha256(binary))
            t0 = time.monotonic()
            paths.remove_tree(d, self.builds_dir)
            reused = self.build_cache.reuse_same_tree(resolved, d)
            if reused:
                log.info("%s: the tree of %s, built before: %s", label, reused[1][:12], reused[0])
                return BuiltRef(self.target.name, resolved, label, reused[0], self.source, resolved.toolchain,
                                False, 0.0, file_sha256(reused[0]))
            go = self.goes.recorded(resolved.toolchain)
            paths.make_dirs(d, self.builds_dir)
            tmp_bin = d / (self.target.binary + ".tmp")
            log_path = d / "build.log"
            if self.source == "git":
                self.go_build.build_commit(self.verified(resolved.sha), resolved, tmp_bin, log_path)
            else:
                self.go_build.build_module(resolved, tmp_bin, log_path, d)
            binary = d / self.target.binary
            tmp_bin.rename(binary)
            seconds = time.monotonic() - t0
            digest = file_sha256(binary)
            self.build_cache.write_record(d, resolved, digest, round(seconds, 2))
        return BuiltRef(self.target.name, resolved, label, binary, self.source, go, True, seconds, digest)


def unique_labels(resolved: list[refs.ResolvedRef]) -> list[str]:
    """Display names, made unique: builds of one ref with different Go say which
    ('v1.0.0 (go1.25.9)'); an A/A run of one ref with one Go gets '#2'."""
    gos: dict[str, set] = {}
    for r in resolved:
        gos.setdefault(r.display, set()).add(r.toolchain)
    labels, seen = [], {}
    for r in resolved:
        base = f"{r.display} ({r.toolchain})" if len(gos[r.display]) > 1 and r.toolchain else r.display
        seen[base] = seen.get(base, 0) + 1
        labels.append(base if seen[base] == 1 else f"{base} #{seen[base]}")
    return labels
