"""What `run --dry-run` prints: the plan, and the commands that would run, rendered.

A user checks a dry run to see exactly what will be executed, so every command is rendered the
way the runner renders it (runner.template_values and runner.shell_command, over a backend in
its planned form), for the first build: its binary (cached, or where it will be once built),
the remote, bucket and prefix, the flags. What only a started run knows is a placeholder:
`<workdir>` (the run's temp dir), `<run-id>` (its part of the prefix), `<port>` (the embedded
MinIO's or a daemon's port), `<region-port>` (the proxy of a step's network profile).
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Mapping, Sequence

from . import fixtures as fx, tools
from .backends import IpfsBackend, S3Backend
from .builds import BuiltRef, Builder
from .config import ScenarioSpec, StepSpec, TargetSpec
from .units import human_bytes
from .refs import ResolvedRef
from .runner import shell_command, template_values
from .sampling import Sampling

WORKDIR_PLACEHOLDER = Path("<workdir>")


@dataclass(frozen=True)
class PlannedBuild:
    """A build as a dry run knows it: the binary is the cached one, or where it will be built."""
    build: BuiltRef
    cached: bool
    same_tree_as: str | None = None  # not cached, but a cached build of this commit of the same tree


def planned_builds(builder: Builder, resolved: Sequence[ResolvedRef], labels: Sequence[str]) -> list[PlannedBuild]:
    """The builds a run would compare, without building any."""
    out = []
    for ref, label in zip(resolved, labels):
        cached = builder.cached(ref)
        twin = None if cached else builder.same_tree_build(ref)
        binary = cached or builder.build_dir(ref.sha, ref.toolchain) / builder.target.binary
        out.append(PlannedBuild(BuiltRef(builder.target.name, ref, label, binary, builder.source, ref.toolchain or "",
                                         False, 0.0),
                                cached is not None, twin[1]["sha"] if twin else None))
    return out


def planned_backend(target: TargetSpec, bucket: str | None, prefix: str, endpoint: str | None,
                    workdir: Path = WORKDIR_PLACEHOLDER, networks: Mapping = MappingProxyType({}),
                    find_tool: Callable[[str], str | None] = tools.find_tool):
    """The run's backend in its planned form: nothing started, listed or written."""
    if target.backend == "s3":
        return S3Backend.planned(bucket, prefix, endpoint, networks, find=find_tool)
    return IpfsBackend.planned(workdir)


def implementation_lines(implementations: Sequence) -> list[str]:
    """One line per implementation: its registry and pins, and whether a sealed install is cached."""
    from . import implementations as impls
    out = []
    for impl in implementations:
        hit = impls.cached(impl)
        pinned = impl.pinned_by
        out.append(f"  implementation {impl.label}: {impls.REGISTRY_NAMES[impl.registry]} {impl.package}, {pinned} -> "
                   + (f"cached {hit.program}" if hit else "would install"))
    return out


def render_plan(target: TargetSpec, source: str, scenarios: Sequence[ScenarioSpec],
                step_filter: Callable[[ScenarioSpec, StepSpec], bool] | None, builds: Sequence[PlannedBuild], *,
                bucket: str | None, prefix: str, endpoint: str | None, sampling: Sampling,
                cache_dir: Path, target_flags: Sequence[str] = (), hyperfine_flags: Sequence[str] = (),
                networks: Mapping = MappingProxyType({}), implementations: Sequence = (),
                find_tool: Callable[[str], str | None] = tools.find_tool) -> str:
    """The dry run's report: target, builds, backend and settings, then per scenario and selected
    step the commands that would run for the first build, in the order they run; an S3 step with
    its network profile (`networks`: the run's, by name), its commands with that profile's proxy."""
    desc = f"s3://{bucket}" if bucket else "embedded MinIO on loopback" if target.backend == "s3" else "ipfs"
    lines = [f"target {target.name} from {source}"]
    for p in builds:
        r = p.build.ref
        lines.append(f"  build {p.build.label}: {r.kind} {r.sha} -> "
                     + (f"cached {p.build.binary}" if p.cached else
                        f"would copy the build of {p.same_tree_as} (the same tree)" if p.same_tree_as else
                        "would build")
                     + (f" (Go: {p.build.toolchain})" if p.build.toolchain else ""))
    lines += implementation_lines(implementations)
    lines.append(f"backend: {desc}; {sampling.describe()}")
    if not builds:  # implementations alone: their commands are their own (implementations.toml)
        return "\n".join(lines)
    backend = planned_backend(target, bucket, prefix, endpoint, networks=networks, find_tool=find_tool)
    first = builds[0].build
    lines.append(f"commands as they would run for {first.label}, the first build "
                 "(<workdir>, <run-id>, <port>: known once the run starts)")
    if backend.env:
        lines.append("  environment: " + " ".join(f"{k}={shlex.quote(v)}" for k, v in backend.env.items()))
    if target.backend == "s3" and bucket:
        lines.append("  (shown for an unversioned bucket: where the bucket keeps versions, the run takes the "
                     "versioned branches of the templates)")
    if hyperfine_flags:
        lines.append(f"  hyperfine flags: {shlex.join(hyperfine_flags)}")
    for s in scenarios:
        lines += _scenario_lines(s, step_filter, backend, builds, cache_dir, list(target_flags))
    return "\n".join(lines)


def _scenario_lines(s: ScenarioSpec, step_filter, backend, builds: Sequence[PlannedBuild], cache_dir: Path,
                    target_flags: list[str]) -> list[str]:
    fixture = fx.planned(s.fixture, cache_dir)
    lines = [f"scenario {s.name}: {s.fixture.kind} fixture, {fixture.files} files, {human_bytes(fixture.bytes)}"]
    backend.plan_scenario(s, [p.build.label for p in builds], [str(p.build.binary) for p in builds])
    first = builds[0].build
    use_network = getattr(backend, "use_network", lambda name: None)

    def rendered(template: str | None, step: StepSpec | None) -> str:
        if not template:
            return ""
        use_network(step.network if step else None)  # as the runner does, step by step
        values = template_values(s, fixture, 0, first, step, WORKDIR_PLACEHOLDER, target_flags, backend)
        return shell_command(template, values, backend.context_env(s.slug, first.label))

    if cmd := rendered(s.setup, None):
        lines.append(f"  setup: {cmd}")
    for st in s.selected_steps(step_filter):
        lines.append(f"  step {st.name}{f' [network {st.network}]' if st.network else ''}: {rendered(st.command, st)}")
        for what in ("setup", "prepare", "check", "cleanup"):
            if cmd := rendered(getattr(st, what), st):
                lines.append(f"    {what}: {cmd}")
    if cmd := rendered(s.teardown, None):
        lines.append(f"  teardown: {cmd}")
    return lines
