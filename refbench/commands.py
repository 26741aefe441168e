"""Subcommands beside the main comparison: each lives in its own module."""
from __future__ import annotations

import shutil

from .errors import EXIT_OK


def dispatch(name: str, argv: list[str]) -> int:
    if name == "report":
        from .views import cmd_report
        return cmd_report(argv)
    if name == "compare":
        from .views import cmd_compare
        return cmd_compare(argv)
    if name == "comment":
        from .github import cmd_comment
        return cmd_comment(argv)
    if name == "nightly":
        from .nightly import cmd_nightly
        return cmd_nightly(argv)
    if name == "bisect":
        from .bisect import cmd_bisect
        return cmd_bisect(argv)
    if name == "clean":
        return cmd_clean(argv)
    raise AssertionError(name)


def cmd_clean(argv: list[str]) -> int:
    """Remove the build and fixture cache."""
    import argparse
    import os

    from .cli import PROJECT_ROOT
    p = argparse.ArgumentParser(prog="bench.py clean", description="remove cached builds and fixtures")
    p.add_argument("--builds-dir", default=os.environ.get("REFBENCH_BUILDS_DIR", str(PROJECT_ROOT / "builds")))
    p.add_argument("--fixtures-only", action="store_true")
    args = p.parse_args(argv)
    target = os.path.join(args.builds_dir, "fixtures") if args.fixtures_only else args.builds_dir
    shutil.rmtree(target, ignore_errors=True)
    print(f"removed {target}")
    return EXIT_OK
