"""The docs cannot go stale unnoticed: every relative link in README.md and docs/*.md reaches a
file (and a heading, for `#anchor`), every `refbench` / `./bench.py` command shown in a shell code
block parses with the real parsers, and docs/architecture.md describes every module of refbench/.

Fast and offline: nothing here runs a command, it only parses it (issue 38)."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from refbench import commands
from refbench.commands import bisect as bisect_cmd, nightly as nightly_cmd
from refbench.commands._args import bind_flag_values
from refbench.commands._run_options import run_parser

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
ARCHITECTURE = DOCS / "architecture.md"
PACKAGE = ROOT / "refbench"


def doc_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


# ---- markdown, as GitHub reads it ------------------------------------------------------------

FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")


def split_fences(text: str) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """The lines outside code blocks, and each code block as (language, lines)."""
    prose, blocks, current, lang, fence = [], [], None, "", ""
    for line in text.splitlines():
        m = FENCE.match(line)
        if current is None and m:
            current, lang, fence = [], m.group(3).lower(), m.group(2)
        elif current is not None and line.strip().startswith(fence[:3]) and line.strip().strip(fence[0]) == "":
            blocks.append((lang, current))
            current = None
        elif current is not None:
            current.append(line)
        else:
            prose.append(line)
    return prose, blocks


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text lower-cased, everything but letters,
    digits, spaces, hyphens and underscores dropped, spaces made hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images: their text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor GitHub makes for the headings of a markdown file (repeats get -1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    prose, _ = split_fences(path.read_text(encoding="utf-8"))
    for line in prose:
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)")


def links(path: Path) -> list[str]:
    """The link targets of a file's prose (inline links and reference definitions; inline code
    spans, which GitHub does not render as links, left out)."""
    prose, _ = split_fences(path.read_text(encoding="utf-8"))
    out = []
    for line in prose:
        line = re.sub(r"`[^`]*`", "", line)
        out += LINK.findall(line)
        m = REFERENCE_DEF.match(line)
        if m:
            out.append(m.group(1))
    return out


def display(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def broken_link(source: Path, target: str) -> str | None:
    """Why a relative link does not reach its file or heading, or None when it does (links with a
    scheme, such as https: or mailto:, are not the repository's to check)."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
        return None
    where, _, anchor = target.partition("#")
    file = (source.parent / where).resolve() if where else source
    name = display(source)
    if not file.exists():
        return f"{name}: link {target!r}: no file {file}"
    if anchor and file.suffix == ".md" and anchor not in anchors(file):
        return f"{name}: link {target!r}: no heading with anchor #{anchor} in {display(file)}"
    return None


def test_docs_exist_and_readme_is_short():
    assert DOCS.is_dir() and ARCHITECTURE.exists()
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= 300, f"README.md has {lines} lines; the reference belongs in docs/"


def test_every_relative_link_reaches_its_file_and_heading():
    problems = [p for f in doc_files() for t in links(f) if (p := broken_link(f, t))]
    assert not problems, "\n".join(problems)


def test_every_guide_is_linked_from_the_readme():
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in links(README)}
    orphans = [g.name for g in sorted(DOCS.glob("*.md")) if g.resolve() not in linked]
    assert not orphans, f"README.md's contents do not link {orphans}"


def test_link_checker_sees_broken_links(tmp_path):
    """The checker itself: a missing file and a missing heading are caught, GitHub's slugs match."""
    page = tmp_path / "page.md"
    page.write_text("# The cache's threat model\n## `--variant` NAME=REF, again\n## Exit codes\n## Exit codes\n"
                    "```sh\n# not a heading\n```\n[a](page.md#exit-codes-1) [b](nope.md) [c](#not-here) "
                    "[d](https://example.com/x) `[e](nope2.md)`\n", encoding="utf-8")
    assert anchors(page) == {"the-caches-threat-model", "--variant-nameref-again", "exit-codes", "exit-codes-1"}
    assert links(page) == ["page.md#exit-codes-1", "nope.md", "#not-here", "https://example.com/x"]
    broken = [t for t in links(page) if broken_link(page, t)]
    assert broken == ["nope.md", "#not-here"]


# ---- commands shown in code blocks -----------------------------------------------------------

SHELL_LANGS = {"sh", "bash", "console", "shell", "shell-session"}
PROGRAMS = {"refbench", "./bench.py", "bench.py"}
OPERATORS = {"&&", "||", "|", ";", "&"}
REDIRECTS = {">", ">>", "<", ">&", "2>", "&>"}


