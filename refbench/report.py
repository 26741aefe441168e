"""The results dict API the modules not yet on typed Results still import (cli, github, merge,
shard, nightly, history, commands/merge, commands/calibrate): load_results, write_json,
build_results, environment, cpu_model, TEMPLATES, COMMENT_MARKER, render_markdown, verdict_counts,
busy_warning, regressions, fmt_pct, fmt_p, fmt_ci and _jinja.

The views live in refbench.render and compare in refbench.compare; the view functions here take
the dict through results.Results.from_json, so their logic exists once. This module goes when its
importers switch to results.load / results.write and refbench.render."""
from __future__ import annotations

import json
import time
from pathlib import Path

from . import __version__, paths, results as rs
from .errors import RefbenchError
from .render import markdown
from .render.env import environment as _jinja_environment
from .render.format import fmt_interval, fmt_p, fmt_pct  # noqa: F401 (re-exported)
from .render.markdown import COMMENT_MARKER  # noqa: F401 (re-exported)

SCHEMA = rs.SCHEMA
SCHEMA_VERSION = rs.SCHEMA_VERSION
TEMPLATES = paths.templates_dir()  # nightly's trend page loads from here


def environment(toolchain: str | None = None) -> dict:
    return rs.environment(toolchain).to_json()


cpu_model = rs.cpu_model


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
    shape check, for readers that take only what they find (shard weights). Callers that can hold
    typed Results use results.load instead."""
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
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:  # also for check=False
        schema = data.get("schema") if isinstance(data, dict) else None
        raise RefbenchError(f"{path}: not a refbench results file (schema {schema!r})")
    if not isinstance(data.get("version", 0), int) or data.get("version", 0) > SCHEMA_VERSION:
        raise RefbenchError(f"{path}: results schema version {data.get('version')!r} is newer than this "
                            f"refbench reads ({SCHEMA_VERSION}); upgrade refbench")
    if check:
        rs.Results.from_json(data, str(path))  # the one shape check: raises naming the file and the part
    return data


def build_results(*, target: dict, builds: list[dict], backend: dict, settings: dict, scenarios: list[dict],
                  timing: dict, env: dict, scoreboard: dict | None, command_line: list[str]) -> dict:
    return {
        "schema": SCHEMA, "version": SCHEMA_VERSION, "refbench": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command_line": command_line,
        "target": target, "environment": env, "settings": settings, "builds": builds,
        "baseline": builds[0]["label"] if builds else None, "backend": backend, "scenarios": scenarios,
        "scoreboard": scoreboard, "timing": timing,
    }


# ---- the views for callers that still hold a results dict (cli, github, merge, nightly, history,
# commands/merge, commands/calibrate); each takes the dict through Results.from_json, so the
# logic lives once, in refbench.render
def _typed(results) -> rs.Results:
    return results if isinstance(results, rs.Results) else rs.Results.from_json(results)


def render_markdown(results, flavour: str = "md") -> str:
    return markdown.render_markdown(_typed(results), flavour)


def verdict_counts(results) -> dict[str, int]:
    return markdown.verdict_counts(_typed(results))


def busy_warning(results) -> str | None:
    return markdown.busy_warning(_typed(results).environment)


def regressions(results) -> list[tuple[str, str, dict]]:
    """(scenario, step, comparison as stored) of every comparison that got slower."""
    return [(sc, st, c.to_json()) for sc, st, c in markdown.regressions(_typed(results))]


def fmt_ci(c: dict) -> str:
    """A stored comparison's 95% interval (nightly prints it from the results dict)."""
    return fmt_interval(c.get("ci_low"), c.get("ci_high"))


def _jinja():
    """The markdown Jinja environment (commands/calibrate renders calibrate.md.j2 with it)."""
    return _jinja_environment("markdown")
