"""`bench.py build -s REF [REF ...] --out DIR`: build once, share the binaries.

For a sharded run on CI: one job builds every ref and uploads DIR as an artifact; each
shard downloads it and runs with `--builds-dir DIR`, which reuses a binary only when its SHA-256
is the one recorded when it was built (the cache key stays commit + Go toolchain + build command;
give the shards the same --go, default: what each ref's go.mod asks for).
DIR/refbench-builds.json lists the refs, their commits and hashes; pass the commits (not moving
branch names) to the shards, so every shard compares the same code.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from .. import builds as bl, paths, runenv
from ._args import Parser, add_go_arg
from ..config import load_config
from ..pipeline import RunRequest
from ..errors import EXIT_OK, RefbenchError

MANIFEST = "refbench-builds.json"


def parser() -> Parser:
    p = Parser(prog="bench.py build", description="build refs once (cached by commit + toolchain + build "
                "command) and copy the binaries to --out, for --builds-dir on other machines")
    p.add_argument("-s", "--s5cmd", "--refs", dest="refs", nargs="+", required=True, metavar="REF")
    p.add_argument("--out", required=True, metavar="DIR", help="where the binaries go (the cache's layout)")
    p.add_argument("-t", "--target", default="s5cmd")
    p.add_argument("--repo", help="origin to build from (default: the target's repo)")
    p.add_argument("--source", choices=bl.SOURCES, default="git")
    add_go_arg(p)  # the same Go as the runs that reuse the binaries: the Go is part of the cache key
    p.add_argument("--scenarios", default=str(paths.bundled_scenarios()))
    # paths.default_builds_dir: installed, that is the user's cache, not a builds/ inside site-packages
    p.add_argument("--builds-dir", default=str(paths.default_builds_dir()),
                   help="build cache to build in (default: the usual one)")
    return p


def main(argv: list[str], env: runenv.RunEnv | None = None) -> int:
    """`env`: the RunEnv whose builder builds (this machine's, runenv.real(), unless given)."""
    args = parser().parse_args(argv)
    cfg = load_config(args.scenarios)
    target = cfg.targets.get(args.target)
    if target is None:
        raise RefbenchError(f"unknown target {args.target!r} (declared in {cfg.path}: {', '.join(cfg.targets)})")
    # built as a run builds (RunEnv.builder), from --repo or the target's own origin
    request = RunRequest(refs=tuple(args.refs), target=target.name, repo=args.repo, source=args.source,
                         builds_dir=args.builds_dir)
    builder = (env or runenv.real()).builder(runenv.BuildSite(request=request, target=target))
    resolved = builder.resolve_all(args.refs, args.go or runenv.environ_go())
    out = Path(args.out).expanduser().resolve()
    entries = []
    for r, label in zip(resolved, bl.unique_labels(resolved)):
        b = builder.build(r, label)
        copied = builder.export(b, out)
        entries.append({**b.record().to_json(), "binary": str(copied.relative_to(out))})
        print(f"{label}: {r.sha} ({b.toolchain}) sha256 {b.binary_sha256} -> {copied}", file=sys.stderr)
    manifest = {"target": target.name, "repo": builder.repo_url if args.source == "git" else target.module,
                "source": args.source, "toolchain": ", ".join(dict.fromkeys(e["toolchain"] for e in entries)),
                "builds": entries}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1))
    print(" ".join(e["sha"] for e in entries))  # the commits, for `-s` on the shards
    return EXIT_OK
