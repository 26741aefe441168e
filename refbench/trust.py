"""What vouches for a cached build: a record sealed under a key that no cache holds.

Threat model. refbench's caches are files a later run trusts: builds/ (the bare clones and the
binaries with their build.json), the Go module cache, and the tools in $XDG_CACHE_HOME/refbench.
On CI they are restored from a cache store. On github.com a pull request's cache entries are
scoped to its own ref, but on GitHub Enterprise Server and on self-hosted runners a job that ran
a pull request's code can leave an entry that a later trusted job (a push, the nightly, a
/bench on another PR) restores. Everything in such an entry was chosen by the PR's code, so
nothing in a cache may vouch for itself; a hash stored beside a binary in the same cache proves
nothing, since whoever swapped the binary rewrote the hash too. So:

- a built binary is used only when its build.json carries a seal: HMAC-SHA256 over the record's
  fields (target, commit, its tree, source, Go, build command, GOFLAGS, the binary's SHA-256) under a key
  that lives outside every cache and every environment: the file REFBENCH_CACHE_KEY_FILE names (a
  CI secret written by the job step that needs it, mode 0600, given only to jobs whose every ref
  is merged code: scripts/key-gate.sh), else a key file made on first use in
  $XDG_CONFIG_HOME/refbench/cache-key (mode 0600). REFBENCH_CACHE_KEY is refused
  (refuse_key_in_environment): /proc/<pid>/environ keeps a variable after os.environ drops it,
  and every child can read its parent's. A record without a seal, or sealed under another key, is
  rebuilt. A job without the secret (a pull request's) makes a key of its own: it reuses what it
  built itself and rebuilds what it restored, and it can seal nothing a trusted job accepts;
- kubo's GC states are sealed the same way, over the SHA-256 of their content (backends/snapshot.py);
  both pass one check before a run uses them, gate: the seal, then the content's hash;
- the tools refbench installs (MinIO, toxiproxy, refbench-s3restore, built reproducibly; hyperfine,
  the binary its wheel ships) are checked against hashes pinned in code (refbench.pins) at every
  use, and no cache directory is ever on PATH (refbench.tools);
- a cached clone holding anything git reads to go elsewhere or run something (commondir,
  worktrees, hooks, alternates, links, ...) is cloned anew, and each commit built is re-hashed into
  a fresh repository first (sources.clone_faults, sources.Clone.verified); `go mod verify` checks
  the Go module cache before every build (builds.Builder).

Not defended: code running beside the key (a job that builds unmerged code must not have it: as
root, any process's memory is readable), and a pull request's code running as the same user on a
persistent machine (a self-hosted runner without isolation), which can read the key file and
change anything the user can; there no cache check helps, and such runners must not run
untrusted code. A Go toolchain in the module cache is checked against the checksum database
before any go command switches to it (toolchain.verify_cached: builds, pinned tools, Go
implementations). The README's "The cache's threat model" says what is verified where.
"""
from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Callable, Iterator, Mapping

from . import paths
from .errors import RefbenchError

KEY_ENV = "REFBENCH_CACHE_KEY"  # refused: an environment is readable by every child (/proc/PID/environ)
KEY_FILE_ENV = "REFBENCH_CACHE_KEY_FILE"
HISTORY_URL_FILE_ENV = "REFBENCH_HISTORY_URL_FILE"  # the nightly's history URL, as a 0600 file (history_url)
#: set to 1 by the Action in push, schedule and workflow_dispatch jobs, whose cache token writes the
#: default branch's scope: such a job builds merged code only, keyed or not (merged_only)
MERGED_ONLY_ENV = "REFBENCH_MERGED_ONLY"
#: the origin's default branch as the job's event names it (the Action, bench-sharded.yml); else
#: refbench asks the origin (sources.Clone.default_branch)
DEFAULT_BRANCH_ENV = "REFBENCH_DEFAULT_BRANCH"
_key: bytes | None = None  # the key in use: KEY_FILE_ENV's file, read once, or what use_key installed


def key_file() -> Path:
    """$XDG_CONFIG_HOME/refbench/cache-key (default ~/.config/refbench/cache-key): config, not
    cache, so no cache restore brings it along."""
    return paths.layout().config_root / "cache-key"


def _load_file(path: Path) -> bytes:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32) + "\n")
        return _load_file(path)
    except OSError as e:
        raise RefbenchError(f"cannot read the cache key {path}: {e.strerror} (name another file in {KEY_FILE_ENV})") from None
    if len(text) < 32:
        raise RefbenchError(f"the cache key {path} holds {len(text)} characters, expected at least 32 "
                            f"(delete it and refbench makes a new one)")
    return text.encode()


