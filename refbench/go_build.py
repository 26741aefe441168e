"""How a builder runs go: a commit built in a worktree of its verified objects, or a module
version in a scratch module of its own, each behind the checks go itself offers (`go mod verify`
before, the compiled modules' sums after) and with no go.mod or go.work above the worktree for go
to find. Failures name the Go that built and the one go.mod asks for.

Which Go builds, and the environment every go command gets, are the Builder's (refbench.builds,
refbench.toolchain), passed in; where a build goes and whether a cached one serves is
refbench.build_cache's. The threat model is docs/threat-model.md's."""
from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import git

from . import paths, refs, toolchain as tc
from .config import TargetSpec
from .errors import BuildError
from .sources import absolute as _absolute

log = logging.getLogger(__name__)

#: what go looks for in every parent of a build's directory when the commit has no go.mod
GO_SEARCHED_FILES = ("go.mod", "go.work")
# what `go mod verify` says of a module cache's own files (a changed directory or zip, a .ziphash
# missing or unreadable, a zip that does not open): no commit's fault, so no commit is called broken
# for it and bisect skips none (review35i I7)
CACHE_FAULTS = ("modified", "ziphash", "not a valid zip file", "zip: ")


@dataclass(frozen=True)
class GoBuild:
    """The go commands of one builder's builds. `env`: the environment of a go command building with
    that Go (None: this machine's), checked (toolchain.verify_cached) when the flag is set: the
    Builder's _go_env. `hint`: what a failed build's message says about Go (toolchain.Chooser.hint)."""
    target: TargetSpec
    root: Path  # builds/<target>/: a commit's worktree is made here
    builds_dir: Path  # nothing is written or removed through a link below it
    env: Callable[[str | None, bool], dict]
    hint: Callable[[refs.ResolvedRef], str]

    def scratch_module(self, where: Path, toolchain: str | None = None) -> Path:
        """A module of refbench's own at `where` (`go mod init` once), into which a module build gets
        the version it builds."""
        where.mkdir(parents=True, exist_ok=True)
        if not (where / "go.mod").exists():
            self.go(["go", "mod", "init", "refbench.local/build"], where, where / "init.log", toolchain=toolchain)
        return where

    def build_commit(self, repo: git.Repo, resolved: refs.ResolvedRef, out: Path, log_path: Path) -> None:
        """Check the commit out of `repo`, its verified repository (sources.Clone.verified), never the
        cached clone."""
        wt = Path(tempfile.mkdtemp(prefix=f"wt-{resolved.sha[:10]}-", dir=self.root))
        try:
            repo.git.worktree("add", "--detach", "--force", str(wt), resolved.sha)
            self.no_module_above(wt, resolved)
            self.verify_modules(wt, log_path, resolved)
            argv = [a.replace("{out}", str(out)) for a in self.target.build]
            self.go(argv, wt, log_path, what=f"build of {resolved.display} ({resolved.short})", sha=resolved.sha,
                    ref=resolved)
            self.verify_compiled(out, resolved)
        finally:
            with contextlib.suppress(git.GitCommandError):
                repo.git.worktree("remove", "--force", str(wt))
            paths.remove_tree(wt, self.builds_dir, ignore_errors=True)
            with contextlib.suppress(git.GitCommandError):
                repo.git.worktree("prune")

    def no_module_above(self, wt: Path, resolved: refs.ResolvedRef) -> None:
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

    def build_module(self, resolved: refs.ResolvedRef, out: Path, log_path: Path, d: Path) -> None:
        # made by the Go that builds, so its go line asks for no newer one
        mod = self.scratch_module(d / "mod", resolved.toolchain)
        what = f"module build of {self.target.package}@{resolved.version}"
        try:
            self.go(["go", "get", f"{self.target.package}@{resolved.version}"], mod, log_path, what=what,
                    sha=resolved.sha, ref=resolved)
            self.verify_modules(mod, log_path, resolved)
            self.go(["go", "build", "-o", str(out), self.target.package], mod, log_path, what=what, sha=resolved.sha,
                    ref=resolved)
            self.verify_compiled(out, resolved)
        finally:
            paths.remove_tree(mod, self.builds_dir, ignore_errors=True)

    def verify_compiled(self, out: Path, resolved: refs.ResolvedRef) -> None:
        """What the build compiled from the module cache is what its sums say (toolchain.
        verify_compiled), before anything seals or runs the binary: `go mod verify` covers only the
        root module's requirements, and a build command may compile another module."""
        if out.is_file():  # a build that made nothing fails on that, after this
            n = tc.verify_compiled(out, self.env(resolved.toolchain, False), _absolute(["go"])[0])
            log.debug("%s: %d modules the binary was built from match their sums", resolved.short, n)

    def verify_modules(self, root: Path, log_path: Path, resolved: refs.ResolvedRef) -> None:
        """`go mod verify` in the module at `root`: every module its go.sum lists that the module
        cache holds must still be what was downloaded. The module cache may come from a cache
        restore (refbench.trust), and a changed module would be built into the binary. A module
        without go.sum has nothing downloaded to check. A changed module fails the build as no
        commit's fault (BuildError.sha None); any other failure is the commit's."""
        if not (root / "go.sum").is_file():
            return
        try:
            self.go(["go", "mod", "verify"], root, log_path, what=f"go mod verify of {resolved.display} "
                    f"({resolved.short})", sha=resolved.sha, ref=resolved)
        except BuildError as e:
            if any(w in (e.detail or "") for w in CACHE_FAULTS):
                raise BuildError(f"the Go module cache holds a module that is not what its checksum says (go mod "
                                 f"verify, building {resolved.display} ({resolved.short})): tampered with or "
                                 f"corrupt; `go clean -modcache` empties it; log: {log_path}", detail=e.detail,
                                 sha=None) from None
            raise

    def go(self, argv: list[str], cwd: Path, log_path: Path, what: str = "build", sha: str | None = None,
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
                                    env=self.env(toolchain, True)).returncode
            except FileNotFoundError:
                raise BuildError(f"{what} failed: {argv[0]} not found on PATH", sha=sha) from None
        if rc != 0:
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
            how = f" with {ref.toolchain} (exit {rc}; {self.hint(ref)})" if ref else f" (exit {rc})"
            raise BuildError(f"{what} failed{how}; log: {log_path}", detail=tail, sha=sha)
