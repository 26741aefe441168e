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
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import git

from . import paths, refs, results, sources, toolchain as tc, tools, trust
from .config import TargetSpec
from .errors import BuildError, RefbenchError, RefError
from .sources import (  # noqa: F401  (the names other modules import from here)
    ALLOWED_INFO, CLONE_ENTRIES, KEPT_REFS, SAFE_GIT, Checkout, clone_config, clone_faults, clone_git_env,
    go_checkout, origin_slug, own_clone, safe_git_args)
from .sources import absolute as _absolute, git_msg as _git_msg

log = logging.getLogger(__name__)
SOURCES = ("git", "module")
REPRODUCIBLE_GOFLAGS = "-trimpath -buildvcs=false"
BUILDVCS_SINCE = (1, 18)  # Go 1.17 refuses all of GOFLAGS over an unknown -buildvcs (and stamps no VCS)
SEAL_PURPOSE = "refbench build record v1"
#: what go looks for in every parent of a build's directory when the commit has no go.mod
GO_SEARCHED_FILES = ("go.mod", "go.work")
# what `go mod verify` says of a module cache's own files (a changed directory or zip, a .ziphash
# missing or unreadable, a zip that does not open): no commit's fault, so no commit is called broken
# for it and bisect skips none (review35i I7)
CACHE_FAULTS = ("modified", "ziphash", "not a valid zip file", "zip: ")
#: the fields of build.json the seal covers: what the cache is keyed by, and the binary's hash
SEALED_FIELDS = ("target", "sha", "tree", "source", "toolchain", "build", "goflags", "binary_sha256")
#: sealed as well for the module source: which module and version the binary is. Its commit is only
#: what `go list` said, so a sealed build of one version is never taken for another's
MODULE_FIELDS = ("module", "version")


