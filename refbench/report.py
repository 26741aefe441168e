"""results.json, the machine-readable truth: reading, writing, the machine it ran on.

The views moved to refbench.render (markdown, html, csv) and compare to refbench.compare; their
names are re-exported at the end for the modules that still import them from here."""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

from . import __version__, paths, results
from .stats import VERDICTS

SCHEMA = "refbench/results"
SCHEMA_VERSION = 1
TEMPLATES = paths.templates_dir()  # prefer paths.template_loader()


def environment(toolchain: str | None = None) -> dict:
    return results.environment(toolchain).to_json()


cpu_model = results.cpu_model


def write_json(results: dict, path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(results, indent=1))
    tmp.replace(path)


def load_results(path: Path, check: bool = True) -> dict:
    """Read a results.json of this or an older schema version. Every reader goes through here, so a
    file that cannot be read, or lacks what the views rely on, is one RefbenchError naming the file
    and the part that is wrong — never a traceback from deep inside a view. check=False skips the
    views' shape check, for readers that take only what they find (shard weights)."""
    from .errors import RefbenchError
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise RefbenchError(f"{path}: no such results file") from None
    except IsADirectoryError:
        raise RefbenchError(f"{path}: is a directory, not a results file") from None
    except OSError as e:
        raise RefbenchError(f"{path}: cannot read: {e.strerror or e}") from None
    except ValueError as e:
        raise RefbenchError(f"{path}: not a refbench results file ({e})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        schema = data.get("schema") if isinstance(data, dict) else None
        raise RefbenchError(f"{path}: not a refbench results file (schema {schema!r})")
    if not isinstance(data.get("version", 0), int) or data.get("version", 0) > SCHEMA_VERSION:
        raise RefbenchError(f"{path}: results schema version {data.get('version')!r} is newer than this "
                            f"refbench reads ({SCHEMA_VERSION}); upgrade refbench")
    problem = shape_problem(data) if check else None
    if problem:
        raise RefbenchError(f"{path}: malformed results file: {problem}")
    return data


def shape_problem(data: dict) -> str | None:
    """What is missing or of the wrong kind in a results document (None: nothing), for the keys
    every view reads without a default."""
    def kind(value, want, where):
        if not isinstance(value, want):
            names = want.__name__ if isinstance(want, type) else " or ".join(w.__name__ for w in want)
            raise _Shape(f"{where} should be {names}, not {type(value).__name__}")
        return value

    def get(d, key, want, where):
        if key not in d:
            raise _Shape(f"{where or 'the file'} has no {key!r}")
        return kind(d[key], want, f"{where}.{key}" if where else key)

    try:
        get(data, "settings", dict, "")
        get(get(data, "target", dict, ""), "name", str, "target")
        for i, b in enumerate(get(data, "builds", list, "")):
            get(kind(b, dict, f"builds[{i}]"), "label", str, f"builds[{i}]")
        for i, sc in enumerate(get(data, "scenarios", list, "")):
            where = f"scenarios[{i}]"
            kind(sc, dict, where)
            get(sc, "name", str, where)
            get(sc, "fixture", dict, where)
            for j, st in enumerate(get(sc, "steps", list, where)):
                w = f"{where}.steps[{j}]"
                kind(st, dict, w)
                get(st, "name", str, w)
                for label, b in get(st, "builds", dict, w).items():
                    get(kind(b, dict, f"{w}.builds[{label!r}]"), "times", list, f"{w}.builds[{label!r}]")
                for k, c in enumerate(get(st, "comparisons", list, w)):
                    wc = f"{w}.comparisons[{k}]"
                    kind(c, dict, wc)
                    for key in ("baseline", "contender"):
                        get(c, key, str, wc)
                    if get(c, "verdict", str, wc) not in VERDICTS:
                        raise _Shape(f"{wc}.verdict {c['verdict']!r} is not one of {', '.join(VERDICTS)}")
                    get(c, "rel", (int, float), wc)
    except _Shape as e:
        return str(e)
    return None


class _Shape(Exception):
    pass


def build_results(*, target: dict, builds: list[dict], backend: dict, settings: dict, scenarios: list[dict],
                  timing: dict, env: dict, scoreboard: dict | None, command_line: list[str]) -> dict:
    return {
        "schema": SCHEMA, "version": SCHEMA_VERSION, "refbench": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command_line": command_line,
        "target": target, "environment": env, "settings": settings, "builds": builds,
        "baseline": builds[0]["label"] if builds else None, "backend": backend, "scenarios": scenarios,
        "scoreboard": scoreboard, "timing": timing,
    }


# ---- re-exports: the views' names where cli, github, merge, nightly, history, calibrate and the
# tests still import them; they move to refbench.render.* as those modules switch
from .render.env import environment as _environment  # noqa: E402
from .render.format import fmt_ci, fmt_mbps, fmt_p, fmt_pct, fmt_rate, fmt_s, md_escape  # noqa: E402,F401
from .render.markdown import (  # noqa: E402,F401
    COMMENT_MARKER, GITHUB_COMMENT_LIMIT, busy_warning, comment_size, detection_line, more_seconds, regressions,
    render_github, render_markdown, tables, throughput, verdict_counts, verdict_rows, verdict_table)


def _jinja():
    """The markdown Jinja environment (commands/calibrate renders calibrate.md.j2 with it)."""
    return _environment("markdown")