def private_file(path: Path, named_by: str) -> str:
    """The text of a secret's file (the key, the nightly's history URL), stripped: a regular file of
    this user's, not a link, readable by no one else (mode 0600 or stricter). A secret in a file
    stays out of every environment: /proc/<pid>/environ keeps what a process started with, and
    every process it starts can read it. `named_by`: the variable that named the file, for errors."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise RefbenchError(f"{named_by}: cannot open {path}: {e.strerror} (a link is refused)") from None
    with os.fdopen(fd) as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise RefbenchError(f"{named_by}: {path} must be a regular file of this user's with mode 0600, "
                                f"found mode {stat.S_IMODE(st.st_mode):04o}, owner uid {st.st_uid}")
        return fh.read().strip()


def history_url() -> str | None:
    """The nightly's history URL (it may hold a password): from the 0600 file HISTORY_URL_FILE_ENV
    names, as nightly.yml gives it, else from REFBENCH_HISTORY_URL (a local run's convenience: there
    every process the nightly starts can read it in /proc/<refbench's pid>/environ)."""
    if os.environ.get(HISTORY_URL_FILE_ENV):
        return private_file(Path(os.environ[HISTORY_URL_FILE_ENV]), HISTORY_URL_FILE_ENV) or None
    return os.environ.get("REFBENCH_HISTORY_URL") or None


def _load_given(path: Path) -> bytes:
    """The key in the file KEY_FILE_ENV names (the CI secret, written by the job step that needs
    it): a regular file of this user's, not a link, readable by no one else (private_file)."""
    value = private_file(path, KEY_FILE_ENV)
    if len(value) < 16:
        raise RefbenchError(f"{KEY_FILE_ENV}: {path} holds {len(value)} characters, expected at least 16 "
                            "(a random secret, e.g. `openssl rand -hex 32`)")
    return value.encode()


def refuse_key_in_environment() -> None:
    """A RefbenchError when REFBENCH_CACHE_KEY is set: removing it from os.environ does not remove it
    from /proc/<refbench's pid>/environ, which every process refbench starts can read, so a key
    given that way is a key given to the code under test. cli.main asks this before anything runs."""
    if KEY_ENV in os.environ:
        raise RefbenchError(f"{KEY_ENV} is set: a key in the environment is readable by every process refbench "
                            f"starts (/proc/PID/environ); write it to a file of mode 0600 and name that file in "
                            f"{KEY_FILE_ENV}")


def cache_key() -> bytes:
    """The sealing key: the file REFBENCH_CACHE_KEY_FILE names (read once), else the key file of
    this machine (key_file), made on first use. REFBENCH_CACHE_KEY is refused
    (refuse_key_in_environment)."""
    global _key
    refuse_key_in_environment()
    if _key is None and os.environ.get(KEY_FILE_ENV):
        _key = _load_given(Path(os.environ[KEY_FILE_ENV]))
    return _key if _key is not None else _load_file(key_file())


def use_key(key: bytes | Path | None) -> bytes | None:
    """Install the key this process seals and checks with, and return the one in use before (for
    the caller to put back: key_in_use): bytes, a key held in memory; a Path, a key file, read now
    and once, and checked as KEY_FILE_ENV's is (private_file); None, no key held, so the next seal
    reads KEY_FILE_ENV's file again, or the machine's key file (a new run's first reading). The
    seam a caller in this process has, as the command line has KEY_FILE_ENV: it never goes
    through an environment, which every child could read (refuse_key_in_environment)."""
    global _key
    previous, _key = _key, _load_given(key) if isinstance(key, Path) else key
    return previous


@contextlib.contextmanager
def key_in_use(key: bytes | Path | None) -> Iterator[None]:
    """use_key(key) for the block, and the key in use before back after it."""
    previous = use_key(key)
    try:
        yield
    finally:
        use_key(previous)


def key_given() -> bool:
    """Whether this run was given the shared key (REFBENCH_CACHE_KEY_FILE, a CI secret): a keyed
    run, whose seals every later trusted job accepts, so it takes nothing on a cache's word that it
    could pin down (a commit prefix: refs.refuse_prefix)."""
    return bool(os.environ.get(KEY_FILE_ENV))


def merged_only() -> bool:
    """Whether every commit this run builds must be merged code, reachable from the origin's
    default branch or a release tag (sources.Clone.refuse_unmerged): a keyed run, whose seals every
    later trusted job accepts and whose key any code it runs could read, and a job whose cache
    token writes the default branch's scope (MERGED_ONLY_ENV: push, schedule, workflow_dispatch),
    where code it runs could write cache entries every later job restores (review35d)."""
    return key_given() or os.environ.get(MERGED_ONLY_ENV) == "1"


def default_branch_given() -> str | None:
    """The origin's default branch as the job's event names it (DEFAULT_BRANCH_ENV), or None."""
    return os.environ.get(DEFAULT_BRANCH_ENV) or None


def key_id() -> str:
    """A short name of the key, safe to print and record: which key sealed a record."""
    return hashlib.sha256(b"refbench key id\0" + cache_key()).hexdigest()[:12]


def seal(purpose: str, fields: dict) -> str:
    """HMAC-SHA256 of `fields` (canonical JSON) for `purpose` (a build record, a tool), so a seal
    made for one purpose never passes for another."""
    data = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(cache_key(), purpose.encode() + b"\0" + data, hashlib.sha256).hexdigest()


def sealed(purpose: str, fields: dict, mac: object) -> bool:
    """Whether `mac` is the seal of `fields` under this machine's (or job's) key."""
    return isinstance(mac, str) and hmac.compare_digest(mac, seal(purpose, fields))


def gate(purpose: str, fields: dict, record: Mapping, digest_field: str, content: Callable[[], str]) -> str | None:
    """Why something restored from a cache may not enter this run, or None when it may: the one
    check every sealed thing passes (a built binary and its build.json, a copy of another commit's
    binary of the same tree, kubo's GC state and its state.json). `record`'s seal must hold over
    `fields` under this machine's (or job's) key, and what is on disk must still hash
    (`content()`, asked only once the seal holds: hashing a 4 GB state is the slow part) to the
    digest the sealed `fields[digest_field]` names. A record is trusted for nothing else: whoever
    swapped the content could rewrite any hash beside it, but not the seal."""
    if not sealed(purpose, fields, record.get("seal")):
        return "not sealed under this machine's cache key" if "seal" not in record else \
            f"sealed under another key ({record.get('key_id', '?')})"
    want = fields.get(digest_field)
    got = content()
    if not isinstance(want, str) or got != want:
        return f"its content hashes to {got[:12]}, not the sealed {str(want)[:12]}"
    return None
