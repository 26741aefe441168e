"""Repository states built once per build and put back before every timed run, in a time that
does not grow with the state.

A garbage collection at the seed's scale needs a repo of a million blocks, half of them pinned:
about a minute to build, and the timed command destroys it. So the repo is built once per build
(binary), fixture and recipe, kept in the build cache, and never written again: every timed run
gets an overlay mount over it, whose upper layer lives on a tmpfs of its own. Restoring is
unmounting both and mounting them again (`restore_command`): the collected blocks come back
because they were never deleted from the cached repo, only hidden. What a run writes lands in
RAM (GC's deletions are whiteouts there; the blocks it reads come from the cached repo on disk).

A step may add a layer of its own over the scenario's state (a repo already collected, one whose
garbage is raw leaves only): the layer is built once through an overlay whose upper directory is
on disk, and kept; a run then mounts the layer and the state below it, both read-only.

Every mount is made inside the run's mount namespace (sandbox.py), so none outlives the run.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import shlex
import shutil
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .. import paths, trust
from ..errors import RunError

log = logging.getLogger(__name__)

STATE_FILE = "state.json"  # written last: a state or layer without it is incomplete, rebuilt
SEAL_PURPOSE = "refbench ipfs state v1"
#: what kubo loads code from at start ($IPFS_PATH/plugins/*.so): never in a state refbench trusts
REFUSED = ("plugins",)
_verified: dict[tuple, str | None] = {}  # (state, its state.json's identity) -> why not ready, or None


def key(*parts: str) -> str:
    """A short stable key for what a state was built from."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


#: a canonical archive of a state: names sorted, no owner, times or atime/ctime, the overlay's own
#: attributes kept (a whiteout's or an opaque directory's); GNU tar 1.28+ (--sort)
TAR_CANONICAL = ("--sort=name", "--format=posix", "--numeric-owner", "--owner=0", "--group=0", "--mtime=@0",
                 "--pax-option=delete=atime,delete=ctime", "--xattrs", "--xattrs-include=user.overlay.*",
                 "--xattrs-include=trusted.overlay.*")


def manifest(where: Path) -> str:
    """SHA-256 of the state at `where` (all but its STATE_FILE) as one canonical tar stream
    (TAR_CANONICAL): every entry's name, kind, mode, a link's target, a device's number, the
    overlay's attributes and every file's content, with no owner and no time. Content, not a
    listing of sizes and times, which a cache can copy onto planted files. tar walks the million
    files of the seed's state in C; hashing its stream takes about 11 s for 1 M blocks (4 GB) warm
    (benchmarks/trust_cost.py): a Python walk of the same took 105 s."""
    path = paths.layout().environ.get("PATH", "")  # the command line's (refbench.tools cleaned it)
    tar = shutil.which("tar", path=path) or "tar"
    top = sorted(name for name in os.listdir(where) if name != STATE_FILE)
    h = hashlib.sha256()
    if not top:
        return h.hexdigest()
    proc = subprocess.Popen([tar, *TAR_CANONICAL, "-C", str(where), "-cf", "-", "--", *top],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={"PATH": path,
                                                                                 "LC_ALL": "C"})
    assert proc.stdout is not None
    for chunk in iter(lambda: proc.stdout.read(1 << 20), b""):
        h.update(chunk)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.wait() != 0:
        raise RunError(f"cannot read the cached IPFS state {where} to check it: tar exited {proc.returncode}: "
                       f"{(err.strip().splitlines() or ['?'])[-1]}")
    return h.hexdigest()


def refused(where: Path) -> str | None:
    """Why the state at `where` (a repo, or a layer whose repo is upper/) is never used, or None."""
    for base in (where, where / "upper"):
        for name in REFUSED:
            if os.path.lexists(base / name):
                return f"it holds {(base / name).relative_to(where)}/ (kubo loads plugins from there at start)"
    return None