def sealed_keys(source: str) -> tuple[str, ...]:
    """The fields of build.json the seal covers for a build from `source`."""
    return SEALED_FIELDS + (MODULE_FIELDS if source == "module" else ())


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
    after refbench's reproducible ones (the command line reads them: MachineSettings.goflags)."""

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
        """The refs of one comparison, each with its Go: `go` holds one --go value for all of
        them or one per ref in their order (none: the builder's choice)."""
        return [self.resolve(t, g) for t, g in zip(texts, tc.per_build(go, len(texts), self.go))]

    def _resolve_commit(self, text: str) -> refs.ResolvedRef:
        if self.source == "module":
            resolved, gomod = self.module.resolve(refs.classify(text))
            self.goes.know(resolved.version, gomod)  # the proxy served it with the version
            return resolved
        return self.sources.resolve(text)

    # ---- module source: built in a module of its own ---------------------------------------------
    def _scratch_module(self, where: Path, toolchain: str | None = None) -> Path:
        where.mkdir(parents=True, exist_ok=True)
        if not (where / "go.mod").exists():
            self._go(["go", "mod", "init", "refbench.local/build"], where, where / "init.log", toolchain=toolchain)
        return where

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
    def _go_env(self, toolchain: str | None = None, checked: bool = False) -> dict:
        """Reproducible builds: no VCS stamp and no checkout paths in the binary, so two commits
        with the same Go code (a README change) give byte-identical binaries, answered without
        measuring (pipeline.identical_contenders). The user's own GOFLAGS come after ours.
        GOTOOLCHAIN: `toolchain` (fetched by the go command from the module proxy), or this
        machine's Go with no switching, so the Go recorded is the Go that built. The environment
        is tools.child_env's: an allow-list, with no cache directory on PATH (where go would look
        for a `go1.26.8` before fetching one). `checked`: the environment a go command runs under,
        so a toolchain it switches to is first checked in the module cache (toolchain.verify_cached).
        The Go caches are refbench's own (toolchain.own_caches)."""
        env = tc.go_env()  # allow-listed, refbench's own Go caches, no go settings file
        env["GOFLAGS"] = " ".join(filter(None, (reproducible_goflags(toolchain), self.goflags)))
        env["GOTOOLCHAIN"] = tc.gotoolchain(toolchain, self.goes.local()) if toolchain else tc.LOCAL
        env["GOWORK"] = "off"  # go looks for go.work in every parent: a cache may plant one with a `replace`
        if checked:
            tc.drop_vcs_work(env)
        if checked and env["GOTOOLCHAIN"] != tc.LOCAL:
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
        resolved = self.goes.settle(resolved)
        d = self.build_dir(resolved.sha, resolved.toolchain)
        meta, binary = d / "build.json", d / self.target.binary
        info = read_record(meta)
        if info is None or not _regular(binary):  # a link or a FIFO is no build: hashing a FIFO would block
            return None
        if "tree" not in info:
            return None  # not a record, or one of a refbench from before trees were sealed: rebuild
        fields = {k: info.get(k) for k in sealed_keys(self.source)}
        # the commit names its tree: the sealed one stands (an artifact's builder may hold no clone)
        if not fields.get("binary_sha256") or self._sealed_fields(resolved, fields["binary_sha256"],
                                                                  tree=fields["tree"]) != fields:
            return None  # no hash, or another commit, Go, command or GOFLAGS: rebuild
        why = trust.gate(SEAL_PURPOSE, fields, info, "binary_sha256", lambda: file_sha256(binary))
        if why:
            log.warning("%s: %s (see refbench/trust.py): rebuilding", binary, why)
            return None
        if not os.access(binary, os.X_OK):
            binary.chmod(binary.stat().st_mode | 0o111)
        return binary

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
        """Whether a build's binary is a function of the commit's tree alone: the build command is
        `go build` under the reproducible GOFLAGS (no VCS stamp, no checkout paths), with no
        -toolexec and no -buildvcs turned back on by the user's GOFLAGS or the command. Then two
        commits with one tree (a rebase, a merge that changes nothing, a reworded message) build
        the same binary, and one build serves both. Any other build command may read the commit
        itself (`git rev-parse HEAD` in a Makefile), so its builds stay keyed by commit alone."""
        argv = list(self.target.build)
        if len(argv) < 2 or Path(argv[0]).name != "go" or argv[1] != "build":
            return False
        stamp = False
        for flag in self._go_env(toolchain)["GOFLAGS"].split() + argv[2:]:
            name, _, value = flag.lstrip("-").partition("=")
            if name == "toolexec":
                return False
            if name == "buildvcs":
                stamp = value != "false"  # a bare -buildvcs is true; auto stamps inside a checkout
        return not stamp

    def same_tree_build(self, resolved: refs.ResolvedRef) -> tuple[Path, dict, str] | None:
        """A cached build of another commit with this ref's tree, made the same way (target, Go,
        build command, GOFLAGS) and sealed under this machine's key: its binary, its sealed fields
        and the seal. None when the build is not determined by the tree (tree_determined) or there
        is none. Its binary is not trusted here: the caller copies it and passes the copy through
        trust.gate."""
        if self.source != "git" or not self.tree_determined(resolved.toolchain):
            return None
        want = self._sealed_fields(resolved, None)
        if not want["tree"]:
            return None
        ignore = {"sha": None, "binary_sha256": None}
        for meta in sorted(self.root.glob("*/build.json")):
            info = read_record(meta)
            if info is None:
                continue
            fields = {k: info.get(k) for k in SEALED_FIELDS}
            if fields["sha"] == resolved.sha or not fields["binary_sha256"] or {**fields, **ignore} != {**want, **ignore}:
                continue
            if trust.sealed(SEAL_PURPOSE, fields, info.get("seal")) and _regular(meta.parent / self.target.binary):
                return meta.parent / self.target.binary, fields, info["seal"]
        return None

    def build_record(self, resolved: refs.ResolvedRef, digest: str, **extra) -> dict:
        """build.json of `resolved` built into a binary of SHA-256 `digest`: the fields the cache is
        keyed by and the hash, sealed under this machine's (or job's) key, and `extra`."""
        sealed = self._sealed_fields(resolved, digest)
        return {**sealed, **extra, "seal": trust.seal(SEAL_PURPOSE, sealed), "key_id": trust.key_id()}

    def _sealed_fields(self, resolved: refs.ResolvedRef, digest: str | None, **tree) -> dict:
        """What a build record must say for `resolved` as this builder builds it: the fields the seal
        covers (sealed_keys). `tree=`: the commit's tree as a record already says it, else asked."""
        fields = {"target": self.target.name, "sha": resolved.sha,
                  "tree": tree["tree"] if "tree" in tree else self.tree(resolved), "source": self.source,
                  "toolchain": resolved.toolchain, "build": list(self.target.build),
                  "goflags": self._go_env(resolved.toolchain)["GOFLAGS"], "binary_sha256": digest}
        if self.source == "module":
            fields.update(module=self.target.module, version=resolved.version)
        return fields

    def export(self, build: "BuiltRef", out_dir: Path) -> Path:
        """Copy a build (binary, build.json, and build.log when this run wrote it) into out_dir with
        the cache's own layout, so `--builds-dir out_dir` reuses it (verified by its hash). Returns
        the copied binary. out_dir is made to be shared (a CI artifact), so only what was verified
        goes there, each a regular file opened with O_NOFOLLOW: a cached build's build.log is
        sealed by nothing, and a restored cache could make it a link to any file the job can read
        (a checkout's token, a key file; review35e)."""
        src = build.binary.parent
        dest = Path(out_dir).resolve() / self.target.name / src.name
        if dest == src:
            return build.binary
        out = Path(out_dir).resolve()
        tmp = dest.with_name(dest.name + ".tmp")
        paths.remove_tree(tmp, out, ignore_errors=True)
        paths.make_dirs(tmp, out)
        for name in (self.target.binary, "build.json") + (("build.log",) if build.built_now else ()):
            if os.path.lexists(src / name):
                copy_regular(src / name, tmp / name)
        paths.remove_tree(dest, out, ignore_errors=True)
        tmp.rename(dest)
        return dest / self.target.binary

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
            reused = self._reuse_same_tree(resolved, d)
            if reused:
                log.info("%s: the tree of %s, built before: %s", label, reused[1][:12], reused[0])
                return BuiltRef(self.target.name, resolved, label, reused[0], self.source, resolved.toolchain,
                                False, 0.0, file_sha256(reused[0]))
            go = self.goes.recorded(resolved.toolchain)
            paths.make_dirs(d, self.builds_dir)
            tmp_bin = d / (self.target.binary + ".tmp")
            log_path = d / "build.log"
            if self.source == "git":
                self._build_git(resolved, tmp_bin, log_path)
            else:
                self._build_module(resolved, tmp_bin, log_path, d)
            binary = d / self.target.binary
            tmp_bin.rename(binary)
            seconds = time.monotonic() - t0
            digest = file_sha256(binary)
            paths.replace_file(d / "build.json", json.dumps(self.build_record(
                resolved, digest, ref=resolved.text, version=resolved.version, seconds=round(seconds, 2),
                built_at=time.strftime("%Y-%m-%dT%H:%M:%S%z")), indent=2), within=self.builds_dir)
        return BuiltRef(self.target.name, resolved, label, binary, self.source, go, True, seconds, digest)

    def _reuse_same_tree(self, resolved: refs.ResolvedRef, d: Path) -> tuple[Path, str] | None:
        """Put the binary of a sealed build of the same tree (same_tree_build) in `d` as this
        commit's, with a record of its own: (the binary, the commit it was built from), or None
        (nothing to reuse, or a copy whose hash is not the sealed one: then `d` is left empty)."""
        twin = self.same_tree_build(resolved)
        if not twin:
            return None
        src, fields, seal = twin
        paths.make_dirs(d, self.builds_dir)
        tmp_bin = d / (self.target.binary + ".tmp")
        try:
            shutil.copyfile(src, tmp_bin)
        except OSError:
            paths.remove_tree(d, self.builds_dir, ignore_errors=True)
            return None
        why = trust.gate(SEAL_PURPOSE, fields, {"seal": seal}, "binary_sha256", lambda: file_sha256(tmp_bin))
        if why:  # the copy, not the file it was copied from: that one may change in between
            log.warning("%s: %s: building %s instead", src, why, resolved.short)
            paths.remove_tree(d, self.builds_dir, ignore_errors=True)
            return None
        digest = fields["binary_sha256"]
        tmp_bin.chmod(0o755)
        binary = d / self.target.binary
        tmp_bin.rename(binary)
        paths.replace_file(d / "build.json", json.dumps(self.build_record(
            resolved, digest, ref=resolved.text, version=resolved.version, seconds=0.0, same_tree_as=fields["sha"],
            built_at=time.strftime("%Y-%m-%dT%H:%M:%S%z")), indent=2), within=self.builds_dir)
        return binary, fields["sha"]

    def _build_git(self, resolved: refs.ResolvedRef, out: Path, log_path: Path) -> None:
        """Check the commit out of its verified repository (verified()), never the cached clone."""
        repo = self.verified(resolved.sha)
        wt = Path(tempfile.mkdtemp(prefix=f"wt-{resolved.sha[:10]}-", dir=self.root))
        try:
            repo.git.worktree("add", "--detach", "--force", str(wt), resolved.sha)
            self._no_module_above(wt, resolved)
            self._verify_modules(wt, log_path, resolved)
            argv = [a.replace("{out}", str(out)) for a in self.target.build]
            self._go(argv, wt, log_path, what=f"build of {resolved.display} ({resolved.short})", sha=resolved.sha,
                     ref=resolved)
            self._verify_compiled(out, resolved)
        finally:
            with contextlib.suppress(git.GitCommandError):
                repo.git.worktree("remove", "--force", str(wt))
            paths.remove_tree(wt, self.builds_dir, ignore_errors=True)
            with contextlib.suppress(git.GitCommandError):
                repo.git.worktree("prune")

    def _no_module_above(self, wt: Path, resolved: refs.ResolvedRef) -> None:
        """Leave go no go.mod or go.work above the worktree `wt` to find. A commit without a go.mod
        of its own (from before modules) makes go look in every parent: the worktree is inside the
        builds cache, where a restored entry may hold <target>/go.mod whose `replace` lines compile
        planted source into a binary refbench then seals (review35e). Such files inside the cache
        are removed (refbench puts none there); a go.mod above the cache is the user's, so the
        build fails naming it."""
        if os.path.lexists(wt / "go.mod"):
            return  # go stops at the commit's own go.mod
        cache = Path(os.path.abspath(self.builds_dir))
        for parent in Path(os.path.abspath(wt)).parents:
            inside = parent == cache or cache in parent.parents
            for name in GO_SEARCHED_FILES if inside else ("go.mod",):  # GOWORK=off: a go.work outside is unused
                found = parent / name
                if not os.path.lexists(found):
                    continue
                if not inside:
                    raise BuildError(f"{resolved.display} ({resolved.short}) has no go.mod, and go would build it as "
                                     f"part of the module of {found}, above the builds directory {cache}; move "
                                     f"the builds directory (-l/--builds-dir) out of that module", sha=None)
                log.warning("%s: a %s in the builds cache, which go would use for %s (no go.mod of its own): "
                            "removed (see refbench/trust.py)", found, name, resolved.short)
                paths.remove_tree(found, self.builds_dir)

    def _build_module(self, resolved: refs.ResolvedRef, out: Path, log_path: Path, d: Path) -> None:
        # made by the Go that builds, so its go line asks for no newer one
        mod = self._scratch_module(d / "mod", resolved.toolchain)
        what = f"module build of {self.target.package}@{resolved.version}"
        try:
            self._go(["go", "get", f"{self.target.package}@{resolved.version}"], mod, log_path, what=what,
                     sha=resolved.sha, ref=resolved)
            self._verify_modules(mod, log_path, resolved)
            self._go(["go", "build", "-o", str(out), self.target.package], mod, log_path, what=what, sha=resolved.sha,
                     ref=resolved)
            self._verify_compiled(out, resolved)
        finally:
            paths.remove_tree(mod, self.builds_dir, ignore_errors=True)

    def _verify_compiled(self, out: Path, resolved: refs.ResolvedRef) -> None:
        """What the build compiled from the module cache is what its sums say (toolchain.
        verify_compiled), before anything seals or runs the binary: `go mod verify` covers only the
        root module's requirements, and a build command may compile another module."""
        if out.is_file():  # a build that made nothing fails on that, after this
            n = tc.verify_compiled(out, self._go_env(resolved.toolchain), _absolute(["go"])[0])
            log.debug("%s: %d modules the binary was built from match their sums", resolved.short, n)

    def _verify_modules(self, root: Path, log_path: Path, resolved: refs.ResolvedRef) -> None:
        """`go mod verify` in the module at `root`: every module its go.sum lists that the module
        cache holds must still be what was downloaded. The module cache may come from a cache
        restore (refbench.trust), and a changed module would be built into the binary. A module
        without go.sum has nothing downloaded to check. A changed module fails the build as no
        commit's fault (BuildError.sha None); any other failure is the commit's."""
        if not (root / "go.sum").is_file():
            return
        try:
            self._go(["go", "mod", "verify"], root, log_path, what=f"go mod verify of {resolved.display} "
                     f"({resolved.short})", sha=resolved.sha, ref=resolved)
        except BuildError as e:
            if any(w in (e.detail or "") for w in CACHE_FAULTS):
                raise BuildError(f"the Go module cache holds a module that is not what its checksum says (go mod "
                                 f"verify, building {resolved.display} ({resolved.short})): tampered with or "
                                 f"corrupt; `go clean -modcache` empties it; log: {log_path}", detail=e.detail,
                                 sha=None) from None
            raise

    def _go(self, argv: list[str], cwd: Path, log_path: Path, what: str = "build", sha: str | None = None,
            ref: refs.ResolvedRef | None = None, toolchain: str | None = None) -> None:
        """Run a go command of a build with the ref's Go (or `toolchain`); a failure names the Go
        it used and the one go.mod asks for."""
        toolchain = ref.toolchain if ref else toolchain
        log.debug("$ %s  (in %s, Go %s)", " ".join(argv), cwd, toolchain or "local")
        with open(log_path, "a") as fh:
            fh.write(f"$ {' '.join(argv)}\n")
            fh.flush()
            try:
                rc = subprocess.run(_absolute(argv), cwd=cwd, stdout=fh, stderr=subprocess.STDOUT,
                                    env=self._go_env(toolchain, checked=True)).returncode
            except FileNotFoundError:
                raise BuildError(f"{what} failed: {argv[0]} not found on PATH", sha=sha) from None
        if rc != 0:
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
            how = f" with {ref.toolchain} (exit {rc}; {self.goes.hint(ref)})" if ref else f" (exit {rc})"
            raise BuildError(f"{what} failed{how}; log: {log_path}", detail=tail, sha=sha)


