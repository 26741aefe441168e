"""A backend for unit tests: a local directory stands for the remote, nothing is started.

It satisfies refbench.backends.Backend and records what the runner asked of it, so a test can
check the calls (scenarios opened and closed, close() at the end) as well as the results."""
from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class FakeBackend:
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="refbench-fake-backend-")))
    kind: str = "fake"
    shared_context: bool = True
    swept: list = field(default_factory=list)
    calls: list[tuple] = field(default_factory=list)  # ("open_scenario", slug, labels), ("close_scenario",), ...
    closed: bool = False

    @property
    def env(self) -> dict[str, str]:
        return {}

    def remote(self, scenario_slug: str) -> str:
        return str(self.root / scenario_slug)

    def context_values(self, scenario_slug: str, build_label: str) -> dict:
        return {"remote": self.remote(scenario_slug)}

    def command_prefix(self) -> tuple[str, ...]:
        """Commands run as they are: no namespace to enter."""
        return ()

    def context_env(self, scenario_slug: str, build_label: str) -> dict[str, str]:
        return {}

    def open_scenario(self, scenario, labels: list[str], binaries: list[str], workdir: Path) -> None:
        self.calls.append(("open_scenario", scenario.slug, tuple(labels)))
        Path(self.remote(scenario.slug)).mkdir(parents=True, exist_ok=True)

    def close_scenario(self) -> None:
        self.calls.append(("close_scenario",))

    def plan_scenario(self, scenario, labels: list[str], binaries: list[str]) -> None:
        self.calls.append(("plan_scenario", scenario.slug, tuple(labels)))

    def watch_dir(self) -> tuple[Path | None, str]:
        return self.root, "fake remote"

    def server_pids(self) -> list[int]:
        return []

    def watch_extra(self) -> dict:
        return {}

    def describe(self) -> dict:
        return {"kind": self.kind, "root": str(self.root)}

    def close(self) -> None:
        self.closed = True
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "FakeBackend":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
