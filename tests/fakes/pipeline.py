"""pipeline.run on stand-ins, through its seam: a RunEnv whose executor is the MockExecutor, whose
backend is a MockBackend and whose builder makes builds up (no Go, no MinIO, no process), so a
whole run takes milliseconds. Nothing is patched: a test passes `FakeRuns.env()` to pipeline.run,
or runs cli.main with `mock_args(...)` (`--executor mock`), which picks the same stand-ins.

Each ref's binary is a name the MockExecutor reads its factors from ('fake-1.08-mem3': wall ×1.08,
3 MiB more memory)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from refbench import mock, runenv
from refbench.progress import Reporter

from .executor import MockExecutor


@dataclass
class FakeRuns:
    """What a test's runs read back: every run's executor and backend, in order."""
    root: Path
    binaries: dict[str, str]  # ref -> the binary's name
    executor: Callable[[], MockExecutor] = MockExecutor  # makes each run's executor when the run starts
    executors: list[MockExecutor] = field(default_factory=list)
    backends: list[mock.MockBackend] = field(default_factory=list)  # closed as the real one is
    builder: Callable | None = None  # (checked) -> a builder; default the MockBuilder over `binaries`

    def make_executor(self, workdir, **kw) -> MockExecutor:
        self.executors.append(self.executor())
        return self.executors[-1]

    def env(self, reporter: Reporter | None = None) -> runenv.RunEnv:
        return runenv.RunEnv(
            executor=self.make_executor,
            backend=mock.backend_opener(self.root / "remote", self.backends),
            builder=self.builder or (lambda checked: mock.MockBuilder(checked.target, self.root, self.binaries)),
            find_tool=lambda tool: f"/usr/bin/{tool}",
            machine=runenv.MachineSettings(watchdog="off"), reporter=reporter or Reporter(quiet=True))


def fake_env(root: Path, binaries: dict[str, str], executor: Callable[[], MockExecutor] = MockExecutor) -> FakeRuns:
    return FakeRuns(Path(root), dict(binaries), executor)


def mock_args(binaries: dict[str, str], seed: str = "0", sigma: float | None = None, *more: str) -> list[str]:
    """`--executor mock` and its --mock settings: each ref built into its binary name, seeded."""
    out = ["--executor", "mock", "--mock", f"seed={seed}"]
    out += [x for ref, name in binaries.items() for x in ("--mock", f"build={ref}:{name}")]
    if sigma is not None:
        out += ["--mock", f"sigma={sigma}"]
    return out + [x for m in more for x in ("--mock", m)]


def scenarios_file(monkeypatch, root: Path, text: str) -> Path:
    """A scenarios file in `root`, which becomes the working directory (no checkout around: the
    target is the one named)."""
    path = Path(root) / "s.toml"
    path.write_text(text)
    monkeypatch.chdir(root)
    return path
