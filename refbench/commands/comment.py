"""`bench.py comment`: post (or update) the summary as a pull-request comment, or parse a `/bench`
comment into the arguments it may pass (the REST client and the allow-list are refbench.github)."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .. import results as rs
from ..errors import EXIT_ERROR, EXIT_OK, RefbenchError
from ..github import (DEFAULT_API, DEFAULT_BOT_LOGIN, TRUSTED_ASSOCIATIONS, REPO_NAME, GitHub, GitHubError, comment_body,
                      parse_bench_command, post_or_update)
from ._args import Parser


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="bench.py comment", description="Post (or update) the refbench summary as a pull-request "
                "comment, or parse a /bench comment. Token from GITHUB_TOKEN, API from GITHUB_API_URL.")
    p.add_argument("results", nargs="?", help="results.json of the run to report")
    p.add_argument("--repo", help="OWNER/NAME (default: GITHUB_REPOSITORY)")
    p.add_argument("--pr", type=int, help="pull-request number")
    p.add_argument("--api-url", default=None, help=f"REST API base URL (default: GITHUB_API_URL or {DEFAULT_API})")
    p.add_argument("--body-out", help="also write the comment body here (default: pr-comment.md beside results.json)")
    p.add_argument("--link", help="a URL to add at the end (e.g. the workflow run)")
    p.add_argument("--bot-login", default=None,
                   help=f"the login the comment is posted as; only its own marked comment is updated "
                        f"(default: REFBENCH_BOT_LOGIN or {DEFAULT_BOT_LOGIN})")
    p.add_argument("--dry-run", action="store_true", help="write and print the body; do not call the API")
    p.add_argument("--parse-command", action="store_true",
                   help="read a /bench comment on stdin and print its allowed arguments, one per line")
    p.add_argument("--author-association", help="with --parse-command: refuse unless OWNER, MEMBER or COLLABORATOR")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if args.parse_command:
        if args.author_association is not None and args.author_association.upper() not in TRUSTED_ASSOCIATIONS:
            raise RefbenchError(f"/bench is for maintainers ({', '.join(TRUSTED_ASSOCIATIONS)}); "
                                f"the commenter is {args.author_association!r}")
        for a in parse_bench_command(sys.stdin.read()):
            print(a)
        return EXIT_OK
    if not args.results:
        raise RefbenchError("give the results.json to post (see bench.py comment --help)")
    results = rs.load(args.results)
    body = comment_body(results, args.link)
    out = Path(args.body_out) if args.body_out else Path(args.results).resolve().parent / "pr-comment.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(body)
    if args.dry_run:
        sys.stdout.write(body)
        print(f"refbench: wrote the comment body to {out} (dry run: nothing posted)", file=sys.stderr)
        return EXIT_OK
    repo = args.repo or os.environ.get("GITHUB_REPOSITORY", "")
    if not REPO_NAME.match(repo):
        raise RefbenchError(f"--repo must be OWNER/NAME, got {repo!r} (the comment body is in {out})")
    if not args.pr or args.pr < 1:
        raise RefbenchError(f"--pr must be a pull-request number (the comment body is in {out})")
    token = os.environ.get("GITHUB_TOKEN", "")
    if not token:
        raise RefbenchError(f"GITHUB_TOKEN is not set (the comment body is in {out})")
    api = args.api_url or os.environ.get("GITHUB_API_URL") or DEFAULT_API
    login = args.bot_login or os.environ.get("REFBENCH_BOT_LOGIN") or DEFAULT_BOT_LOGIN
    try:
        action, comment = post_or_update(GitHub(token, api), repo, args.pr, body, login)
    except GitHubError as e:
        print(f"refbench: error: {e} (the comment body is in {out})", file=sys.stderr)
        return EXIT_ERROR
    url = (comment or {}).get("html_url") or f"comment {(comment or {}).get('id')}"
    print(f"refbench: {action} the comment on {repo}#{args.pr}: {url}", file=sys.stderr)
    return EXIT_OK
