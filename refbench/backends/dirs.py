"""Local directories a run owns (its temp dir, an embedded MinIO's data dir): marked with their
owner, so the next run on the machine can remove what a run killed outright left behind, and
measured (tree_bytes) by the watchdog and the MinIO trash purge. And where replaced kubo repos
wait, emptied, until the run ends (Retired)."""
from __future__ import annotations

import contextlib
import glob
import json
import logging
import os
import shutil
import socket
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..lease import owner_alive, process_start

log = logging.getLogger(__name__)

WORKDIR_PATTERN = "refbench-[0-9]*-*"  # refbench-<run id>-XXXXXXXX, run id = date-time-hex
MINIO_DIR_PATTERN = "refbench-minio-*"


def write_owner(d: Path) -> None:
    """Mark a directory as this process's: `owner` holds the pid (what older runs wrote and
    read), `owner.json` adds what tells a dead owner from a live one for sure: host, the
    process's start time (pid reuse) and the kernel's boot id (a reboot ends every run)."""
    (d / "owner").write_text(str(os.getpid()))
    (d / "owner.json").write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                                              "pid_start": process_start(os.getpid()), "boot_id": _boot_id()}))


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def owner_dead(d: Path) -> bool:
    """True only when the directory's owner process is known to be gone from this host."""
    try:
        pid = int((d / "owner").read_text())
    except (OSError, ValueError):
        return False  # not marked by refbench (or not yet): leave it
    try:
        info = json.loads((d / "owner.json").read_text())
    except (OSError, ValueError):
        info = {}
    if info.get("host") not in (None, socket.gethostname()):
        return False  # a temp dir shared with another host or container: not ours to judge
    if info.get("boot_id") and _boot_id() and info["boot_id"] != _boot_id():
        return True
    return owner_alive(pid, info.get("pid_start")) is False


def sweep_stale(parent: Path, pattern: str = MINIO_DIR_PATTERN) -> list[Path]:
    """Remove directories left by refbench runs that were killed outright (owner process gone):
    MinIO data dirs in RAM or on disk, and runs' local temp dirs. Returns what it removed."""
    removed = []
    for d in sorted(Path(parent).glob(pattern)):
        if not d.is_dir() or d.is_symlink() or not owner_dead(d):
            continue
        if not _remove_owned(d):
            log.info("could not empty %s yet (something still writes there); the next run retries", d)
            continue
        _remove_beside(d)
        removed.append(d)
        log.info("removed %s, left by a killed run", d)
    return removed


OWNER_MARKS = ("owner", "owner.json")


def beside(d: Path, what: str) -> Path:
    """A file or dir a run keeps beside its marked dir `d`, named after it (DIR.log,
    DIR.probes-N): the one naming the writers use, so that a sweep of `d` knows what is `d`'s."""
    return d.with_name(f"{d.name}.{what}")


def _remove_beside(d: Path) -> None:
    """Everything named beside a dead run's dir (beside(d, ...): a server's log, each probe
    server's file and FIFO dir). A run killed mid-round left them, and the pattern's sweep never
    took them (no owner marks of their own)."""
    for p in d.parent.glob(f"{glob.escape(d.name)}.*"):
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                p.unlink()


def _remove_owned(d: Path, attempts: int = 3) -> bool:
    """Remove a dead run's directory: its contents first, its owner marks last. A sweep cut short,
    or a server of the dead run that still writes while it dies, then leaves a directory the next
    sweep still recognises as a dead run's, never an unmarked one nobody removes. True when gone."""
    for _ in range(attempts):
        for child in list(d.iterdir()):
            if child.name in OWNER_MARKS:
                continue
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    child.unlink()
        if all(child.name in OWNER_MARKS for child in d.iterdir()):
            marks = {m: (d / m).read_bytes() for m in OWNER_MARKS if (d / m).exists()}
            for mark in marks:
                (d / mark).unlink()
            try:
                d.rmdir()
                return True
            except FileNotFoundError:
                return True
            except OSError:  # written to in between: mark it again, so a later sweep finishes it
                for mark, data in marks.items():
                    (d / mark).write_bytes(data)
    return False


def make_workdir(run_id: str, local_root: Path | None) -> tuple[Path, list[Path]]:
    """The run's local temp dir (downloads, scratch, a MinIO data dir on disk), marked with its
    owner, after sweeping the ones killed runs left in the same place. Returns (dir, swept)."""
    parent = Path(local_root) if local_root else Path(tempfile.gettempdir())
    swept = sweep_stale(parent, WORKDIR_PATTERN)
    workdir = Path(tempfile.mkdtemp(prefix=f"refbench-{run_id}-", dir=parent))
    write_owner(workdir)
    return workdir, swept


