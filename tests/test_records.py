"""Records passed between a run's stages say what they hold (issue 38): each is a frozen dataclass
whose fields are typed; no bare list, dict, tuple or object, no mutable list or dict, no bare
Callable, Mapping or ContextManager, no field of type Any."""
from __future__ import annotations

import ast
import dataclasses
import re
import sys
import typing
from pathlib import Path

import pytest

from refbench import pipeline, runenv, runner

# every record one stage hands the next (pipeline.run: validate -> resolve -> build_all -> measure
# -> judge -> assemble; the views' analysis, analysis.analyse, comes after the run, in
# commands/_args.write_views), and the RunEnv the stages take from the machine
STAGE_RECORDS = (
    pipeline.RunRequest, pipeline.RunHooks, pipeline.LoadedTarget, pipeline.Family, pipeline.Validated,
    pipeline.Resolved, pipeline.Measured, pipeline.BackendDescription,
    runner.Bench, runner.ScenarioResult, runner.StepResult,
    runenv.RunEnv, runenv.MachineSettings, runenv.BuildSite,
)

BARE = [
    (re.compile(r"\b(list|dict|set)\b"), "a mutable list, dict or set (a tuple, a Mapping, a frozenset)"),
    (re.compile(r"\b(Tuple|tuple)\b(?!\[)"), "a bare tuple (tuple[X, ...])"),
    (re.compile(r"\bobject\b"), "object (a type or a Protocol)"),
    (re.compile(r"\b(Callable|Mapping|Sequence|ContextManager|Iterator)\b(?!\[)"), "a bare generic"),
    (re.compile(r"^(Any|typing\.Any)(\s*\||$)|\|\s*(typing\.)?Any$"), "Any"),
]


def spelled(annotation: str, module) -> str:
    """The annotation with the module's type aliases (ExecutorFactory, StepFilter, Build) written out."""
    def alias(m: re.Match) -> str:
        value = getattr(module, m.group(0), None)
        return repr(value) if isinstance(value, (typing._GenericAlias, type(int | str))) or \
            type(value).__module__ in ("typing", "collections.abc") and not isinstance(value, type) else m.group(0)
    return re.sub(r"\b[A-Z]\w*\b", alias, annotation)


def faults(cls) -> list[str]:
    module = sys.modules[cls.__module__]
    out = []
    if not dataclasses.is_dataclass(cls) or not cls.__dataclass_params__.frozen:
        out.append(f"{cls.__name__} is not a frozen dataclass")
        return out
    for f in dataclasses.fields(cls):
        text = spelled(f.type if isinstance(f.type, str) else repr(f.type), module)
        out += [f"{cls.__name__}.{f.name}: {f.type} is {why}" for pattern, why in BARE if pattern.search(text)]
    return out


@pytest.mark.parametrize("cls", STAGE_RECORDS, ids=lambda c: c.__name__)
def test_stage_records_are_frozen_and_typed(cls):
    assert faults(cls) == []


def test_the_check_finds_what_it_looks_for():
    """A record of every kind of fault is refused, so the test above cannot pass by finding nothing."""
    @dataclasses.dataclass
    class Mutable:
        x: int

    @dataclasses.dataclass(frozen=True)
    class Loose:
        a: list
        b: dict[str, int]
        c: tuple
        d: object
        e: typing.Callable | None
        f: typing.Any
        g: tuple[int, ...]
        h: typing.Mapping[str, typing.Any]

    assert faults(Mutable) == ["Mutable is not a frozen dataclass"]
    assert [f.split(":")[0] for f in faults(Loose)] == ["Loose.a", "Loose.b", "Loose.c", "Loose.d", "Loose.e",
                                                         "Loose.f"]


def positional_builds(root: Path) -> list[str]:
    """Every place refbench builds a stage record with a positional argument (file:line: name)."""
    names = {c.__name__ for c in STAGE_RECORDS}
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and node.args:
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
                if name in names:
                    out.append(f"{path.relative_to(root.parent)}:{node.lineno}: {name}")
    return out


def test_stage_records_are_built_by_name():
    """A record of 19 fields built positionally breaks silently when one is added in the middle."""
    assert positional_builds(Path(pipeline.__file__).parent) == []


def test_a_positional_build_is_found(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text("x = Validated(request, cfg)\ny = pipeline.Measured(builds=())\n")
    assert positional_builds(tmp_path / "pkg") == ["pkg/m.py:1: Validated"]
