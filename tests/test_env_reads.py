"""The environment is read in one place (issue 38 part 4): the command line (cli.py, commands/,
runenv.MachineSettings), which installs what it read (paths.use) and passes it down; no library
module reads it, nothing reads it at import, and every REFBENCH_* variable is in the reference.
Also: no test monkeypatches an attribute of refbench's own modules (issue 38's last paragraph):
a test goes through a seam the product has (a parameter, the RunEnv, MachineSettings)."""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "refbench"
TESTS = ROOT / "tests"

#: the edge: where reading the environment belongs
EDGE = ("cli.py", "runenv.py", "commands/")
#: modules past the edge that still read it, each for a reason that cannot move
ALLOWED = {
    # the cache key: read only where issue 35 says (a file named by REFBENCH_CACHE_KEY_FILE, checked
    # by the step that seals or checks) and never through the request or a flag; the key itself in
    # the environment is refused at start (every child could read /proc/PID/environ)
    "trust.py": "the cache key, issue 35",
    # GitPython runs `git version` at its import, which the command line's own imports trigger
    # before cli.main runs: the clean git has to be named in the environment before that
    "__init__.py": "GitPython's git, named before GitPython's import runs it",
    # the doors' first step, before the command line exists: the environment refbench was started
    # with, executed again without what no child is given (issue 54: /proc/PID/environ)
    "heldenv.py": "the program's own start, before the command line reads anything",
}
ENV_NAMES = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}


def _env_reads(path: Path) -> list[int]:
    """Lines of `path` whose code (not a comment, not a docstring) touches the process environment."""
    tree = ast.parse(path.read_text(), str(path))
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ENV_NAMES and isinstance(node.value, ast.Name) \
                and node.value.id == "os":
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os" and {a.name for a in node.names} & ENV_NAMES:
            lines.append(node.lineno)
    return sorted(lines)


def _rel(path: Path) -> str:
    return path.relative_to(PKG).as_posix()


def test_no_library_module_reads_the_environment():
    found = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = _rel(path)
        if rel.startswith(EDGE) or rel in ALLOWED:
            continue
        if lines := _env_reads(path):
            found[rel] = lines
    assert not found, (f"these modules read the environment ({found}): read it at the command line "
                       "(runenv.MachineSettings, paths.Layout.environ) and pass it down")


def test_the_allowed_readers_still_need_it():
    """An allow-listed module that no longer reads the environment leaves the list."""
    for rel in ALLOWED:
        assert _env_reads(PKG / rel), f"refbench/{rel} reads no environment now: remove it from ALLOWED"


def refbench_variables() -> set[str]:
    names = set()
    for path in PKG.rglob("*.py"):
        names |= set(re.findall(r"\bREFBENCH_[A-Z][A-Z0-9_]*[A-Z0-9]\b", path.read_text()))
    return names


# Imports every refbench module with os.environ swapped for a mapping that records which module
# asked for which variable; prints the refbench modules' reads.
_IMPORT_ALL = r"""
import importlib, json, os, pkgutil, sys
from collections.abc import MutableMapping

real = os.environ
reads = []
PKG = sys.argv[1]  # the package's own directory: a checkout (or its venv) may itself sit in a "refbench/"

class Recording(MutableMapping):
    def _note(self, key):
        # the refbench frames (file, function) on the stack of this read, innermost first, when the
        # reader is refbench's own code (not a library it imports: numpy reads its own variables)
        f, stack = sys._getframe(1), []
        while f and (f.f_code.co_filename.startswith(("<string>", "<frozen"))  # the recorder, os, posixpath
                     or f.f_code.co_filename.endswith(("_collections_abc.py", "/os.py", "/posixpath.py"))):
            f = f.f_back
        if not (f and f.f_code.co_filename.startswith(PKG)):
            return
        while f:
            if f.f_code.co_filename.startswith(PKG):
                stack.append([f.f_code.co_filename, f.f_code.co_name])
            f = f.f_back
        reads.append([stack, key])
    def __getitem__(self, key):
        self._note(key); return real[key]
    def __setitem__(self, key, value):
        real[key] = value
    def __delitem__(self, key):
        del real[key]
    def __iter__(self):
        self._note("*"); return iter(real)
    def __len__(self):
        return len(real)
    def copy(self):
        self._note("*"); return dict(real)

os.environ = Recording()
import refbench
# __main__ modules run the command line when imported: that is the edge, not an import
mods = sorted(m.name for m in pkgutil.walk_packages(refbench.__path__, "refbench.") if not m.name.endswith("__main__"))
for m in mods:
    importlib.import_module(m)
print(json.dumps({"modules": len(mods), "reads": reads}))
"""


