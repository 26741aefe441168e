"""`python -m refbench` and the `refbench` console script: the door (bench.py is the checkout's)."""
import sys

from .heldenv import start


def console() -> int:
    start()  # before the command line's imports: start() may execute the program again
    from .cli import main  # noqa: PLC0415 — imported after start(), so a re-execution does not import it twice
    return main()


if __name__ == "__main__":
    sys.exit(console())