def shell_commands(lines: list[str]) -> list[list[str]]:
    """The refbench commands of a code block, each as argv after the program: `$ ` prompts,
    comments, `VAR=value` prefixes, redirections and the other commands of a `&&` / `|` chain
    dropped; `[-p PREFIX]` (an optional part, as usage lines write it) kept as `-p PREFIX`."""
    out, joined = [], []
    for line in lines:
        if joined and joined[-1].endswith("\\"):
            joined[-1] = joined[-1][:-1] + " " + line
        else:
            joined.append(line)
    for line in joined:
        line = re.sub(r"^\s*\$\s+", "", line)
        lex = shlex.shlex(line, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        lex.commenters = "#"
        try:
            tokens = list(lex)
        except ValueError:
            continue
        command: list[str] = []
        for tok in [*tokens, ";"]:
            if tok in OPERATORS:
                while command and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", command[0]):
                    command.pop(0)
                if command and command[0] in PROGRAMS:
                    out.append(unbracket(command[1:]))
                command = []
            else:
                command.append(tok)
        # a redirection's target is not an argument
    return [[a for i, a in enumerate(c) if a not in REDIRECTS and (i == 0 or c[i - 1] not in REDIRECTS)]
            for c in out]


def unbracket(argv: list[str]) -> list[str]:
    out = []
    for a in argv:
        if a in ("...", "…", "[...]", "[…]"):
            continue
        out.append(a[1:] if a.startswith("[") and len(a) > 1 else a)
        out[-1] = out[-1][:-1] if out[-1].endswith("]") and "[" not in out[-1] else out[-1]
    return out


def parse(argv: list[str]) -> None:
    """Parse argv as the command line would, without running anything: the subcommand's own
    parser (nightly and bisect also parse what they pass through to the main command's), else
    the main command's. A bad flag raises SystemExit (argparse) or RefbenchError."""
    if argv and argv[0] in commands.COMMANDS:
        name, rest = argv[0], argv[1:]
        if name == "bisect":
            bisect_cmd.parse(rest)
        elif name == "nightly":
            nightly_cmd.parse(rest)
        else:
            module = __import__(f"refbench.commands.{name}", fromlist=["parser"])
            module.parser().parse_args(bind_flag_values(rest))
    else:
        run_parser().parse_args(bind_flag_values(argv))


def shown_commands() -> list[tuple[str, list[str]]]:
    out = []
    for f in doc_files():
        _, blocks = split_fences(f.read_text(encoding="utf-8"))
        for lang, lines in blocks:
            if lang in SHELL_LANGS:
                out += [(f.relative_to(ROOT).as_posix(), argv) for argv in shell_commands(lines)]
    return out


def test_every_subcommand_has_a_parser():
    for name in commands.COMMANDS:
        if name not in ("bisect", "nightly"):
            module = __import__(f"refbench.commands.{name}", fromlist=["parser"])
            assert callable(getattr(module, "parser", None)), f"refbench.commands.{name} has no parser()"


def test_the_docs_show_commands():
    shown = shown_commands()
    assert len(shown) >= 30, shown
    assert {a[0] for _, a in shown if a and a[0] in commands.COMMANDS} >= {
        "report", "compare", "nightly", "bisect", "calibrate", "merge", "build", "clean"}


@pytest.mark.parametrize("where,argv", shown_commands(), ids=lambda v: v if isinstance(v, str) else " ".join(v)[:60])
def test_a_shown_command_parses(where, argv, capsys):
    try:
        parse(argv)
    except SystemExit as e:
        pytest.fail(f"{where}: `{shlex.join(argv)}` does not parse (exit {e.code}): {capsys.readouterr().err.strip()}")
    except Exception as e:  # noqa: BLE001 — any refusal names the command shown
        pytest.fail(f"{where}: `{shlex.join(argv)}` is refused: {e}")


def test_the_command_checker_sees_a_bad_flag():
    lines = ["$ ./bench.py -s OLD NEW --no-such-flag   # a comment",
             "cd x && FOO=1 refbench report results.json --html r.html > out 2>&1",
             "refbench clean --remote -b BUCKET [-p PREFIX] [--dry-run]",
             "refbench: error: not a command"]
    cmds = shell_commands(lines)
    assert cmds == [["-s", "OLD", "NEW", "--no-such-flag"], ["report", "results.json", "--html", "r.html", "2"],
                    ["clean", "--remote", "-b", "BUCKET", "-p", "PREFIX", "--dry-run"]]
    with pytest.raises(SystemExit):
        parse(cmds[0])
    parse(cmds[2])
    with pytest.raises(SystemExit):
        parse(["compare", "a.json", "b.json", "--no-such-flag"])
    with pytest.raises(SystemExit):
        parse(["bisect", "v1", "v2", "--only", "x", "--no-such-flag"])


def test_the_readme_documents_the_test_command_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^make test$", ci, re.M), ".ci/run no longer calls `make test`"
    _, blocks = split_fences(README.read_text(encoding="utf-8"))
    shown = [line for lang, lines in blocks if lang in SHELL_LANGS for line in lines]
    assert any(line.split("#")[0].strip() == "make test" for line in shown), "README.md does not show `make test`"
    assert any(line.split("#")[0].strip() == "make demo" for line in shown), "README.md does not show `make demo`"


# ---- the architecture page names every module ------------------------------------------------

def modules() -> set[str]:
    return {p.relative_to(ROOT).as_posix() for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}


def described(text: str) -> dict[str, str]:
    """The module index of docs/architecture.md: table rows `| \\`refbench/x.py\\` | what it is for |`."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^\|\s*`(refbench/[\w/]+\.py)`\s*\|(.*)\|\s*$", line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def module_index_problems(on_disk: set[str], text: str) -> list[str]:
    index = described(text)
    problems = [f"{m}: not described in docs/architecture.md's module index" for m in sorted(on_disk - set(index))]
    problems += [f"{m}: in docs/architecture.md's module index, but no such file" for m in sorted(set(index) - on_disk)]
    problems += [f"{m}: described in fewer than three words" for m, d in index.items() if len(d.split()) < 3]
    return problems


def test_architecture_describes_every_module():
    problems = module_index_problems(modules(), ARCHITECTURE.read_text(encoding="utf-8"))
    assert not problems, "\n".join(problems)


def test_a_module_added_without_a_line_fails(tmp_path):
    text = ARCHITECTURE.read_text(encoding="utf-8")
    added = modules() | {"refbench/backends/new_backend.py"}
    assert module_index_problems(added, text) == [
        "refbench/backends/new_backend.py: not described in docs/architecture.md's module index"]
