"""A results file is written by the pull request's own job, so each of its strings can be hostile.
Planted in every string of a results file, links, images, raw HTML, autolinks, emphasis and a
backtick must come out of the PR comment (and the summary, and the comparison of two runs) as
plain text: rendered by a real CommonMark renderer, the hostile file gives the same markup,
token for token, as the same file with harmless strings."""
from __future__ import annotations

import copy
import html
import json
import re

from markdown_it import MarkdownIt

from factories import results_doc, times
from refbench import results as rs
from refbench.commands.comment import main as comment_main
from refbench.github import COMMENT_MARKER, neutralise
from refbench.pairing import pair_runs
from refbench.render.format import md_code
from refbench.render.markdown import render_markdown, render_pairing_md

# the first 12 characters reach the builds table's commit column (sha[:12]), so a code span there
# gets a backtick, a cell's end and a tag; the rest goes after the harmless value, kept short: the
# planted file's comment must still fit GitHub's limit with every section, to be compared
HEAD = "`x|<h1>`"
TAIL = (" <http:e.x> <h1>x</h1> <A@b.c> `c` [x](http://e.x) ![i](e.png) @u #12 *e* _u_ ~~s~~ a|b \\ <!--"
        " &commat;t &#x23;4\n# h")
# strings refbench reads as one of a few values, refused on reading when they are not
FIXED = {"schema", "verdict", "metric"}
# objects whose keys are a results file's own names (build labels, network names, API names,
# variables), renamed along with every place that names them
NAMED_KEYS = {"builds", "samples", "requests", "repo", "networks", "by_api", "env", "scoreboard"}
OWN_HTML = {"<details>", "<summary>", "</summary>", "</details>", "<sub>", "</sub>", COMMENT_MARKER}

markdown = MarkdownIt("commonmark").enable(["table", "strikethrough"])


def planted(value: str) -> str:
    """The hostile twin of a string: one-to-one, so labels still match wherever they are named."""
    return f"{HEAD}{value}{TAIL}"


def hostile(doc, key: str = ""):
    """`doc` with every string (and every name used as a key) planted, except FIXED's."""
    if isinstance(doc, str):
        return doc if key in FIXED else planted(doc)
    if isinstance(doc, list):
        return [hostile(v, f"{key}[]") for v in doc]  # a list of builds is not keyed by name
    if isinstance(doc, dict):
        return {(planted(k) if key in NAMED_KEYS else k): hostile(v, k) for k, v in doc.items()}
    return doc


def full_doc() -> dict:
    """A results document that fills every part a markdown view prints: three builds (a variant,
    two Go versions), two scenarios (a daemon mode, a network), checks that agree and that
    differ, requests, blocks, a profile, notes, a scoreboard, a stopped run."""
    labels = ("old", "new", "pr")
    doc = results_doc({("small files", "upload"): {"old": times(1.0, seed=1), "new": times(1.3, seed=2),
                                                   "pr": times(1.0, seed=3)},
                       ("small files", "remove"): {"old": times(0.2, seed=4), "new": times(0.2, seed=5),
                                                   "pr": times(0.16, seed=6)},
                       ("large file", "download"): {"old": times(0.5, seed=7), "new": times(0.6, seed=8),
                                                    "pr": times(0.5, seed=9)}}, labels=labels)
    doc["builds"][2].update(toolchain="go1.25", flags=["--fast"], env={"GOGC": "200"})
    doc["settings"].update(runs="8", warmup="1", rounds="2", multiple_testing="bh", only=["upload"])
    doc["backend"].update({"networks": {"lan": {"words": "1 ms round trip"}}, "daemon cpu": "perf",
                           "daemon restarts": "2"})
    doc.update(stopped="stopped by hand", explain_notes=["no request accounting: a user's bucket"],
               scoreboard={lab: {"geomean_vs_baseline": 1.0, "vs_fastest": 1.0 + i / 10}
                           for i, lab in enumerate(labels)})
    small, large = doc["scenarios"]
    large["daemon"] = "online"
    for st in small["steps"]:
        st["network"] = "lan"
        for lab, side in st["builds"].items():
            side["check"] = "3 objects" if st["name"] == "remove" or lab == "old" else "4 objects"
    upload = small["steps"][0]
    upload.update(check_differs=True, profile_note="no perf: not allowed here",
                  requests={lab: {"by_api": {"PutObject": 3 + i}} for i, lab in enumerate(labels)},
                  request_changes=[{"contender": "new", "name": "PutObject", "baseline_value": 3, "value": 4}],
                  repo={lab: {"num_objects": 10 + i} for i, lab in enumerate(labels)},
                  profiles=[{"baseline": "old", "contender": "new", "samples": {"old": 100, "new": 130},
                             "top": [{"function": "main.upload", "baseline_share": 0.1, "contender_share": 0.3}],
                             "stacks": [["main;main.upload", 10, 39]], "note": "no symbols in old"}])
    return doc


def markup(text: str) -> list[tuple]:
    """Every token the renderer makes of `text` but plain text: its blocks, tables, emphasis,
    code spans, links, images and raw HTML (with what that HTML is)."""
    out = []
    for tok in markdown.parse(text):
        out.append((tok.type, tok.tag))
        for child in tok.children or ():
            if child.type not in ("text", "text_special"):
                out.append((child.type, child.tag, child.content if child.type == "html_inline" else ""))
    return out


def html_of(tokens) -> list[str]:
    return [t.content.strip() for t in tokens if t.type in ("html_block", "html_inline")]


