"""Runs action.yml's composite steps as a GitHub runner would, without GitHub.

Each `run:` step runs in `bash --noprofile --norc -eo pipefail` (GitHub's `shell: bash`) with the
environment files a runner gives it: GITHUB_OUTPUT (the step's outputs, read back into
`steps.<id>.outputs`), GITHUB_ENV (variables for the later steps), GITHUB_PATH (directories put in
front of PATH for the later steps), GITHUB_STEP_SUMMARY, and GITHUB_EVENT_PATH holding the event.
`${{ }}` expressions in `if:`, `env:`, `working-directory:` and the script are evaluated over the
github, inputs, steps, env and runner contexts; `if:` defaults to success().

`uses:` steps (actions/setup-python, setup-go, cache, upload- and download-artifact) are not run:
they are recorded as skipped, and a test stands in for what they would have done (for example it
puts the artifact where download-artifact would). This is a harness for the Action's own logic,
not a re-implementation of GitHub's actions.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# ---- action.yml, read with just enough YAML for its layout ----------------------------------------
def _block(lines: list[str], start: int, indent: int) -> tuple[list[str], int]:
    """The lines after `start` indented deeper than `indent` (blank lines included)."""
    out, i = [], start + 1
    while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
        out.append(lines[i])
        i += 1
    while out and not out[-1].strip():
        out.pop()
    return out, i


def _scalar(text: str) -> str:
    text = text.split(" #", 1)[0].strip() if not text.strip().startswith(("'", '"')) else text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _mapping(lines: list[str], indent: int) -> dict:
    """A mapping at `indent` spaces: scalars, `|` blocks and nested mappings."""
    out: dict = {}
    i = 0
    while i < len(lines):
        ln = lines[i]
        if not ln.strip() or ln.lstrip().startswith("#") or len(ln) - len(ln.lstrip()) != indent:
            i += 1
            continue
        key, _, rest = ln.strip().partition(":")
        rest = rest.strip()
        body, nxt = _block(lines, i, indent)
        if rest == "|":
            out[key] = "\n".join(b[indent + 2:] for b in body) + "\n"
        elif rest == "" and body:
            out[key] = _mapping(body, indent + 2)
        else:
            out[key] = _scalar(rest)
        i = nxt
    return out


def load_action(path: Path = ROOT / "action.yml") -> tuple[dict, list[dict]]:
    """(inputs: name -> default, steps: one mapping per step)."""
    lines = path.read_text().splitlines()
    top = {ln.split(":")[0]: i for i, ln in enumerate(lines) if ln and not ln.startswith((" ", "#"))}
    inputs_block, _ = _block(lines, top["inputs"], 0)
    inputs = {k: (v.get("default", "") if isinstance(v, dict) else "") for k, v in _mapping(inputs_block, 2).items()}
    runs, _ = _block(lines, top["runs"], 0)
    at = next(i for i, ln in enumerate(runs) if ln.strip() == "steps:")
    steps, current = [], None
    for ln in runs[at + 1:]:
        if ln.startswith("    - "):
            current = [" " * 6 + ln[6:]]
            steps.append(current)
        elif current is not None:
            current.append(ln)
    return inputs, [_mapping(s, 6) for s in steps]


# ---- ${{ }} expressions ------------------------------------------------------------------------
_TOKEN = re.compile(r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>\d+)|(?P<op>\|\||&&|==|!=|!|\(|\)|,)"
                    r"|(?P<name>[A-Za-z_][A-Za-z0-9_.\-*]*))")


class Expr:
    """GitHub's expression language, the part action.yml uses: contexts, '' strings, == != ! && ||,
    and contains, fromJSON, format, startsWith, success, failure, always, cancelled."""

    def __init__(self, contexts: dict, failed: bool):
        self.contexts, self.failed = contexts, failed

    def eval(self, text: str):
        self.tokens = []
        pos = 0
        while pos < len(text.rstrip()):
            m = _TOKEN.match(text, pos)
            if not m or m.end() == pos:
                raise ValueError(f"cannot read expression {text!r} at {pos}")
            self.tokens.append((m.lastgroup, m.group(m.lastgroup)))
            pos = m.end()
        self.i = 0
        value = self._or()
        if self.i != len(self.tokens):
            raise ValueError(f"trailing tokens in {text!r}")
        return value

    def _peek(self):
        return self.tokens[self.i] if self.i < len(self.tokens) else (None, None)

    def _take(self, op=None):
        tok = self._peek()
        if op is not None and tok[1] != op:
            raise ValueError(f"expected {op!r}, got {tok[1]!r}")
        self.i += 1
        return tok

    def _or(self):  # a || b: a if a is truthy, else b
        return self._chain("||", self._and, lambda a, b: a if _truthy(a) else b)

    def _and(self):  # a && b: b if a is truthy, else a
        return self._chain("&&", self._cmp, lambda a, b: b if _truthy(a) else a)

    def _chain(self, op, operand, combine):
        left = operand()
        while self._peek()[1] == op:
            self._take()
            left = combine(left, operand())
        return left

    def _cmp(self):
        left = self._unary()
        while self._peek()[1] in ("==", "!="):
            op = self._take()[1]
            right = self._unary()
            same = _loose(left) == _loose(right)
            left = same if op == "==" else not same
        return left

    def _unary(self):
        if self._peek()[1] == "!":
            self._take()
            return not _truthy(self._unary())
        return self._atom()

    def _atom(self):
        kind, text = self._take()
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if kind == "num":
            return int(text)
        if text == "(":
            v = self._or()
            self._take(")")
            return v
        if kind == "name" and self._peek()[1] == "(":
            self._take("(")
            args = []
            while self._peek()[1] != ")":
                args.append(self._or())
                if self._peek()[1] == ",":
                    self._take()
            self._take(")")
            return self._call(text, args)
        if kind == "name":
            if text in ("true", "false"):
                return text == "true"
            if text == "null":
                return None
            value = self.contexts
            for part in text.split("."):
                value = value.get(part) if isinstance(value, dict) else None
            return value
        raise ValueError(f"unexpected {text!r}")

    def _call(self, name: str, args: list):
        name = name.lower()
        if name == "success":
            return not self.failed
        if name == "failure":
            return self.failed
        if name == "always":
            return True
        if name == "cancelled":
            return False
        if name == "fromjson":
            return json.loads(args[0])
        if name == "contains":
            hay, needle = args
            if isinstance(hay, list):
                return any(_loose(x) == _loose(needle) for x in hay)
            return str(needle).lower() in str(hay or "").lower()
        if name == "startswith":
            return str(args[0] or "").lower().startswith(str(args[1]).lower())
        if name == "format":
            return re.sub(r"\{(\d+)\}", lambda m: _text(args[1 + int(m.group(1))]), args[0])
        raise ValueError(f"function {name}() is not supported by the harness")


def _truthy(v) -> bool:
    return v not in (None, False, 0, "")


def _loose(v):
    return v.lower() if isinstance(v, str) else v


def _text(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    return str(v)


def substitute(text: str, expr: Expr) -> str:
    return re.sub(r"\$\{\{(.*?)\}\}", lambda m: _text(expr.eval(m.group(1))), text)


# ---- the environment files ---------------------------------------------------------------------
def read_env_file(path: Path) -> dict[str, str]:
    """`name=value` lines and `name<<DELIM` ... `DELIM` blocks, as GITHUB_OUTPUT and GITHUB_ENV hold."""
    out: dict[str, str] = {}
    lines = path.read_text().splitlines() if path.exists() else []
    i = 0
    while i < len(lines):
        ln = lines[i]
        if "<<" in ln and ("=" not in ln or ln.index("<<") < ln.index("=")):
            name, delim = ln.split("<<", 1)
            j = lines.index(delim, i + 1)
            out[name] = "\n".join(lines[i + 1:j])
            i = j + 1
            continue
        if "=" in ln:
            name, value = ln.split("=", 1)
            out[name] = value
        i += 1
    return out


@dataclass
class StepRun:
    name: str
    outcome: str  # "success", "failure", "skipped (uses: X)", "skipped (if: ...)"
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0  # the step's wall time (benchmarks/bot_answer.py prints it)


@dataclass
class Runner:
    """One job of the composite action: `run(inputs)` runs every step in order."""

    tmp: Path
    event_name: str
    event: dict
    workspace: Path
    api_url: str = "https://api.github.invalid"
    repository: str = "acme/tool"
    token: str = "ghs_harness-token"
    path_front: list[Path] = field(default_factory=list)
    base_env: dict = field(default_factory=dict)
    # what stands in for a `uses:` step (name, its `with:`) -> an outcome, or None to skip it as
    # the tests do: benchmarks/bot_answer.py restores a cache there as actions/cache/restore would
    uses: Callable[[str, dict], str | None] | None = None
    step_timeout: int = 900  # seconds; a whole kubo Benchmark step takes longer

    def __post_init__(self):
        self.temp = self.tmp / "runner-temp"
        self.temp.mkdir(parents=True, exist_ok=True)
        self.event_path = self.tmp / "event.json"
        self.event_path.write_text(json.dumps(self.event))
        self.summary = self.tmp / "step-summary.md"
        self.summary.touch()
        self.env_file_vars: dict[str, str] = {}
        self.github_path: list[str] = []
        self.steps: dict[str, dict] = {}

    def github(self) -> dict:
        return {"event_name": self.event_name, "event": self.event, "repository": self.repository,
                "token": self.token, "server_url": "https://github.invalid", "api_url": self.api_url,
                "run_id": "4242", "workspace": str(self.workspace), "action_path": str(ROOT)}

    def run(self, given: dict[str, str]) -> list[StepRun]:
        defaults, steps = load_action()
        unknown = set(given) - set(defaults)
        assert not unknown, f"not inputs of action.yml: {unknown}"
        contexts = {"github": self.github(), "runner": {"temp": str(self.temp), "os": "Linux", "arch": "X64"},
                    "steps": self.steps, "env": {}, "inputs": {}}
        inputs = {k: (given[k] if k in given else substitute(v, Expr(contexts, False))) for k, v in defaults.items()}
        contexts["inputs"] = inputs
        failed = False
        out = []
        for n, step in enumerate(steps):
            contexts["env"] = dict(self.env_file_vars)
            expr = Expr(contexts, failed)
            name = step.get("name") or step.get("uses") or f"step {n}"
            cond = step.get("if", "success()")
            cond = cond[3:-2] if cond.startswith("${{") else cond
            if not _truthy(expr.eval(cond if re.search(r"success\(|failure\(|always\(|cancelled\(", cond)
                                     else f"success() && ({cond})")):
                out.append(StepRun(name, f"skipped (if: {cond})"))
                continue
            if "uses" in step:  # not run here: the test stands in for what the action does
                t0 = time.monotonic()
                done = self.uses(step["uses"], step.get("with") or {}) if self.uses else None
                out.append(StepRun(name, done or f"skipped (uses: {step['uses']})",
                                   seconds=time.monotonic() - t0))
                continue
            result = self._run_step(step, expr, name)
            if step.get("id"):
                self.steps[step["id"]]["outcome"] = result.outcome
            failed = failed or result.outcome == "failure"
            out.append(result)
        return out

    def _run_step(self, step: dict, expr: Expr, name: str) -> StepRun:
        assert step.get("shell") == "bash", f"{name}: composite run steps need shell: bash"
        n = len(list(self.tmp.glob("step-*.sh")))
        script = self.tmp / f"step-{n}.sh"
        script.write_text(substitute(step["run"], expr))
        output = self.tmp / f"output-{n}"
        envfile = self.tmp / f"env-{n}"
        pathfile = self.tmp / f"path-{n}"
        for f in (output, envfile, pathfile):
            f.write_text("")
        env = {**self.base_env, **self.env_file_vars}
        env["PATH"] = os.pathsep.join([*reversed(self.github_path), *map(str, self.path_front),
                                       self.base_env.get("PATH", os.environ["PATH"])])
        env.update({"GITHUB_OUTPUT": str(output), "GITHUB_ENV": str(envfile), "GITHUB_PATH": str(pathfile),
                    "GITHUB_STEP_SUMMARY": str(self.summary), "GITHUB_EVENT_PATH": str(self.event_path),
                    "GITHUB_EVENT_NAME": self.event_name, "GITHUB_REPOSITORY": self.repository,
                    "GITHUB_API_URL": self.api_url, "GITHUB_SERVER_URL": "https://github.invalid",
                    "GITHUB_RUN_ID": "4242", "GITHUB_WORKSPACE": str(self.workspace),
                    "GITHUB_ACTION_PATH": str(ROOT), "RUNNER_TEMP": str(self.temp), "RUNNER_OS": "Linux",
                    "CI": "true", "GITHUB_ACTIONS": "true"})
        for k, v in (step.get("env") or {}).items():
            env[k] = substitute(v, expr)
        cwd = self.workspace / substitute(step.get("working-directory", "."), expr)
        t0 = time.monotonic()
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=self.step_timeout)
        seconds = time.monotonic() - t0
        if step.get("id"):
            self.steps[step["id"]] = {"outputs": read_env_file(output)}
        self.env_file_vars.update(read_env_file(envfile))
        self.github_path += [ln for ln in pathfile.read_text().splitlines() if ln.strip()]
        return StepRun(name, "success" if proc.returncode == 0 else "failure", proc.stdout, proc.stderr, seconds)


def setup_python(where: Path) -> Path:
    """The bin directory actions/setup-python puts first on PATH: `python` is this interpreter itself
    (not a venv), so a venv made from it has the pip its release bundles, as on a runner."""
    bin_dir = where / "setup-python"
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "python").unlink(missing_ok=True)
    (bin_dir / "python").symlink_to(Path(sys._base_executable).resolve())
    return bin_dir
