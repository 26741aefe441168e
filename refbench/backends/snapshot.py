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
import shlex
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .. import paths
from ..errors import RunError

STATE_FILE = "state.json"  # written last: a state or layer without it is incomplete, rebuilt


def key(*parts: str) -> str:
    """A short stable key for what a state was built from."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class StateCache:
    """One build's cached state: root/repo (the repo the recipe filled) and root/layers/KEY/upper
    (a step's layer over it), each complete once its STATE_FILE exists."""
    root: Path

    @property
    def repo(self) -> Path:
        return self.root / "repo"

    def layer(self, layer_key: str) -> Path:
        return self.root / "layers" / layer_key

    @staticmethod
    def ready(where: Path) -> bool:
        return (where / STATE_FILE).exists()

    @staticmethod
    def mark(where: Path, **facts) -> None:
        (where / STATE_FILE).write_text(json.dumps({"built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **facts}))

    @staticmethod
    def claim(where: Path) -> contextlib.ExitStack | None:
        """`where`'s lock, held, when it is still to be built (close it when done); None when it is
        ready, which may follow a wait while another process on this machine builds it."""
        lock = contextlib.ExitStack()
        lock.enter_context(paths.locked(where.with_name(where.name + ".lock")))
        if StateCache.ready(where):
            lock.close()
            return None
        return lock

    @staticmethod
    def clear(where: Path) -> None:
        """An incomplete state (a recipe that failed, a killed run) is removed before a rebuild."""
        shutil.rmtree(where, ignore_errors=True)


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
