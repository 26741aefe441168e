"""Command line: `main()` dispatches to a command (refbench/commands/), installs the signal
handlers, and turns errors into one line and an exit code.

Exit codes: 0 success; 1 a `slower` verdict with --fail-on-regression; 2 bad input or a failed
build/run; 130 interrupted (after cleaning up).
"""
from __future__ import annotations

import logging
import signal
import sys

from . import commands, paths
from .errors import EXIT_INTERRUPTED, RefbenchError

SUBCOMMANDS = tuple(commands.COMMANDS)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = "-v" in argv or "--verbose" in argv
    # -v raises refbench's own logger only: botocore's DEBUG log holds signed request headers
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if verbose:
        logging.getLogger("refbench").setLevel(logging.DEBUG)
    _install_signal_handlers()
    from . import hyperfine
    # the pinned hyperfine `refbench setup` builds, then refbench's tools directories, then PATH
    paths.extend_path(first=(hyperfine.pinned_path().parent,))
    try:
        if argv and argv[0] in SUBCOMMANDS:
            return commands.dispatch(argv[0], argv[1:])
        from .commands import run
        return run.main(argv)
    except RefbenchError as e:
        print(f"refbench: error: {e}", file=sys.stderr)
        if e.detail:
            print(e.detail.rstrip(), file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        print("refbench: interrupted; cleaned up what this run created", file=sys.stderr)
        return EXIT_INTERRUPTED


def _install_signal_handlers() -> None:
    def raise_interrupt(signum, frame):
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            signal.signal(sig, raise_interrupt)
        except (ValueError, OSError):  # not the main thread
            pass
