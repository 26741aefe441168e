"""pipeline.run on stand-ins: the MockExecutor measures, a FakeBackend stores, and the builds are
made up (no Go, no MinIO, no process), so a whole run — through cli.main too, in-process — takes
milliseconds. Each ref's binary is a name the MockExecutor reads its factors from ('fake-1.08-mem3':
wall ×1.08, 3 MiB more memory); `executor` makes the run's executor when the run starts, so a test
may change it between runs."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from refbench import pipeline
from refbench.builds import BuiltRef
from refbench.refs import ResolvedRef

from .backend import FakeBackend
from .executor import MockExecutor


@dataclass
class FakeRuns:
    root: Path
    binaries: dict[str, str]  # ref -> the binary's name
    executor: Callable[[], MockExecutor] = MockExecutor
    executors: list[MockExecutor] = field(default_factory=list)  # every run's, in order
    backends: list[FakeBackend] = field(default_factory=list)  # every run's, closed as the real one is


class StepSeeded(MockExecutor):
    """A MockExecutor whose figures depend on the step and round (and `seed`), not on the calls
    made before: a shard measures its steps exactly as the unsharded run measured them."""

    def measure(self, where, call, env):
        self.seed = f"{self.base_seed}/{where}"
        return super().measure(where, call, env)

    def __init__(self, seed: str = "0", **kw):
        super().__init__(seed=seed, **kw)
        self.base_seed = seed


def scenarios_file(monkeypatch, root: Path, text: str) -> Path:
    """A scenarios file in `root`, which becomes the working directory (no checkout around: the
    target is the one named), with every tool found."""
    path = Path(root) / "s.toml"
    path.write_text(text)
    monkeypatch.chdir(root)
    monkeypatch.setattr(pipeline, "find_tool", lambda tool: f"/usr/bin/{tool}")
    return path


def fake_pipeline(monkeypatch, root: Path, binaries: dict[str, str],
                  executor: Callable[[], MockExecutor] = MockExecutor) -> FakeRuns:
    """Patch pipeline's executor, backend, resolve and build stages; returns what the runs read."""
    fakes = FakeRuns(Path(root), dict(binaries), executor)
    monkeypatch.setenv("REFBENCH_WATCHDOG", "off")

    def make_executor(workdir, **kw):
        fakes.executors.append(fakes.executor())
        return fakes.executors[-1]

    @contextlib.contextmanager
    def open_backend(checked, workdir, run_id, server_cpus, reporter):
        with FakeBackend(fakes.root / "remote") as backend:  # closed on the way out, whatever ends the run
            fakes.backends.append(backend)
            yield backend

    class Builder:
        repo_url = "https://example.invalid/fake"

    def resolve(checked, reporter):
        refs = [ResolvedRef(r, "tag", f"{i:040d}", r) for i, r in enumerate(checked.request.refs)]
        return pipeline.Resolved(Builder(), refs, [r.display for r in refs])

    def build_all(res, reporter):
        return [BuiltRef("fake", r, lab, fakes.root / fakes.binaries[r.text], "git", "go1.24", False, 0.0)
                for r, lab in zip(res.refs, res.labels)], 0.0

    monkeypatch.setattr(pipeline, "make_executor", make_executor)
    monkeypatch.setattr(pipeline, "open_backend", open_backend)
    monkeypatch.setattr(pipeline, "resolve", resolve)
    monkeypatch.setattr(pipeline, "build_all", build_all)
    return fakes