def _regular(path: Path) -> bool:
    """Whether `path` is a regular file itself (not a link to one)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


#: a cached build.json, read through no link and no FIFO (paths.read_record: review35e)
read_record = paths.read_record


def copy_regular(src: Path, dest: Path) -> None:
    """Copy the regular file `src` to the new file `dest` (mode and times kept, as shutil.copy2),
    never through a link at either end: a link or anything but a regular file at `src` is a
    BuildError naming it."""
    try:
        fd = paths.open_regular(src)
    except OSError as e:
        raise BuildError(f"cannot export {src}: {e.strerror} (a link or special file in the builds cache is "
                         f"refused: a restored cache may have planted it; remove it)") from None
    with os.fdopen(fd, "rb") as fin:
        st = os.fstat(fd)
        out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                      stat.S_IMODE(st.st_mode))
        with os.fdopen(out, "wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
    os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)


def unique_labels(resolved: list[refs.ResolvedRef]) -> list[str]:
    """Display names, made unique: builds of one ref with different Go say which
    ('v1.0.0 (go1.25.9)'); an A/A comparison of one ref with one Go gets '#2'."""
    gos: dict[str, set] = {}
    for r in resolved:
        gos.setdefault(r.display, set()).add(r.toolchain)
    labels, seen = [], {}
    for r in resolved:
        base = f"{r.display} ({r.toolchain})" if len(gos[r.display]) > 1 and r.toolchain else r.display
        seen[base] = seen.get(base, 0) + 1
        labels.append(base if seen[base] == 1 else f"{base} #{seen[base]}")
    return labels