@dataclass(frozen=True)
class StateCache:
    """One build's cached state: root/repo (the repo the recipe filled) and root/layers/KEY/upper
    (a step's layer over it), each complete once its STATE_FILE exists and trusted once that file's
    seal holds. The seal (refbench.trust) is an HMAC under the cache key of the state's manifest
    (its content's hash) and what built it: a restored cache may hold a state anyone made (wrong
    results in every report, kubo's plugins/ loaded at start), so a state counts as ready only when
    its seal holds under this machine's (or job's) key and its content is still the sealed one,
    verified once per state and refbench run (about 11 s for the seed's 4 GB, benchmarks/trust_cost.py);
    any other state is rebuilt, and one with a plugins/ directory is refused. The seal names the
    state's place under the build cache (slot), and a layer's names the seal of the state it was
    built over (base_of): a sealed state or layer moved elsewhere, or paired with another base, is
    rebuilt."""
    root: Path

    @property
    def repo(self) -> Path:
        return self.root / "repo"

    def layer(self, layer_key: str) -> Path:
        return self.root / "layers" / layer_key

    @staticmethod
    def why_not_ready(where: Path, within: Path | None = None) -> str | None:
        """None when the state at `where` is complete, sealed under this key, and still the
        content sealed; else why not (logged by ready). Verified once per state, state.json and run.
        `within`: the build cache; the state must then have been sealed for this slot (slot())."""
        meta = where / STATE_FILE
        try:
            st = os.lstat(meta)
        except FileNotFoundError:
            return "incomplete (no state.json)"
        except OSError as e:  # a restored state directory this user may not enter (mode 0000): rebuilt (review35p P1)
            return f"unreadable ({e.strerror})"
        ident = (str(where), st.st_ino, st.st_size, st.st_mtime_ns)
        if ident not in _verified:
            _verified[ident] = StateCache._verify(where, meta)
        if _verified[ident] is None and within is not None:
            info = paths.read_record(meta) or {}
            sealed = info.get("slot")
            if sealed != StateCache.slot(where, within):
                return f"it was sealed for {sealed!r}, another binary's, fixture's or layer's place"
            base = StateCache.base_of(where)
            if base is not None and info.get("base") != StateCache.seal_of(base):
                return f"it was built over another state than the one at {base}"
        return _verified[ident]

    @staticmethod
    def base_of(where: Path) -> Path | None:
        """The state a layer (root/layers/KEY) was built over, root/repo; None for a state itself.
        A layer is only the difference to that state, so its seal names the state's (mark), and a
        layer over any other is rebuilt: a restored cache could otherwise pair the current state
        with a sealed layer built over an earlier one."""
        return where.parent.parent / "repo" if where.parent.name == "layers" else None

    @staticmethod
    def seal_of(where: Path) -> str | None:
        """The seal in the state.json of the state at `where` (None without one): what a layer over
        it seals as its base. The state itself is verified before any layer over it is built or used."""
        info = paths.read_record(where / STATE_FILE) or {}  # through no link, no FIFO
        return info.get("seal") if isinstance(info.get("seal"), str) else None

    @staticmethod
    def slot(where: Path, within: Path) -> str:
        """Where the state sits under the build cache (ipfs-states/<binary>/<state and fixture>/repo or
        layers/<key>): sealed with it, so a sealed state copied into another slot is not ready there."""
        return os.path.relpath(os.path.abspath(where), os.path.abspath(within))

    @staticmethod
    def _verify(where: Path, meta: Path) -> str | None:
        if not stat.S_ISREG(os.lstat(meta).st_mode):
            return "its state.json is not a file"
        why = refused(where)
        if why:
            return why
        info = paths.read_record(meta)  # a regular file (above), read through no link all the same
        if info is None:
            return "its state.json is not a JSON object"
        if not isinstance(info.get("manifest"), str):
            return "its state.json has no manifest (made before states were sealed)"
        fields = {k: v for k, v in info.items() if k not in ("seal", "key_id")}
        return trust.gate(SEAL_PURPOSE, fields, info, "manifest", lambda: manifest(where))

    @staticmethod
    def ready(where: Path, within: Path | None = None) -> bool:
        why = StateCache.why_not_ready(where, within)
        if why and why != "incomplete (no state.json)":
            log.warning("cached IPFS state %s is not used: %s; building it again", where, why)
        return why is None

    @staticmethod
    def mark(where: Path, within: Path, **facts) -> None:
        """Seal the state at `where` as built now: its manifest and `facts`, under the cache key;
        a layer's seal names the seal of the state it was built over (base_of).
        `within`: the build cache it is in (paths.replace_file writes through no link in it)."""
        why = refused(where)
        if why:
            raise RunError(f"the IPFS state built at {where} is refused: {why}")
        base = StateCache.base_of(where)
        fields = {"built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **facts, "slot": StateCache.slot(where, within),
                  **({"base": StateCache.seal_of(base)} if base is not None else {}), "manifest": manifest(where)}
        paths.replace_file(where / STATE_FILE, json.dumps(
            {**fields, "seal": trust.seal(SEAL_PURPOSE, fields), "key_id": trust.key_id()}), within=within)

    @staticmethod
    def claim(where: Path, within: Path) -> contextlib.ExitStack | None:
        """`where`'s lock, held, when it is still to be built (close it when done); None when it is
        ready, which may follow a wait while another process on this machine builds it."""
        lock = contextlib.ExitStack()
        lock.enter_context(paths.locked(where.with_name(where.name + ".lock"), within=within))
        if StateCache.ready(where, within):
            lock.close()
            return None
        return lock

    @staticmethod
    def clear(where: Path, within: Path) -> None:
        """An incomplete state (a recipe that failed, a killed run) is removed before a rebuild;
        inside the build cache `within` and through no link in it (paths.remove_tree): a restored
        cache's <builds>/ipfs-states/<k> -> $HOME would otherwise take the removal there."""
        paths.remove_tree(where, within, ignore_errors=True)


