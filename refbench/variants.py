"""Named variants: a build as a run names it, a ref with its own Go, target flags and
environment, under a name that labels it everywhere (issue 26, part 3).

Comparing one ref under two configurations (another --numworkers, another GOGC, another Go) used
to mean repeating the ref and reading `v1.1.0 #2`. A variant says what differs and is called by
its name in the summary, results.json, the scoreboard and the PR comment:

    --variant w64=v2.2.2,flags=--numworkers 64,env=GOGC=200
    --variant w64                      (a [[variants]] table of the scenarios file)

`flags` are the target's own global flags for that build (after -sf, which every build gets);
`env` is exported in front of each of that build's commands; `go` is its --go. Refs given with -s
are variants without a name or settings: they keep their refs' labels. Build flags and a build's
own build environment are not variants' to set (the build cache keys on commit and Go).

bisect and the nightly choose their refs themselves and apply a variant's settings to every build
they make (`configuration`, `on_refs`); `settings_text` and `spec` write a variant back as --variant
takes it, for the command lines they print and record.

Pure: parsing and checking only; pipeline.py resolves and labels the builds, the runner applies
flags and environment.
"""
from __future__ import annotations

import dataclasses
import re
import shlex
from dataclasses import dataclass
from typing import Any, Callable

from .errors import RefbenchError

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# what the backends export for every command: a variant must not point one build at another server
RESERVED_ENV = ("S3_ENDPOINT_URL", "AWS_", "IPFS_PATH", "IPFS_TELEMETRY", "PATH", "HOME")
OPTIONS = ("go", "flags", "env")
_OPTION_SPLIT = re.compile(r",(?=(?:go|flags|env)=)")
FORM = "NAME=REF[,go=GO][,flags=FLAGS][,env=K=V ...]"
SETTINGS_FORM = "[go=GO][,flags=FLAGS][,env=K=V ...]"


@dataclass(frozen=True)
class Variant:
    ref: str
    name: str | None = None  # None: a ref given with -s, labelled as its ref
    go: str | None = None
    flags: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()

    def same_run(self, other: "Variant") -> bool:
        """Whether the two run their binaries the same way: the identical-binary shortcut needs
        that as well as the same bytes."""
        return (self.flags, self.env) == (other.flags, other.env)

    def record(self) -> dict:
        """What results.json keeps of it beside the build (only what was set)."""
        return {k: v for k, v in (("flags", list(self.flags)), ("env", dict(self.env))) if v}

    def to_json(self) -> dict:
        """Its name and settings, for the logs of the commands that apply it to builds of their
        own choosing (bisect's --log): which configuration every build ran under."""
        return {"name": self.name, **({"go": self.go} if self.go else {}), **self.record()}

    def describe(self) -> str:
        """One line for a log: `w4 (flags --numworkers 4; env GOGC=200; go 1.26)`."""
        parts = [f"{k} {v}" for k, v in (("flags", shlex.join(self.flags)),
                                          ("env", " ".join(f"{k}={v}" for k, v in self.env)),
                                          ("go", self.go or "")) if v]
        said = "; ".join(parts) or "no settings"
        return f"{self.name} ({said})" if self.name else said


def parse(text: str, declared: dict[str, "Variant"]) -> Variant:
    """A --variant value: NAME=REF with options, or the NAME of a [[variants]] table."""
    head, *options = _OPTION_SPLIT.split(text.strip())
    if "=" not in head:
        if options or head not in declared:
            raise RefbenchError(f"--variant {text!r}: expected {FORM}, or the name of a [[variants]] table"
                                f"{_declared(declared)}")
        return declared[head]
    name, ref = (s.strip() for s in head.split("=", 1))
    if name in OPTIONS:  # `go=1.26,...` is settings without a name or ref, not a variant named "go"
        raise RefbenchError(f"--variant {text!r}: expected {FORM} (settings alone, {SETTINGS_FORM}, "
                            "are for bisect, which chooses the refs)")
    return validated(Variant(ref, name, *_options(options, f"--variant {name}")), f"--variant {text!r}")


def configuration(text: str, declared: dict[str, "Variant"], command: str) -> Variant:
    """A --variant of a command that chooses the refs itself (bisect): the name of a [[variants]]
    table, whose ref it does not use, or settings alone (go=GO,flags=FLAGS,env=K=V). The Variant's
    ref is empty: `on_refs` puts it on the command's refs. A NAME=REF is refused, as its ref would
    mean nothing there."""
    head, *options = _OPTION_SPLIT.split(text.strip())
    if "=" not in head and not options and head in declared:
        return declared[head]
    if head.partition("=")[0] not in OPTIONS:
        raise RefbenchError(f"{command} --variant {text!r}: expected settings without a ref ({SETTINGS_FORM}; "
                            f"{command} chooses the refs), or the name of a [[variants]] table{_declared(declared)}")
    v = Variant("", None, *_options((head, *options), "--variant"))
    return _validate_env(v, f"--variant {text!r}")


def on_refs(v: Variant, builds: tuple[tuple[str, str], ...]) -> tuple[Variant, ...]:
    """v's settings on each (ref, name): the builds of a command that chooses its refs itself
    (bisect's GOOD and probe, the nightly's baseline and watched ref), each named, as the
    pipeline gives a variant's flags and environment to its build by the build's name."""
    return tuple(dataclasses.replace(v, ref=ref, name=name) for ref, name in builds)