def check_stays_text(clean: str, bad: str) -> None:
    """`bad` (rendered from the planted file) has the markup of `clean` (from the harmless one),
    no link or image at all, no raw HTML but refbench's own tags, and holds the planted text."""
    tokens = markdown.parse(bad)
    inline = [c for t in tokens for c in (t.children or ())]
    assert not [t for t in inline if t.type in ("link_open", "image")], \
        f"a field became a link or an image: {[t.attrs for t in inline if t.type in ('link_open', 'image')]}"
    html = [h for t in tokens if t.type == "html_block" for h in re.findall(r"<[^>]*>", t.content)] \
        + [t.content for t in inline if t.type == "html_inline"]
    assert set(html) <= OWN_HTML, f"raw HTML from a field: {sorted(set(html) - OWN_HTML)}"
    assert markup(bad) == markup(clean), "a field changed the document's markup"
    shown = markdown.render(bad).replace("\u200b", "")
    assert "&lt;h1&gt;x&lt;/h1&gt;" in shown and "[x](http://e.x)" in shown


def commit_spans(text: str, doc: dict) -> None:
    """Each build's commit reads whole in one code span: a backtick or `|` in it ended nothing."""
    codes = [c.content.replace("\u200b", "") for t in markdown.parse(text) for c in (t.children or ())
             if c.type == "code_inline"]
    for b in doc["builds"]:
        assert md_code(b["sha"][:12]) in codes, f"{b['sha'][:12]!r} broke out of its code span: {codes}"


def write(doc: dict, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def comment(doc: dict, where) -> str:
    """The body `refbench comment --dry-run` writes (what would be posted)."""
    path = write(doc, where / "results.json")
    assert comment_main([str(path), "--dry-run"]) == 0
    return (where / "pr-comment.md").read_text()


def test_every_string_of_a_results_file_stays_text_in_the_pr_comment(tmp_path):
    doc = full_doc()
    bad_doc = hostile(copy.deepcopy(doc))
    clean, bad = comment(doc, tmp_path / "clean"), comment(bad_doc, tmp_path / "bad")
    assert "Left out to fit" not in bad, "the planted file's comment must keep every section, to be compared"
    check_stays_text(clean, bad)
    commit_spans(bad, bad_doc)
    assert "<h1" not in markdown.render(bad) and not re.search(r"@[A-Za-z0-9]|#\d|GH-\d|://|www\.", bad)
    # and what a reader sees once entities are decoded (after every net: the review of issue 54, F2)
    seen = html.unescape(re.sub(r"<[^>]*>", "", markdown.render(bad)))
    assert not re.search(r"@[A-Za-z0-9]|#\d|GH-\d|://|www\.", seen), re.findall(r".{12}[@#].{6}", seen)[:5]
    assert "&commat;t" in seen and "&#x23;4" in seen  # shown as written


def test_every_string_of_a_results_file_stays_text_in_the_summary(tmp_path):
    doc = full_doc()
    bad_doc = hostile(copy.deepcopy(doc))
    clean, bad = (render_markdown(rs.load(write(d, tmp_path / f"{n}.json")), "md")
                  for n, d in (("clean", doc), ("bad", bad_doc)))
    check_stays_text(clean, bad)
    commit_spans(bad, bad_doc)


def test_every_string_of_a_results_file_stays_text_in_a_comparison_of_two_runs():
    doc = full_doc()
    clean, bad = (render_pairing_md(pair_runs(r, r), planted("old.json"), planted("new.json"))
                  for r in (rs.Results.from_json(d) for d in (doc, hostile(copy.deepcopy(doc)))))
    check_stays_text(clean, bad)


def test_neutralise_breaks_autolinks_and_raw_html_and_keeps_refbenchs_own_tags():
    for attack in ("<http:evil.example>", "<HTTPS://evil.example/x>", "<a+b.c-d:x>", "<A@b.c>", "<0@b.c>",
                   "<h1>x</h1>", "<img src=x>", "</p>", "<!-- hide", "<?php", "<![CDATA[x]]>", "<!DOCTYPE x>",
                   "\\<h1>", "&commat;team", "&#x40;u", "&num;3", "&#x23;4"):
        made = markdown.parse(neutralise(f"text {attack} text"))
        inline = [c for t in made for c in (t.children or ())]
        assert not [t for t in inline if t.type in ("link_open", "html_inline")] and not html_of(made), attack
        seen = html.unescape(re.sub(r"<[^>]*>", "", markdown.render(neutralise(f"text {attack} text"))))
        assert not re.search(r"@[A-Za-z0-9]|#\d", seen), (attack, seen)
        shown = neutralise(attack).replace("\u200b", "")
        # the same text; an entity's & is written &amp;, so the reader sees the entity as typed
        assert shown == (attack.replace("&", "&amp;") if "&" in attack else attack), "what a reader sees is the same"
        if "&" in attack:
            assert attack in seen
    own = f"{COMMENT_MARKER}\n<details><summary>Builds</summary>\n\nx\n\n</details>\n\n<sub>p <0.001</sub>\n"
    assert neutralise(own) == own


def test_a_refusal_quoting_a_commenters_word_pings_nobody():
    """The /bench refusal quotes the commenter's word with repr, which doubles a backslash: a
    `\\&commat;team` reached GitHub as an escaped backslash and a live entity, decoded into
    `@team` (the re-reading of issue 54's fixes, N4). An even run of backslashes before an entity's
    & leaves it live, and neutralise writes it &amp; too."""
    from refbench.github import refusal_body
    for word in ("\\&commat;octo-org/team", "\\\\&num;1", "&#x40;u", "\\&commat;x"):
        body = refusal_body(f"not a /bench command: {word!r}")
        seen = html.unescape(re.sub(r"<[^>]*>", "", markdown.render(body)))
        assert not re.search(r"@[A-Za-z0-9]|#\d", seen), (word, seen)

