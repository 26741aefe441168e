"""Command line: `main()` dispatches to a command (refbench/commands/), installs the signal
handlers, and turns errors into one line and an exit code.

Exit codes (docs/exit-codes.md's table says the same): 0 success; 1 a judged regression with
--fail-on-regression / --fail-on, or a nightly alarm, and nothing else; 2 bad input, a failed
build or run, or no space left for the outputs; 3 refbench itself failed (any other exception:
one line and the path of the saved traceback); 130 interrupted. Whatever the code, the run's
own cleanup (its `finally` blocks: backend, workdir, leases) has run by the time main returns.
"""
from __future__ import annotations

import errno
import logging
import os
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Callable

from . import commands, heldenv, paths, tools, trust
from .errors import EXIT_CRASH, EXIT_ERROR, EXIT_INTERRUPTED, RefbenchError
from .runenv import MachineSettings

SUBCOMMANDS = tuple(commands.COMMANDS)
# a disk that cannot take the outputs is the machine's failure, not refbench's
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def main(argv: list[str] | None = None, dispatch: Callable[[str | None, list[str]], int] | None = None) -> int:
    """The command line: its exit code. `dispatch`: (command, its argv) -> exit code, runs a
    subcommand, or the main run (command None) (commands.dispatch unless given: a test's
    stand-in that fails a given way, or runs a command on a RunEnv of its own)."""
    if argv is None:  # the program itself, whatever door (a console script installed before heldenv
        heldenv.start()  # calls main() directly); an in-process caller always passes its argv
        heldenv.restore()  # after this module's imports (GitPython's among them: heldenv.restore)
    path = os.environ.get("PATH")
    # read_environment installs this run's Layout; an in-process caller (a test, an embedding) gets
    # its own Layout and PATH back
    try:
        with paths.installed(paths.layout()):
            return _main(argv, dispatch or commands.dispatch)
    finally:
        if path is not None:
            os.environ["PATH"] = path


def read_environment() -> MachineSettings:
    """The one reading of the environment (library modules read none: they get paths.layout(),
    installed here, or MachineSettings): PATH cleaned of refbench's cache directories first, since
    a restored cache may hold a `go`, `git` or `sh` of anyone's and refbench finds its own tools by
    path (refbench.tools), so nothing refbench starts searches one; then the settings, read once."""
    os.environ["PATH"] = tools.clean_path(os.environ.get("PATH", ""), paths.Layout.from_environ(os.environ))
    machine = MachineSettings.from_environ(os.environ)
    paths.use(machine.layout)
    return machine


def _main(argv: list[str] | None, dispatch: Callable[[str | None, list[str]], int]) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = "-v" in argv or "--verbose" in argv
    try:
        # -v raises refbench's own logger only: botocore's DEBUG log holds signed request headers
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        if verbose:
            logging.getLogger("refbench").setLevel(logging.DEBUG)
        _install_signal_handlers()
        read_environment()
        trust.refuse_key_in_environment()  # before anything runs: /proc/PID/environ keeps it
        if argv and argv[0] in SUBCOMMANDS:
            return dispatch(argv[0], argv[1:])
        return dispatch(None, argv)  # the main run
    except RefbenchError as e:
        print(f"refbench: error: {e}", file=sys.stderr)
        if e.detail:
            print(e.detail.rstrip(), file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        print("refbench: interrupted; cleaned up what this run created", file=sys.stderr)
        return EXIT_INTERRUPTED
    except OSError as e:
        if e.errno not in NO_SPACE:
            return crashed(e, verbose)
        print(f"refbench: error: no space left on device{f' writing {e.filename}' if e.filename else ''}: "
              "free some space and run again", file=sys.stderr)
        return EXIT_ERROR
    except Exception as e:  # noqa: BLE001 — anything else is refbench's own failure: exit 3, never 1
        return crashed(e, verbose)


def crashed(e: BaseException, verbose: bool = False) -> int:
    """Refbench itself failed: one line naming the error and where its traceback was saved (with
    -v the traceback too); exit 3, so no bot reads a crash as a regression."""
    text = "".join(traceback.format_exception(e))
    saved = save_traceback(text)
    first = (str(e).strip().splitlines() or [""])[0]
    where = f"traceback saved to {saved}" if saved else "the traceback follows (it could not be saved)"
    print(f"refbench: internal error (refbench failed, not the code under test): {type(e).__name__}"
          f"{': ' + first if first else ''}; {where}; please report it", file=sys.stderr)
    if verbose or not saved:
        sys.stderr.write(text)
    return EXIT_CRASH


def save_traceback(text: str) -> Path | None:
    """The traceback in a file of its own: under the cache root's crashes/ (REFBENCH_CRASH_DIR
    overrides), else the system temp directory; None when neither can take it (a full disk)."""
    # the nanoseconds too: two crashes of one process in one second (cli.main called twice, as the
    # tests do) would otherwise collide, and the second went to the fallback (the user's cache)
    name = f"crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{time.time_ns() % 10**9:09d}.txt"
    machine = MachineSettings.from_environ(os.environ)
    cache = machine.layout.cache_root  # reached through no link there: a restore may have planted `crashes`
    for where, within in ((machine.crash_dir, None), (cache / "crashes", cache), (tempfile.gettempdir(), None)):
        if not where:
            continue
        try:
            return paths.create_file(Path(where) / name, text, within=within)
        except (OSError, paths.CacheLinkError):
            continue
    return None


def _install_signal_handlers() -> None:
    def raise_interrupt(signum, frame):
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            signal.signal(sig, raise_interrupt)
        except (ValueError, OSError):  # not the main thread
            pass