def overlay_options(lowers: list[Path], upper: Path, work: Path, user: bool) -> str:
    """overlay mount options; in a user namespace, overlayfs keeps its whiteouts' marks in user.*
    extended attributes (`userxattr`), where trusted.* is not allowed."""
    lower = ":".join(str(p) for p in lowers)
    return f"lowerdir={lower},upperdir={upper},workdir={work}" + (",userxattr" if user else "")


def unmount_command(mountpoint: Path, scratch: Path) -> str:
    """Unmount the overlay and its tmpfs, where mounted (a first restore finds neither)."""
    return (f"{{ ! mountpoint -q {shlex.quote(str(mountpoint))} || umount {shlex.quote(str(mountpoint))}; }} && "
            f"{{ ! mountpoint -q {shlex.quote(str(scratch))} || umount {shlex.quote(str(scratch))}; }}")


def restore_command(mountpoint: Path, lowers: list[Path], scratch: Path, user: bool) -> str:
    """One shell line that puts `lowers` (top first) back at `mountpoint`, writable, as they were
    built: a fresh tmpfs for the upper layer, a fresh overlay. Its time grows with what the last
    run wrote (the kernel frees the old tmpfs), not with the state's size."""
    m, t = shlex.quote(str(mountpoint)), shlex.quote(str(scratch))
    opts = shlex.quote(overlay_options(lowers, scratch / "upper", scratch / "work", user))
    return (f"{unmount_command(mountpoint, scratch)} && mkdir -p {m} {t} && mount -t tmpfs refbench-upper {t} && "
            f"mkdir {t}/upper {t}/work && mount -t overlay -o {opts} refbench-state {m}")


def layer_mount_command(mountpoint: Path, lower: Path, layer: Path, user: bool) -> str:
    """Mount `lower` at `mountpoint` with `layer`/upper on disk as the upper layer, to build a
    step's layer (unmounted with unmount_command's first half)."""
    m = shlex.quote(str(mountpoint))
    up, work = layer / "upper", layer / "work"
    opts = shlex.quote(overlay_options([lower], up, work, user))
    return (f"mkdir -p {m} {shlex.quote(str(up))} {shlex.quote(str(work))} && "
            f"mount -t overlay -o {opts} refbench-layer {m}")


@functools.lru_cache(maxsize=1)
def overlay_unavailable() -> str | None:
    """Why no state can be restored here (no namespace, or no overlay mount inside one), or None
    when restore_command works: probed once, on a throw-away lower directory."""
    from .sandbox import Sandbox, sbin_path

    try:
        box = Sandbox.open()
    except (RunError, OSError) as e:
        return str(e)
    try:
        with tempfile.TemporaryDirectory(prefix="refbench-overlay-probe-") as tmp:
            root = Path(tmp)
            (root / "lower").mkdir()
            (root / "lower" / "f").write_text("x")
            cmd = restore_command(root / "m", [root / "lower"], root / "s", box.user) + f" && cat {root}/m/f"
            proc = subprocess.run([*box.prefix(), "sh", "-c", cmd], capture_output=True, text=True, timeout=30,
                                  env={"PATH": sbin_path()})
            if proc.returncode != 0 or proc.stdout.strip() != "x":
                return f"overlay mount failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}"
    finally:
        box.close()
    return None