def test_importing_refbench_reads_no_environment():
    """Every module imported under an environment whose REFBENCH_* variables (and the other names
    the command line reads) are all garbage: nothing raises, and no module but refbench/__init__.py
    (GitPython, ALLOWED says why) reads a variable while it is imported."""
    garbage = {name: "garbage!" for name in refbench_variables() - {"REFBENCH_CACHE_KEY"}}
    garbage.update({k: "garbage!" for k in ("MINIO_VERSION", "TOXIPROXY_VERSION", "S3_ENDPOINT_URL",
                                            "AWS_REGION", "GOFLAGS", "GO_TOOLCHAIN")})
    env = {**os.environ, **garbage, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", _IMPORT_ALL, f"{PKG}{os.sep}"], env=env, capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["modules"] > 50  # every module, not a handful
    gitpython = [str(PKG / "__init__.py"), "_gitpython_uses_a_clean_git"]
    ours = [(stack[0], key) for stack, key in out["reads"] if stack and gitpython not in stack]
    assert not ours, f"read at import: {ours}"
    assert any(gitpython in stack for stack, _ in out["reads"])  # the recorder sees the one it allows


def test_every_refbench_variable_is_in_the_reference():
    """docs/usage.md#environment lists each REFBENCH_* variable the code reads, with its flag."""
    text = (ROOT / "docs" / "usage.md").read_text()
    section = text.split("\n## Environment", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `(REFBENCH_[A-Z0-9_]+)` \|.*\| ([^|]+) \|$", section, re.M))
    missing = sorted(refbench_variables() - set(rows))
    assert not missing, f"not in docs/usage.md's Environment table: {missing}"
    for name, flag in rows.items():
        assert flag.strip() == "none" or flag.strip().startswith("`"), (name, flag)


# ---- no monkeypatch of refbench's own modules -------------------------------------------------
_PATCHERS = {"setattr", "delattr", "object"}  # monkeypatch.setattr/delattr, mock.patch.object


def _refbench_names(tree: ast.Module) -> set[str]:
    """The names a test module binds to refbench's modules, classes and functions."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "refbench":
            names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] == "refbench"}
    return names


def _root(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def patches_of_refbench(path: Path) -> list[int]:
    """Lines of a test file that patch an attribute of a refbench module (or of a class or function
    it defines): monkeypatch.setattr(module, ...), setattr("refbench.x.y", ...), mock.patch("refbench...")."""
    tree = ast.parse(path.read_text(), str(path))
    ours = _refbench_names(tree)
    lines = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and node.args):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        target = node.args[0]
        if name in _PATCHERS or name == "patch":
            if isinstance(target, ast.Constant) and isinstance(target.value, str):
                if target.value.startswith("refbench.") and (name != "setattr" or "." in target.value):
                    lines.append(node.lineno)
            elif name in _PATCHERS and _root(target) in ours:
                lines.append(node.lineno)
    return lines


def test_no_test_monkeypatches_refbench():
    """Every stand-in goes through a seam: the RunEnv (its executor, builder, probes), a parameter
    with a default (a clock, a stopping rule, a go runner, a fixture run's checks), or what the
    product installs for a block (paths.installed, trust.key_in_use, pins.installed)."""
    found = {p.name: ls for p in sorted(TESTS.rglob("*.py")) if p.name != Path(__file__).name
             and (ls := patches_of_refbench(p))}
    assert not found, (f"tests that patch refbench's own modules ({found}): give the code a seam "
                       "(a parameter with a default, the RunEnv, MachineSettings) and pass the stand-in")


def test_the_patch_finder_finds_them(tmp_path):
    sample = tmp_path / "test_sample.py"
    sample.write_text("from refbench import paths\nimport refbench.pins as pins\nimport shutil\n"
                      "def test(monkeypatch):\n"
                      "    monkeypatch.setattr(paths, 'CHECKOUT', None)\n"
                      "    monkeypatch.setattr(pins.PINS, 'x', 1)\n"
                      "    monkeypatch.setattr('refbench.tools.find_tool', None)\n"
                      "    monkeypatch.setattr(shutil, 'rmtree', None)\n"
                      "    monkeypatch.setenv('X', '1')\n")
    assert patches_of_refbench(sample) == [5, 6, 7]
