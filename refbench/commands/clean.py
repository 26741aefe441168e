"""`bench.py clean`: remove the build and fixture cache."""
from __future__ import annotations

import argparse
import os
import shutil

from .. import paths
from ..errors import EXIT_OK


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="bench.py clean", description="remove cached builds and fixtures")
    p.add_argument("--builds-dir", default=str(paths.default_builds_dir()))
    p.add_argument("--fixtures-only", action="store_true")
    args = p.parse_args(argv)
    target = os.path.join(args.builds_dir, "fixtures") if args.fixtures_only else args.builds_dir
    shutil.rmtree(target, ignore_errors=True)
    print(f"removed {target}")
    return EXIT_OK
