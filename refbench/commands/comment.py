"""`bench.py comment`: post (or update) the summary as a pull-request comment, parse a `/bench`
comment into the arguments it may pass, or check a `/bench` before anything runs: the commenter's
write access and the head it names (the REST client, the allow-list and the check are
refbench.github)."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .. import results as rs
from ..errors import EXIT_ERROR, EXIT_OK, RefbenchError, writing
from ..github import (DEFAULT_API, DEFAULT_BOT_LOGIN, TRUSTED_ASSOCIATIONS, REPO_NAME, GitHub, GitHubError, Refused,
                      accepted_by_check, check_bench, comment_body, parse_bench_command, post_or_update,
                      pull_request_of, refusal_body)
from ..render.markdown import render_markdown
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
    p.add_argument("--head-sha", help="the commit a workflow_run ran on: the PR is looked up from it (with "
                   "--head-repo and --head-branch) and must be --pr, else nothing is posted")
    p.add_argument("--head-repo", help="with --head-sha: OWNER/NAME of the PR's head repository (a fork)")
    p.add_argument("--head-branch", help="with --head-sha: the PR's head branch")
    p.add_argument("--pinned-sha", help="the PR's head commit when /bench was accepted (the commit that was "
                   "benchmarked); nothing is posted if the PR has moved on since")
    p.add_argument("--dry-run", action="store_true", help="write and print the body; do not call the API")
    p.add_argument("--parse-command", action="store_true",
                   help="read a /bench comment on stdin and print its allowed arguments, one per line")
    p.add_argument("--author-association", help="with --parse-command or --check-command: refuse unless OWNER, "
                   "MEMBER or COLLABORATOR (a first filter only: --check-command asks the API for write access)")
    p.add_argument("--check-command", action="store_true",
                   help="read a /bench comment on stdin and check it through the API before anything runs: the "
                   "commenter (--commenter) has write access or more, and it names PR --pr's head as it is now "
                   "(`/bench --head SHA`); prints its allowed arguments, one per line, and writes 'BASE HEAD' to "
                   "--refs-out; refused: exit 2 with the reason")
    p.add_argument("--accepted-base", help="with --check-command in the job that builds: the base commit the check "
                   "job accepted (its output); with --accepted-head, nothing is asked of the API")
    p.add_argument("--accepted-head", help="with --check-command in the job that builds: the head commit (40 hex "
                   "digits) the check job accepted; the comment must name exactly it, and the PR's head is not "
                   "read again, so a push after the check changes nothing that is built")
    p.add_argument("--commenter", help="with --check-command: the login that wrote the comment")
    p.add_argument("--refs-out", help="with --check-command: the file that gets the PR's base and head commits")
    p.add_argument("--reply", action="store_true",
                   help="with --check-command: a refused /bench gets a reply on the PR saying why (a write token)")
    return p


def api(args: argparse.Namespace, say_where: str = "") -> tuple[GitHub, str]:
    """The REST client and OWNER/NAME from the options and the environment (GITHUB_TOKEN,
    GITHUB_API_URL, GITHUB_REPOSITORY); `say_where` ends each error (where the body was kept)."""
    repo = args.repo or os.environ.get("GITHUB_REPOSITORY", "")
    if not REPO_NAME.fullmatch(repo):
        raise RefbenchError(f"--repo must be OWNER/NAME, got {repo!r}{say_where}")
    if not args.pr or args.pr < 1:
        raise RefbenchError(f"--pr must be a pull-request number{say_where}")
    token = os.environ.get("GITHUB_TOKEN", "")
    if not token:
        raise RefbenchError(f"GITHUB_TOKEN is not set{say_where}")
    return GitHub(token, args.api_url or os.environ.get("GITHUB_API_URL") or DEFAULT_API), repo


def check_command(args: argparse.Namespace) -> int:
    """--check-command: a /bench judged before anything of the pull request runs; with
    --accepted-base/--accepted-head, the one the check job accepted, taken as it was."""
    if args.accepted_base is not None or args.accepted_head is not None:
        accepted = accepted_by_check(sys.stdin.read(), args.accepted_base or "", args.accepted_head or "")
    else:
        if not args.commenter:
            raise RefbenchError("--check-command needs --commenter (the login that wrote the comment)")
        gh, repo = api(args)
        try:
            accepted = check_bench(gh, repo, args.pr, args.commenter, sys.stdin.read())
        except Refused as e:
            if args.reply:
                gh.create_comment(repo, args.pr, refusal_body(str(e)))
            raise
    if args.refs_out:
        with writing(Path(args.refs_out), "the /bench commits"):
            Path(args.refs_out).write_text(f"{accepted.base} {accepted.head}\n")
    for a in accepted.argv:
        print(a)
    who = f" from {args.commenter}" if args.commenter else " by the check job"
    print(f"refbench: /bench accepted{who}: {accepted.base[:12]} vs {accepted.head[:12]}", file=sys.stderr)
    return EXIT_OK


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if (args.parse_command or args.check_command) and args.author_association \
            and args.author_association.upper() not in TRUSTED_ASSOCIATIONS:
        raise RefbenchError(f"/bench is for maintainers ({', '.join(TRUSTED_ASSOCIATIONS)}); "
                            f"the commenter is {args.author_association!r}")
    if args.check_command:
        return check_command(args)
    if args.parse_command:
        for a in parse_bench_command(sys.stdin.read()):
            print(a)
        return EXIT_OK
    if not args.results:
        raise RefbenchError("give the results.json to post (see bench.py comment --help)")
    results = rs.load(args.results)
    body = comment_body(render_markdown(results, "github"), args.link)
    out = Path(args.body_out) if args.body_out else Path(args.results).resolve().parent / "pr-comment.md"
    with writing(out, "the comment body"):
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(body)
    if args.dry_run:
        sys.stdout.write(body)
        print(f"refbench: wrote the comment body to {out} (dry run: nothing posted)", file=sys.stderr)
        return EXIT_OK
    gh, repo = api(args, f" (the comment body is in {out})")
    login = args.bot_login or os.environ.get("REFBENCH_BOT_LOGIN") or DEFAULT_BOT_LOGIN
    try:
        if args.head_sha is not None:
            found = pull_request_of(gh, repo, args.head_sha, args.head_repo or "", args.head_branch or "")
            if found != args.pr:
                raise GitHubError(f"refusing to post: the results say PR #{args.pr}, but the run's head commit "
                                  f"{args.head_sha[:12]} is PR #{found}'s")
        if args.pinned_sha is not None:
            now = ((gh.pull(repo, args.pr).get("head") or {}).get("sha")) or "?"
            if now != args.pinned_sha:
                raise GitHubError(f"refusing to post: PR #{args.pr} moved from {args.pinned_sha[:12]} (benchmarked) "
                                  f"to {now[:12]} since /bench was accepted")
        action, comment = post_or_update(gh, repo, args.pr, body, login)
    except GitHubError as e:
        print(f"refbench: error: {e} (the comment body is in {out})", file=sys.stderr)
        return EXIT_ERROR
    url = (comment or {}).get("html_url") or f"comment {(comment or {}).get('id')}"
    print(f"refbench: {action} the comment on {repo}#{args.pr}: {url}", file=sys.stderr)
    return EXIT_OK
