"""`bench.py clean`: remove the build and fixture cache; `--stale`: what killed runs left on this
machine; `--remote -b BUCKET [-p PREFIX]`: what dead runs left in a bucket (expired leases)."""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from .. import lease, paths
from ..backends import WORKDIR_PATTERN, S3Backend, sweep_stale
from ..errors import EXIT_ERROR, EXIT_OK, RefbenchError


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 2, like the main command
        self.exit(EXIT_ERROR, f"refbench: error: {message} (see {self.prog} --help)\n")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="bench.py clean",
                description="Remove cached builds and fixtures (default); with --stale, the temp dirs and RAM "
                            "data dirs of runs that were killed; with --remote, the prefixes dead runs left in "
                            "a bucket (their lease expired). Live runs and anything outside -p are never touched.")
    p.add_argument("--builds-dir", default=str(paths.default_builds_dir()))
    p.add_argument("--fixtures-only", action="store_true", help="remove only the fixtures from the cache")
    p.add_argument("--stale", action="store_true",
                   help="remove local temp dirs and RAM data dirs of refbench runs whose process is gone")
    p.add_argument("-l", "--local-path", help="--stale: where those runs put their temp dirs (default: system temp)")
    p.add_argument("--remote", action="store_true",
                   help="remove the prefixes below -p whose lease expired (runs that died), in bucket -b")
    p.add_argument("-b", "--bucket", help="--remote: the bucket")
    p.add_argument("-p", "--prefix", default="refbench", help="--remote: the -p the runs used")
    p.add_argument("--endpoint-url", help="--remote: S3 endpoint URL (default: S3_ENDPOINT_URL / AWS)")
    p.add_argument("--dry-run", action="store_true", help="--remote: report what would be removed, remove nothing")
    return p


def main(argv: list[str], clock=None) -> int:
    """`clock`: the lease.Clock that judges which leases expired (default lease.CLOCK, the server's Date)."""
    args = parser().parse_args(argv)
    if args.remote:
        return clean_remote(args, clock)
    if args.stale:
        parent = Path(args.local_path) if args.local_path else Path(tempfile.gettempdir())
        removed = sweep_stale(parent, WORKDIR_PATTERN) + sweep_stale(parent, "refbench-minio-*")
        if Path("/dev/shm").is_dir():
            removed += sweep_stale(Path("/dev/shm"))
        for d in removed:
            print(f"removed {d}")
        print(f"removed {len(removed)} directories left by killed runs")
        return EXIT_OK
    builds = Path(args.builds_dir).expanduser()
    if not builds.exists():
        print(f"nothing to remove: {builds} does not exist")
        return EXIT_OK
    if not paths.is_cache_dir(builds):
        # REFBENCH_BUILDS_DIR=$HOME must not cost anyone their home directory
        raise RefbenchError(f"{builds} was not made by refbench (it has no {paths.CACHE_MARK} file): "
                            "refusing to remove it; remove what you want by hand")
    target = builds / "fixtures" if args.fixtures_only else builds
    shutil.rmtree(target, ignore_errors=True)
    print(f"removed {target}")
    return EXIT_OK


def clean_remote(args, clock=None) -> int:
    if not args.bucket:
        raise RefbenchError("clean --remote needs -b BUCKET")
    base = lease.check_prefix(args.prefix)
    endpoint = args.endpoint_url or os.environ.get("S3_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL")
    backend = S3Backend(args.bucket, "", endpoint, None, {"S3_ENDPOINT_URL": endpoint} if endpoint else {},
                        base_prefix=base, clock=clock or lease.CLOCK)
    backend.check_bucket()
    from botocore.exceptions import BotoCoreError, ClientError
    try:
        found = backend.sweep_dead(dry_run=args.dry_run)
    except ClientError as e:
        code = e.response.get("Error", {}).get("Code", "?")
        raise RefbenchError(f"bucket {args.bucket!r}: cannot list or delete under {base}/ ({code})") from None
    except BotoCoreError as e:
        raise RefbenchError(f"bucket {args.bucket!r}: {e}") from None
    dead = [f for f in found if f.state == "expired"]
    for f in found:
        text = f.describe()
        if args.dry_run and f.state == "expired":
            text = text.replace(f", {f.removed} objects removed", ", would be removed")
        print(text)
    left = len(found) - len(dead)
    verb = "would remove" if args.dry_run else "removed"
    print(f"{verb} {len(dead)} prefixes of dead runs below s3://{args.bucket}/{base}/"
          + ("" if args.dry_run else f" ({sum(f.removed for f in dead)} objects)")
          + (f"; left {left} alone" if left else ""))
    return EXIT_OK