def tree_bytes(path: Path) -> int:
    """Bytes a file or directory tree occupies (allocated blocks: a sparse file counts what it
    holds, tmpfs what it uses); what vanishes while it is walked is skipped."""
    total = 0
    stack = [str(path)]
    while stack:
        p = stack.pop()
        try:
            st = os.lstat(p)
        except OSError:
            continue
        total += st.st_blocks * 512
        if os.path.isdir(p) and not os.path.islink(p):
            try:
                with os.scandir(p) as it:
                    for e in it:
                        try:
                            if e.is_dir(follow_symlinks=False):
                                stack.append(e.path)
                            else:
                                total += e.stat(follow_symlinks=False).st_blocks * 512
                        except OSError:
                            continue
            except OSError:
                continue
    return total


@dataclass
class Retired:
    """Where a run's replaced repos wait, emptied of their bytes, until the run is over.

    Why not delete them at once: on ext4 without a journal (this project's machines: docs/kubo.md),
    allocating an inode skips, one at a time, every inode freed in the last one to six minutes
    (`recently_deleted` in fs/ext4/ialloc.c). A kubo repo removed just before its successor is
    made (a daemon restart, the next scenario) then charges every file and directory the
    successor's daemon creates with a walk past the old repo's inodes: kernel time that grew
    from 100 to 255 ms an add over twelve restarts, at a level each fresh daemon kept for all its
    runs. So a daemon's cost depended on what refbench had just deleted near it, and one daemon's
    runs were alike (issue 36: an intraclass correlation of 0.43, a false verdict in an A/A).

    A retired tree keeps its inodes (directories, files truncated to nothing), so nothing is
    freed while the run measures, and gives its bytes back at once (the disk budget). Only a
    file with one link is truncated, through a descriptor opened without following links: a
    hard or symbolic link to a file outside the tree is left whole. `clear` removes them all, at
    the run's end. Past `cap` inodes (a quarter of the free ones when the first tree comes), the
    oldest trees are removed at once: a run that large pays the after-effect rather than
    exhausting the file system's inodes."""
    root: Path
    held: list = field(default_factory=list)  # (path, inodes), oldest first
    cap: int | None = None  # inodes held before the oldest tree goes (None: set by the first retire)

    def retire(self, tree: Path) -> None:
        """Empty `tree`'s files, move it under `root` (same file system: a rename), or remove it
        when it cannot be moved there."""
        if not tree.exists():
            return
        self.root.mkdir(parents=True, exist_ok=True)
        if self.cap is None:
            free = free_inodes(self.root)
            self.cap = free // 4 if free is not None else 1 << 62  # no limit to keep under
        inodes = empty_files(tree)
        dest = Path(tempfile.mkdtemp(prefix=f"{tree.name}.", dir=self.root))
        try:
            tree.rename(dest / tree.name)
        except OSError:
            shutil.rmtree(tree, ignore_errors=True)
            dest.rmdir()
            return
        self.held.append((dest, inodes))
        while len(self.held) > 1 and sum(n for _, n in self.held) > self.cap:
            shutil.rmtree(self.held.pop(0)[0], ignore_errors=True)

    def clear(self) -> None:
        self.held.clear()
        shutil.rmtree(self.root, ignore_errors=True)  # every held tree is under it


def empty_files(tree: Path) -> int:
    """Truncate every regular file of `tree` with a single link to nothing (never through a
    symbolic link, never a file a hard link shares with the world outside); the tree's inode count."""
    count = 1  # the tree's own directory; every other entry is counted once, in its parent
    for dirpath, dirnames, filenames in os.walk(tree):  # symbolic links to directories are not entered
        count += len(dirnames) + len(filenames)
        for name in filenames:
            try:
                fd = os.open(os.path.join(dirpath, name), os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:  # a symbolic link (ELOOP), a FIFO or socket, gone
                continue
            try:
                st = os.fstat(fd)
                if stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_size:
                    os.ftruncate(fd, 0)
            except OSError:
                pass
            finally:
                os.close(fd)
    return count


def free_inodes(path: Path) -> int | None:
    """Inodes still free to an unprivileged user where `path` is; None when the file system sets
    no limit (it reports none: btrfs, tmpfs without nr_inodes)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_favail if st.f_files else None
