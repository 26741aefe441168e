"""The pull-request bot: post the `--format github` summary as a PR comment, and update that same
comment on the next run (found by its hidden marker) instead of piling up new ones.

    bench.py comment --repo OWNER/NAME --pr N results.json      post or update the comment
    bench.py comment --parse-command < comment.txt              a `/bench ...` comment -> safe argv

Talks to GitHub's REST API with urllib only: token from GITHUB_TOKEN, base URL from GITHUB_API_URL
(both set in GitHub Actions; GITHUB_API_URL points at GitHub Enterprise there too). The comment
body is always written to a file first, so an API failure never loses the results.
"""
from __future__ import annotations

import http.client
import json
import re
import shlex
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from . import __version__
from .errors import RefbenchError

DEFAULT_API = "https://api.github.com"
MAX_BODY = 65536  # GitHub rejects longer comment bodies with 422
# a cheap first filter for the workflow's `if:` only: MEMBER and COLLABORATOR include people with
# read access (an outside collaborator, a member of another team); /bench needs WRITE_PERMISSIONS,
# read through the API (commenter_permission)
TRUSTED_ASSOCIATIONS = ("OWNER", "MEMBER", "COLLABORATOR")
#: a repository role that may run /bench: it runs the PR's code on the project's runners
WRITE_PERMISSIONS = ("admin", "maintain", "write")
#: who posts with a workflow's GITHUB_TOKEN; a personal token posts as its user (--bot-login)
DEFAULT_BOT_LOGIN = "github-actions[bot]"
#: the hidden first line of the bot's comment: how the next run finds the comment to update.
#: Here, not in the view: the bot looks for it, and render.markdown writes it (it imports it from here)
COMMENT_MARKER = "<!-- refbench:pr-comment -->"
REPO_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")


class GitHubError(RefbenchError):
    pass


# ---- the REST client -----------------------------------------------------------------------
class GitHub:
    """The three issue-comment endpoints the bot uses (PR comments are issue comments)."""

    def __init__(self, token: str, api_url: str = DEFAULT_API, timeout: float = 30.0):
        self.token = token
        self.api = api_url.rstrip("/")
        self.timeout = timeout
        self._opener = urllib.request.build_opener(_PinnedRedirects(_origin(self.api)))

    def _request(self, method: str, url: str, body: dict | None = None) -> tuple[object, dict]:
        if not url.startswith(("http://", "https://")):
            url = self.api + url
        elif _origin(url) != _origin(self.api):  # a Link header pointing elsewhere
            raise GitHubError(f"refusing to send the token to {_origin(url)}: the API is {_origin(self.api)}")
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method, headers={
            "Authorization": f"Bearer {self.token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": f"refbench/{__version__}",
            **({"Content-Type": "application/json"} if data is not None else {}),
        })
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                raw = resp.read()
                headers = {k.lower(): v for k, v in resp.headers.items()}
        except urllib.error.HTTPError as e:
            raise _http_error(method, url, e) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            reason = getattr(e, "reason", e)
            raise GitHubError(f"cannot reach the GitHub API at {self.api}: {reason}") from None
        try:
            return (json.loads(raw) if raw else None), headers
        except ValueError:
            raise GitHubError(f"{method} {url}: the API answered with something that is not JSON") from None

    def list_comments(self, repo: str, pr: int) -> list[dict]:
        url = f"/repos/{repo}/issues/{pr}/comments?per_page=100"
        out: list[dict] = []
        for _ in range(100):  # at most 10,000 comments
            page, headers = self._request("GET", url)
            out.extend(page or [])
            nxt = _next_link(headers.get("link", ""))
            if not nxt:
                break
            url = nxt
        return out

    def pull(self, repo: str, number: int) -> dict:
        return self._request("GET", f"/repos/{repo}/pulls/{number}")[0] or {}

    def permission(self, repo: str, login: str) -> dict:
        """The user's role on the repository: {"permission": "admin"|"write"|"read"|"none",
        "role_name": "admin"|"maintain"|"write"|"triage"|"read"|...}."""
        return self._request("GET", f"/repos/{repo}/collaborators/{urllib.parse.quote(login, safe='')}"
                                    "/permission")[0] or {}

    def pulls_with_head(self, repo: str, head_repo: str, branch: str) -> list[dict]:
        """Open and closed pull requests of `repo` whose head is `branch` of `head_repo`."""
        owner = head_repo.split("/", 1)[0]
        query = urllib.parse.urlencode({"state": "all", "head": f"{owner}:{branch}", "per_page": 100})
        return self._request("GET", f"/repos/{repo}/pulls?{query}")[0] or []

    def create_comment(self, repo: str, pr: int, body: str) -> dict:
        return self._request("POST", f"/repos/{repo}/issues/{pr}/comments", {"body": body})[0]

    def update_comment(self, repo: str, comment_id: int, body: str) -> dict:
        return self._request("PATCH", f"/repos/{repo}/issues/comments/{comment_id}", {"body": body})[0]