def against(v: Variant, baseline: str, ref: str, role: str) -> tuple[Variant, Variant]:
    """v's settings on a baseline and a ref: the ref's build named by v (its label in every view),
    the baseline's `NAME.role` (bisect's GOOD, the nightly's base); 'variant' for settings alone."""
    name = v.name or "variant"
    return on_refs(v, ((baseline, f"{name[:58]}.{role}"), (ref, name)))  # NAME_RE's 64 characters


def settings_text(v: Variant) -> str:
    """v's settings as --variant takes them without a ref (`configuration`): the bisect line a
    nightly prints for a variant's series."""
    parts = ([f"go={v.go}"] if v.go else []) + ([f"flags={shlex.join(v.flags)}"] if v.flags else [])
    return ",".join(parts + [f"env={k}={val}" for k, val in v.env])


def spec(v: Variant) -> str:
    """v as --variant takes it (NAME=REF,settings): the command line a nightly records."""
    return ",".join(filter(None, (f"{v.name}={v.ref}", settings_text(v))))


def _declared(declared: dict) -> str:
    return f" (declared: {', '.join(declared)})" if declared else ""


def _options(options, where: str) -> tuple[str | None, tuple[str, ...], tuple[tuple[str, str], ...]]:
    """(go, flags, env) of the go=, flags= and env= parts of a --variant."""
    go, flags, env = None, (), []
    for opt in options:
        key, value = opt.split("=", 1)
        if key == "go":
            go = value.strip() or None
        elif key == "flags":
            flags = _words(value, f"{where}: flags")
        else:
            env.append(_env_pair(value, f"{where}: env"))
    return go, flags, tuple(env)


def from_table(t: Any, where: str, fail: Callable[[str, str, Any], Exception]) -> Variant:
    """A [[variants]] table: name, ref, and optionally go, flags (a string or a list of words) and
    env (a table of strings). `fail(key, expected, got)` names the file and the key."""
    if not isinstance(t, dict):
        raise fail(where, "a table", t)
    for key in t:
        if key not in ("name", "ref", "go", "flags", "env"):
            raise fail(f"{where}.{key}", "one of the keys name, ref, go, flags, env", key)
    for key in ("name", "ref"):
        if not isinstance(t.get(key), str):
            raise fail(f"{where}.{key}", "a string (required)", t.get(key))
    if t.get("go") is not None and not isinstance(t["go"], str):
        raise fail(f"{where}.go", "a Go version or choice, as --go takes", t["go"])
    flags = t.get("flags", ())
    if isinstance(flags, str):
        flags = _words(flags, f"{where}.flags")
    if not isinstance(flags, (list, tuple)) or not all(isinstance(f, str) for f in flags):
        raise fail(f"{where}.flags", "a string or a list of strings", flags)
    env = t.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise fail(f"{where}.env", "a table of strings (NAME = \"value\")", env)
    try:
        return validated(Variant(t["ref"], t["name"], t.get("go"), tuple(flags), tuple(env.items())), where)
    except RefbenchError as e:
        raise fail(where, "a valid variant", str(e)) from None


def validated(v: Variant, where: str) -> Variant:
    if v.name is not None and not NAME_RE.fullmatch(v.name):
        raise RefbenchError(f"{where}: a variant's name is letters, digits and . _ + - (up to 64), got {v.name!r}")
    if not v.ref:
        raise RefbenchError(f"{where}: no ref (expected {FORM})")
    return _validate_env(v, where)


def _validate_env(v: Variant, where: str) -> Variant:
    for key, _ in v.env:
        if not ENV_NAME_RE.fullmatch(key) or key.startswith(RESERVED_ENV):
            raise RefbenchError(f"{where}: env {key!r} is not a variable a variant may set "
                                f"(a name, not one of {', '.join(RESERVED_ENV)}*)")
    return v


def _words(text: str, where: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(text))
    except ValueError as e:
        raise RefbenchError(f"{where}: {e}") from None


def _env_pair(text: str, where: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep:
        raise RefbenchError(f"{where}: expected K=V, got {text!r}")
    return key.strip(), value


def builds(refs: tuple[str, ...], specs: tuple["str | Variant", ...], declared: dict[str, Variant]) -> tuple[Variant, ...]:
    """Every build of a run, baseline first: the -s refs, then the --variant ones. Names are
    unique and no ref's label is taken by a variant. A spec already a Variant is taken as it is:
    bisect's and the nightly's builds, their settings put on refs they chose (on_refs)."""
    out = tuple(Variant(r) for r in refs) + tuple(s if isinstance(s, Variant) else parse(s, declared) for s in specs)
    names = [v.name for v in out if v.name]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise RefbenchError(f"--variant {dup!r} is named twice: every variant's name is its label")
    return out


def labels(variants: tuple[Variant, ...], ref_labels: list[str]) -> list[str]:
    """Each build's label: its variant's name, else its ref's label. A name that is also a ref's
    label would make two builds one in every view: refused."""
    out = [v.name or lab for v, lab in zip(variants, ref_labels)]
    clash = next((lab for v, lab in zip(variants, out) if not v.name and lab in {x.name for x in variants}), None)
    if clash:
        raise RefbenchError(f"--variant {clash!r}: the name is also the label of a ref given with -s; rename it")
    return out
