"""Issue 20: one test per hole a PR bot on a public repository (or a killed run) could use.

Each test is named for the hole and was written to fail on the code before the fix."""
from __future__ import annotations

import json
from pathlib import Path

from refbench.render.markdown import COMMENT_MARKER
from test_github import TOKEN, gh, post, results_file  # noqa: F401  (pytest fixtures)

ROOT = Path(__file__).resolve().parent.parent


# ---- 3: the bot's comment is the bot's -------------------------------------------------------
def test_comment_takeover_another_users_marker_comment_is_left_alone(gh, results_file):
    planted = {"id": 13, "body": f"{COMMENT_MARKER}\nI wrote the marker myself", "user": {"login": "mallory"}}
    gh.comments.append(planted)
    proc = post(gh, results_file)
    assert proc.returncode == 0, proc.stderr
    assert "created" in proc.stderr
    assert [r["method"] for r in gh.requests if r["method"] != "GET"] == ["POST"]
    assert planted["body"] == f"{COMMENT_MARKER}\nI wrote the marker myself"
    # and the next run updates the bot's own comment, not mallory's
    gh.requests.clear()
    again = post(gh, results_file)
    assert again.returncode == 0 and "updated" in again.stderr, again.stderr
    patch = [r for r in gh.requests if r["method"] == "PATCH"]
    assert len(patch) == 1 and patch[0]["path"].endswith("/issues/comments/100")
    assert planted["body"].endswith("I wrote the marker myself")