def _origin(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


class _PinnedRedirects(urllib.request.HTTPRedirectHandler):
    """Follow redirects on the API's own host only: urllib would carry the Authorization header
    (the token) along to whatever host a redirect names."""

    def __init__(self, origin: str):
        self.origin = origin

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        target = _origin(urllib.parse.urljoin(req.full_url, newurl))
        if target != self.origin:
            raise GitHubError(f"the API at {self.origin} redirected to {target}: not followed, the token "
                              f"goes to {self.origin} only")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _next_link(link: str) -> str | None:
    for part in link.split(","):
        m = re.match(r'\s*<([^>]+)>\s*;\s*rel="next"', part)
        if m:
            return m.group(1)
    return None


def _http_error(method: str, url: str, e: urllib.error.HTTPError) -> GitHubError:
    path = urllib.parse.urlsplit(url).path
    try:
        payload = json.loads(e.read() or b"{}")
        msg = payload.get("message", "") if isinstance(payload, dict) else ""
        errors = payload.get("errors") if isinstance(payload, dict) else None
        if errors:
            msg += " (" + "; ".join(str(x.get("message", x)) if isinstance(x, dict) else str(x) for x in errors) + ")"
    except (ValueError, OSError):
        msg = ""
    headers = {k.lower(): v for k, v in (e.headers or {}).items()}
    said = f": {msg}" if msg else ""
    code = e.code
    if code in (403, 429) and (headers.get("x-ratelimit-remaining") == "0" or "rate limit" in msg.lower()):
        when = ""
        if headers.get("x-ratelimit-reset", "").isdigit():
            reset = int(headers["x-ratelimit-reset"])
            when = (f"; it resets at {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(reset))}"
                    f" (in {max(0, reset - int(time.time()))} s)")
        elif headers.get("retry-after", "").isdigit():
            when = f"; retry after {headers['retry-after']} s"
        return GitHubError(f"GitHub API rate limit exceeded ({code} on {method} {path}){when}")
    hint = {
        401: "bad or expired credentials: check GITHUB_TOKEN",
        403: "forbidden: the token lacks permission (a workflow needs `pull-requests: write`)",
        404: "not found: check --repo and --pr (or the token cannot see that repository)",
        422: "the API rejected the request",
    }.get(code, "request failed")
    return GitHubError(f"GitHub API {code} on {method} {path}: {hint}{said}")


# ---- the comment ---------------------------------------------------------------------------
_ZW = "\u200b"  # zero-width space: invisible, but breaks what GitHub would turn into a link or ping
# A `<` before a letter, `/`, `!` or `?` opens raw HTML (a tag, a comment, a declaration) or an
# autolink (`<http:evil.example>`, `<a+b:x>`; any scheme of letters, digits and + . -), and before an
# email's local part and its `@` an email autolink (`<0@b.c>`); with a zero-width space after it,
# none is read. What refbench's own template writes keeps working: its marker, its collapsible
# blocks and its small print, in exactly the form it writes them (the fields are escaped already).
_OWN_HTML = "|".join(re.escape(tag[1:]) for tag in (
    COMMENT_MARKER, "<details>", "</details>", "<summary>", "</summary>", "<sub>", "</sub>"))
_EMAIL = r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+"  # CommonMark's email autolink, before its @
_NEUTRALISE = (
    (re.compile(r"@(?=[A-Za-z0-9])"), "@" + _ZW),             # @user, @org/team: no notification
    (re.compile(r"\]\s*\("), "]" + _ZW + "("),                 # [text](url), ![img](url)
    (re.compile(r"\]\s*\["), "]" + _ZW + "["),                 # [text][ref]
    (re.compile(r"\]:"), "]" + _ZW + ":"),                     # [ref]: //host/path, a link definition
    (re.compile(r"(?i)\bGH-(?=\d)"), "GH-" + _ZW),              # GH-123 cross-references
    (re.compile(r"(?i)(?<=[a-z])://"), ":" + _ZW + "//"),     # bare URLs GitHub autolinks
    (re.compile(r"(?i)\bwww\."), "www" + _ZW + "."),
    (re.compile(r"#(?=\d)"), "#" + _ZW),                      # #123 and owner/repo#123 cross-references
    # an entity is decoded after these nets (&commat;, &#x40;, &num;, &#x23;: a live @ or #), so none is
    # left one: its & written as &amp;, unless an odd run of backslashes escapes it (md_escape's \&);
    # an even run is backslashes escaping each other, which left the & live (a quoted '\\&commat;')
    (re.compile(r"(?<!\\)((?:\\\\)*)&(?=#?[A-Za-z0-9]+;)"), r"\1&amp;"),
    (re.compile(r"<(?!" + _OWN_HTML + r")(?=[A-Za-z/!?]|" + _EMAIL + r"@)"), "<" + _ZW),  # see _OWN_HTML
)


def neutralise(text: str) -> str:
    """Text from a results file, made inert for a comment: results come from a run of the PR's own
    code, so they can hold anything; here no @-mention pings anyone, no issue is cross-referenced
    (#123, owner/repo#123, GH-123), no link definition defines a link, no link, image or autolink
    (`<http:...>`, `<a@b.c>`) is clickable, and no raw HTML is read but refbench's own few tags.
    What a reader sees stays the same. The renderers escape each field for markdown too
    (render.format.md_escape, md_code); this is the net over the whole comment."""
    for pattern, repl in _NEUTRALISE:
        text = pattern.sub(repl, text)
    return text


def comment_body(markdown: str, link: str | None = None) -> str:
    """The comment to post from the `--format github` summary (render.markdown renders it): made
    inert (neutralise), led by the marker, the run's link added, cut to GitHub's limit."""
    body = neutralise(markdown)
    if not body.lstrip().startswith(COMMENT_MARKER):
        body = f"{COMMENT_MARKER}\n{body}"
    if link:
        body = body.rstrip("\n") + f"\n\n[Full results (workflow run and artifacts)]({link})\n"
    if len(body) > MAX_BODY:
        note = "\n\n… (truncated to fit a GitHub comment; the full summary is in the results artifact)\n"
        body = body[:MAX_BODY - len(note)] + note
    return body


def find_own_comment(comments: list[dict], login: str = DEFAULT_BOT_LOGIN) -> dict | None:
    """The bot's earlier comment: the first one written by the bot's own login whose body starts
    with the hidden marker. The login matters: anyone can paste the marker into a comment, and the
    bot must not then edit (take over) someone else's comment."""
    for c in comments:
        author = (c.get("user") or {}).get("login") if isinstance(c.get("user"), dict) else None
        if author == login and str(c.get("body") or "").lstrip().startswith(COMMENT_MARKER):
            return c
    return None


def pull_request_of(gh: GitHub, repo: str, head_sha: str, head_repo: str, branch: str) -> int:
    """The pull request whose head is `head_sha` on `branch` of `head_repo`, asked of the API: a
    workflow_run event names the commit and repository it ran on, never the pull request (for a
    fork it leaves `pull_requests` empty), and the number in the run's artifact is the PR's own
    code talking."""
    if not re.fullmatch(r"[0-9a-f]{40}", head_sha or ""):
        raise GitHubError(f"--head-sha must be a 40-digit commit SHA, got {head_sha!r}")
    if not REPO_NAME.fullmatch(head_repo or ""):
        raise GitHubError(f"--head-repo must be OWNER/NAME, got {head_repo!r}")
    found = sorted({int(p["number"]) for p in gh.pulls_with_head(repo, head_repo, branch)
                    if (p.get("head") or {}).get("sha") == head_sha
                    and ((p.get("head") or {}).get("repo") or {}).get("full_name") == head_repo})
    if len(found) != 1:
        what = "no pull request" if not found else f"{len(found)} pull requests ({found})"
        raise GitHubError(f"{what} of {repo} has head {head_sha[:12]} on {head_repo}:{branch}")
    return found[0]


def post_or_update(gh: GitHub, repo: str, pr: int, body: str,
                   login: str = DEFAULT_BOT_LOGIN) -> tuple[str, dict]:
    mine = find_own_comment(gh.list_comments(repo, pr), login)
    if mine is not None:
        return "updated", gh.update_comment(repo, int(mine["id"]), body)
    return "created", gh.create_comment(repo, pr, body)


# ---- /bench comments -----------------------------------------------------------------------
# option -> (canonical spelling, value kind); kinds: None = flag, "int:lo:hi", "frac", "name"
_ALLOWED: dict[str, tuple[str, str | None]] = {
    "--only": ("--only", "name"),
    "-r": ("-r", "int:1:200"), "--runs": ("-r", "int:1:200"),
    "-w": ("-w", "int:0:50"), "--warmup": ("-w", "int:0:50"),
    "--rounds": ("--rounds", "int:1:50"),
    "--threshold": ("--threshold", "frac"),
    "--quick": ("--quick", None),
    "--until-decided": ("--until-decided", None),
    "--budget": ("--budget", "duration"),
    "--head": ("--head", "sha"),  # the PR head the maintainer reviewed: not an option of the run (BenchCommand.head)
}
_DURATION = re.compile(r"^(?=\d)(\d{1,2}h)?(\d{1,3}m)?(\d{1,5}s?)?$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _./-]{0,99}$")
_FRAC = re.compile(r"^(0?\.\d{1,4}|\d{1,2}(\.\d{1,2})?%)$")
# the whole commit id: a prefix names whichever commit with it a PR's author pushes (12 hex digits
# collide in about 2^24 hashes each side), so only all 40 digits name what the maintainer reviewed
_SHA = re.compile(r"^[0-9a-f]{40}$")
_HEX = re.compile(r"^[0-9a-f]{1,39}$")


@dataclass(frozen=True)
class BenchCommand:
    """A /bench comment, checked: the refbench options it passes, and the head it names."""
    argv: tuple[str, ...]
    head: str | None  # `--head SHA`: the PR's head commit (all 40 hex digits) the maintainer reviewed


def parse_bench_command(body: str) -> list[str]:
    """The refbench options of a `/bench ...` PR comment (parse_bench): a normalised argv."""
    return list(parse_bench(body).argv)


def parse_bench(body: str) -> BenchCommand:
    """A `/bench ...` PR comment, checked against an allow-list.

    Only the first line starting with /bench counts; it is split like a shell would (shlex, no
    expansion of anything) and every option must be one that may pass, with a value of the
    expected shape. `--head SHA` names the commit the maintainer reviewed (check_bench builds
    that one or nothing); the rest is refbench's argv. Raises RefbenchError naming what was refused."""
    line = next((ln.strip() for ln in str(body).splitlines() if ln.strip().startswith("/bench")), None)
    if line is None:
        raise RefbenchError("no /bench command in the comment")
    rest = line[len("/bench"):]
    if rest and not rest[0].isspace():
        raise RefbenchError(f"not a /bench command: {line.split()[0]!r}")
    try:
        words = shlex.split(rest, comments=False, posix=True)
    except ValueError as e:
        raise RefbenchError(f"cannot parse the /bench arguments: {e}") from None
    argv: list[str] = []
    head = None
    i = 0
    while i < len(words):
        word = words[i]
        opt, eq, inline = word.partition("=") if word.startswith("--") else (word, "", "")
        if opt not in _ALLOWED:
            raise RefbenchError(f"/bench: {word!r} is not allowed (allowed: "
                                f"{', '.join(sorted(_ALLOWED))})")
        canon, kind = _ALLOWED[opt]
        if kind is None:
            if eq:
                raise RefbenchError(f"/bench: {opt} takes no value")
            argv.append(canon)
            i += 1
            continue
        if eq:
            value = inline
            i += 1
        else:
            if i + 1 >= len(words):
                raise RefbenchError(f"/bench: {opt} needs a value")
            value = words[i + 1]
            i += 2
        if canon == "--head":
            head = _check_value(opt, kind, value)
        else:
            argv += [canon, _check_value(opt, kind, value)]
    return BenchCommand(tuple(argv), head)


def _check_value(opt: str, kind: str, value: str) -> str:
    if kind.startswith("int:"):
        _, lo, hi = kind.split(":")
        if not re.fullmatch(r"\d{1,4}", value) or not int(lo) <= int(value) <= int(hi):
            raise RefbenchError(f"/bench: {opt} expects a whole number from {lo} to {hi}, got {value!r}")
        return str(int(value))
    if kind == "duration":
        if not _DURATION.fullmatch(value):
            raise RefbenchError(f"/bench: {opt} expects a duration like 600, 90s, 10m or 1h30m, got {value!r}")
        return value
    if kind == "sha":
        if _HEX.fullmatch(value.lower()):
            raise RefbenchError(f"/bench: {opt} expects the commit you reviewed as its full 40-hex SHA; a prefix "
                                f"({len(value)} digits) is refused, since another commit can share it")
        if not _SHA.fullmatch(value.lower()):
            raise RefbenchError(f"/bench: {opt} expects the commit you reviewed as its full 40-hex SHA, got {value!r}")
        return value.lower()
    if kind == "frac":
        if not _FRAC.fullmatch(value):
            raise RefbenchError(f"/bench: {opt} expects a fraction like 0.05 or 5%, got {value!r}")
        return value
    if not _NAME.fullmatch(value):
        raise RefbenchError(f"/bench: {opt} expects a scenario or step name (letters, digits, space, "
                            f"_ . / -), got {value!r}")
    return value


# ---- who may run /bench, and on which commit ------------------------------------------------------
class Refused(RefbenchError):
    """/bench is not run; the message is the reply's reason."""


@dataclass(frozen=True)
class Accepted:
    """A /bench that may run: the PR's base and head commits (the head is the one the comment
    names) and the refbench options it passes."""
    base: str
    head: str
    argv: tuple[str, ...]


def commenter_permission(gh: GitHub, repo: str, login: str) -> str:
    """The commenter's role on the repository as the API says it: the role name (maintain,
    triage, a custom role) where it is one of WRITE_PERMISSIONS, else the base permission (admin,
    write, read, none). A user the API does not know has none."""
    try:
        answer = gh.permission(repo, login)
    except GitHubError as e:
        if " 404 " in str(e):
            return "none"
        raise
    role, base = str(answer.get("role_name") or ""), str(answer.get("permission") or "none")
    return role if role in WRITE_PERMISSIONS else base


def check_bench(gh: GitHub, repo: str, pr: int, login: str, body: str) -> Accepted:
    """A /bench comment judged before anything of the pull request runs: its options pass the
    allow-list, the commenter has write access or more (asked of the API: an author association
    of MEMBER or COLLABORATOR includes people with read access), and the comment names the PR's
    head as it is now (`--head SHA`): what the maintainer reviewed is what is built, and a push
    after the comment is refused. Raises Refused with the reason to reply."""
    try:
        cmd = parse_bench(body)
    except RefbenchError as e:
        raise Refused(str(e)) from None
    role = commenter_permission(gh, repo, login)
    if role not in WRITE_PERMISSIONS:
        raise Refused(f"/bench builds and runs the pull request's code on this project's runners, so it needs write "
                      f"access to {repo}; {login} has {role!r}")
    pull = gh.pull(repo, pr)
    head, base = ((pull.get(k) or {}).get("sha") or "" for k in ("head", "base"))
    if not (re.fullmatch(r"[0-9a-f]{40}", head) and re.fullmatch(r"[0-9a-f]{40}", base)):
        raise GitHubError(f"the API gave PR #{pr} no head and base commits (head {head!r}, base {base!r})")
    if cmd.head is None:
        raise Refused(f"/bench names no commit, so nothing was built: name the head you reviewed, all 40 hex "
                      f"digits, e.g. `/bench --head {head}` (PR #{pr}'s head now), and a push after your comment "
                      f"is never built in its place")
    if head != cmd.head:
        raise Refused(f"PR #{pr} moved since the comment: it names {cmd.head[:12]}, the head is now {head[:12]}; "
                      f"nothing was built. Review {head[:12]}, then comment `/bench --head {head}`")
    return Accepted(base, head, cmd.argv)


def accepted_by_check(body: str, base: str, head: str) -> Accepted:
    """The /bench the check job accepted, for the job that builds it: the commits come from the
    check job's outputs (base, head), never from the API again, so a push between the two jobs
    changes nothing that is built. The comment is parsed again for its options only (the same
    allow-list), and must name exactly that head. Raises Refused when they disagree."""
    for what, sha in (("base", base), ("head", head)):
        if not _SHA.fullmatch(sha or ""):
            raise Refused(f"the /bench check gave no {what} commit (expected 40 hex digits, got {sha!r})")
    try:
        cmd = parse_bench(body)
    except RefbenchError as e:
        raise Refused(str(e)) from None
    if cmd.head != head:
        raise Refused(f"the /bench comment names {str(cmd.head)[:12]}, the check accepted {head[:12]}")
    return Accepted(base, head, cmd.argv)


def refusal_body(reason: str) -> str:
    """The reply to a /bench that is not run."""
    return neutralise(f"refbench: /bench was not run. {reason}\n")
