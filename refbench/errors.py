"""Errors and the exit codes they map to.

A bot and a cron act on the code without a person reading the output, so each code means one
thing: 0 success; 1 a judged regression (--fail-on-regression, --fail-on) or a nightly alarm,
nothing else; 2 bad input, a failed build or run, or a machine that cannot take the outputs (a
full disk); 3 refbench itself failed (any other exception: a bug, not the code under test); 130
interrupted. cli.main turns errors into these codes.
"""
from __future__ import annotations

import contextlib
from pathlib import Path

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_ERROR = 2
EXIT_CRASH = 3
EXIT_INTERRUPTED = 130


class RefbenchError(Exception):
    """A user-facing failure: printed as one line, exits with ``code``."""

    code = EXIT_ERROR

    def __init__(self, message: str, detail: str | None = None):
        super().__init__(message)
        self.detail = detail  # extra lines (e.g. a build log tail) shown after the message


class ConfigError(RefbenchError):
    pass


class RefError(RefbenchError):
    pass


class BuildError(RefbenchError):
    """A build that failed. `sha` names the commit whose build failed; None when the failure is
    not one commit's (no Go, the toolchain, the target's build settings), so a caller can skip a
    commit that does not build and stop on anything else."""

    def __init__(self, message: str, detail: str | None = None, sha: str | None = None):
        super().__init__(message, detail)
        self.sha = sha


class RunError(RefbenchError):
    pass


@contextlib.contextmanager
def writing(path, what: str):
    """Write an output inside this block: a failure (a full disk, a read-only directory) is one
    RefbenchError naming the output and its file (exit 2: the machine's, not a bug of refbench's)."""
    try:
        yield Path(path)
    except OSError as e:
        raise RefbenchError(f"cannot write {what} to {path}: {e.strerror or e}") from None
