"""The build cache's records and their trust: what build.json holds and its seal covers, whether a
cached build may be used (its record sealed under this machine's or job's key, its binary of the
sealed hash), a build of another commit with the same tree put in place as this one's, and a build
copied out to be shared (export). The layout is refbench.builds' docstring's.

A cache vouches for nothing by itself (the threat model is docs/threat-model.md's): nothing here
is used before trust.gate passes it. How a build is made is the Builder's (refbench.builds,
refbench.go_build); the two things a record is keyed by that only the Builder knows (the GOFLAGS of
a Go, a commit's tree) are passed in."""
from __future__ import annotations

import json
import logging
import os
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import paths, refs, trust
from .config import TargetSpec
from .errors import BuildError

log = logging.getLogger(__name__)

SEAL_PURPOSE = "refbench build record v1"
#: the fields of build.json the seal covers: what the cache is keyed by, and the binary's hash
SEALED_FIELDS = ("target", "sha", "tree", "source", "toolchain", "build", "goflags", "binary_sha256")
#: sealed as well for the module source: which module and version the binary is. Its commit is only
#: what `go list` said, so a sealed build of one version is never taken for another's
MODULE_FIELDS = ("module", "version")


def sealed_keys(source: str) -> tuple[str, ...]:
    """The fields of build.json the seal covers for a build from `source`."""
    return SEALED_FIELDS + (MODULE_FIELDS if source == "module" else ())


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


@dataclass(frozen=True)
class BuildCache:
    """The sealed builds of one target from one source, under `root` (builds/<target>/). `goflags`:
    the GOFLAGS a build with that Go runs under (the Builder's _go_env's), sealed in each record.
    `tree`: the git tree of a ref's commit from its verified objects, None where there is none (the
    Builder's tree)."""
    target: TargetSpec
    source: str
    root: Path
    builds_dir: Path  # nothing is written or removed through a link below it
    goflags: Callable[[str | None], str]
    tree: Callable[[refs.ResolvedRef], str | None]

    def cached(self, resolved: refs.ResolvedRef, d: Path) -> Path | None:
        """The binary of the build of `resolved` (its Go settled) in `d`, when its record is sealed
        under this key and says what this builder would (sealed_fields) and the binary has the
        sealed hash (trust.gate); None: rebuild."""
        meta, binary = d / "build.json", d / self.target.binary
        info = read_record(meta)
        if info is None or not _regular(binary):  # a link or a FIFO is no build: hashing a FIFO would block
            return None
        if "tree" not in info:
            return None  # not a record, or one of a refbench from before trees were sealed: rebuild
        fields = {k: info.get(k) for k in sealed_keys(self.source)}
        # the commit names its tree: the sealed one stands (an artifact's builder may hold no clone)
        if not fields.get("binary_sha256") or self.sealed_fields(resolved, fields["binary_sha256"],
                                                                 tree=fields["tree"]) != fields:
            return None  # no hash, or another commit, Go, command or GOFLAGS: rebuild
        why = trust.gate(SEAL_PURPOSE, fields, info, "binary_sha256", lambda: paths.file_sha256(binary))
        if why:
            log.warning("%s: %s (see refbench/trust.py): rebuilding", binary, why)
            return None
        if not os.access(binary, os.X_OK):
            binary.chmod(binary.stat().st_mode | 0o111)
        return binary

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
        for flag in self.goflags(toolchain).split() + argv[2:]:
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
        want = self.sealed_fields(resolved, None)
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

    def record(self, resolved: refs.ResolvedRef, digest: str, **extra) -> dict:
        """build.json of `resolved` built into a binary of SHA-256 `digest`: the fields the cache is
        keyed by and the hash, sealed under this machine's (or job's) key, and `extra`."""
        sealed = self.sealed_fields(resolved, digest)
        return {**sealed, **extra, "seal": trust.seal(SEAL_PURPOSE, sealed), "key_id": trust.key_id()}

    def write_record(self, d: Path, resolved: refs.ResolvedRef, digest: str, seconds: float, **extra) -> None:
        """Write build.json (record) in the build directory `d`, the last of it (the layout is
        refbench.builds'): the sealed fields, then the ref as typed, its version, the `seconds` the
        build took, `extra` (same_tree_as) and when it was written. One writer for a build and a
        reused tree alike, so their records keep one shape."""
        paths.replace_file(d / "build.json", json.dumps(self.record(
            resolved, digest, ref=resolved.text, version=resolved.version, seconds=seconds, **extra,
            built_at=time.strftime("%Y-%m-%dT%H:%M:%S%z")), indent=2), within=self.builds_dir)

    def sealed_fields(self, resolved: refs.ResolvedRef, digest: str | None, **tree) -> dict:
        """What a build record must say for `resolved` as this builder builds it: the fields the seal
        covers (sealed_keys). `tree=`: the commit's tree as a record already says it, else asked."""
        fields = {"target": self.target.name, "sha": resolved.sha,
                  "tree": tree["tree"] if "tree" in tree else self.tree(resolved), "source": self.source,
                  "toolchain": resolved.toolchain, "build": list(self.target.build),
                  "goflags": self.goflags(resolved.toolchain), "binary_sha256": digest}
        if self.source == "module":
            fields.update(module=self.target.module, version=resolved.version)
        return fields

    def export(self, binary: Path, built_now: bool, out_dir: Path) -> Path:
        """Copy a build (`binary`, build.json, and build.log when this run wrote it: `built_now`)
        into out_dir with the cache's own layout, so `--builds-dir out_dir` reuses it (verified by
        its hash). Returns the copied binary. out_dir is made to be shared (a CI artifact), so only
        what was verified goes there, each a regular file opened with O_NOFOLLOW: a cached build's
        build.log is sealed by nothing, and a restored cache could make it a link to any file the
        job can read (a checkout's token, a key file; review35e)."""
        src = binary.parent
        dest = Path(out_dir).resolve() / self.target.name / src.name
        if dest == src:
            return binary
        out = Path(out_dir).resolve()
        tmp = dest.with_name(dest.name + ".tmp")
        paths.remove_tree(tmp, out, ignore_errors=True)
        paths.make_dirs(tmp, out)
        for name in (self.target.binary, "build.json") + (("build.log",) if built_now else ()):
            if os.path.lexists(src / name):
                copy_regular(src / name, tmp / name)
        paths.remove_tree(dest, out, ignore_errors=True)
        tmp.rename(dest)
        return dest / self.target.binary

    def reuse_same_tree(self, resolved: refs.ResolvedRef, d: Path) -> tuple[Path, str] | None:
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
        why = trust.gate(SEAL_PURPOSE, fields, {"seal": seal}, "binary_sha256", lambda: paths.file_sha256(tmp_bin))
        if why:  # the copy, not the file it was copied from: that one may change in between
            log.warning("%s: %s: building %s instead", src, why, resolved.short)
            paths.remove_tree(d, self.builds_dir, ignore_errors=True)
            return None
        digest = fields["binary_sha256"]
        tmp_bin.chmod(0o755)
        binary = d / self.target.binary
        tmp_bin.rename(binary)
        self.write_record(d, resolved, digest, 0.0, same_tree_as=fields["sha"])
        return binary, fields["sha"]
