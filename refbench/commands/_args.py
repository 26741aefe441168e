"""Argument types and options shared by the subcommands: each error is one line naming what was
expected, so bad input never becomes a usage dump or a traceback."""
from __future__ import annotations

import argparse
import os
import re

from .. import toolchain
from ..errors import EXIT_ERROR, RefbenchError
from ..figures import Criteria, criteria
from ..judge import failing
from ..metrics import table
from ..verdict import ALPHA, NOISE_LIMIT, THRESHOLD


class Parser(argparse.ArgumentParser):
    """argparse, but bad input is one line (and exit 2), not a usage dump."""

    def error(self, message):  # noqa: D401
        self.exit(EXIT_ERROR, f"refbench: error: {message} (see {self.prog} --help)\n")


def nonneg(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {v}")
    return v


def positive(text: str) -> int:
    v = nonneg(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {v}")
    return v


def fraction(text: str) -> float:
    try:
        v = float(text.rstrip("%")) / (100 if text.endswith("%") else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction like 0.05 or 5%, got {text!r}") from None
    if not 0 < v < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction between 0 and 1, got {text!r}")
    return v


def duration(text: str) -> float:
    """Seconds from '600', '90s', '10m', '1h30m'."""
    m = re.fullmatch(r"\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s?)?\s*", text or "")
    if not text or not m or not any(m.groups()):
        raise argparse.ArgumentTypeError(f"expected a duration like 600, 90s, 10m or 1h30m, got {text!r}")
    h, mi, se = (float(g) if g else 0.0 for g in m.groups())
    v = h * 3600 + mi * 60 + se
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a duration above 0, got {text!r}")
    return v


def budget(text: str) -> float:
    """--budget: a duration, or none/off/0 for the fixed-size run (0.0, pipeline.NO_BUDGET)."""
    if text.strip().lower() in ("none", "off", "0"):
        return 0.0
    try:
        return duration(text)
    except argparse.ArgumentTypeError as e:  # say that 'none' is an answer too
        raise argparse.ArgumentTypeError(f"{e}, or none for a fixed-size run") from None


def cpu_list(text: str) -> frozenset[int]:
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(out)


def cpu_split(text: str) -> tuple[frozenset[int], frozenset[int] | None] | str:
    """'0:1' -> ({0}, {1}); '0-2' -> ({0,1,2}, None); 'auto' kept for the run to resolve."""
    if text in ("auto", "off"):
        return text
    try:
        client, _, server = text.partition(":")
        pair = cpu_list(client), (cpu_list(server) if server else None)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected CPUs like 0:1 or 0-2:3, got {text!r}") from None
    have = os.sched_getaffinity(0)
    bad = sorted(c for c in pair[0] | (pair[1] or frozenset()) if c not in have)
    if bad:
        raise argparse.ArgumentTypeError(f"CPU {bad[0]} is not available here (this process may use "
                                         f"{', '.join(map(str, sorted(have)))})")
    return pair


def go_choices(text: str) -> tuple[str, ...]:
    """--go: 'local', 'mod', '1.24.4', 'go1.24.4', '1.24', or one of them per build: '1.25,mod'."""
    try:
        return toolchain.parse_choices(text)
    except RefbenchError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--go ")) from None


def add_go_arg(p: argparse.ArgumentParser) -> None:
    """--go, as every command that builds refs takes it."""
    p.add_argument("--go", type=go_choices, default=None, metavar="GO[,GO...]",
                   help="the Go that builds each ref: mod = what its go.mod asks for (its toolchain line, else the "
                        "newest patch of its go line, fetched from the Go module proxy through GOTOOLCHAIN), local = "
                        "this machine's go, or a version (1.24.4, go1.24.4; 1.24 = its newest patch); one value for "
                        f"every build or one per build in -s order (default: env {toolchain.ENV}, else mod)")


def add_stats_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("verdicts")
    g.add_argument("--threshold", type=fraction, default=THRESHOLD,
                   help=f"smallest change that counts as slower/faster (default {THRESHOLD:g} = {THRESHOLD * 100:g}%%)")
    g.add_argument("--alpha", type=fraction, default=ALPHA, help=f"significance level (default {ALPHA:g})")
    g.add_argument("--noise-limit", type=fraction, default=NOISE_LIMIT,
                   help=f"flag a step as noisy above this coefficient of variation (default {NOISE_LIMIT:g})")
    g.add_argument("--metric-threshold", type=metric_threshold, action="append", default=[], metavar="METRIC=X",
                   help="the threshold of another metric than wall time (--threshold), e.g. memory=0.1; defaults: "
                        + ", ".join(f"{m} {t:g}" for m, t in table().thresholds())
                        + "; server-cpu (the embedded MinIO's CPU per run) has none: it is context, and a "
                          "verdict only when given here, e.g. server-cpu=0.05")


def criteria_of(args: argparse.Namespace) -> Criteria:
    """The criteria add_stats_args' options ask for (figures.criteria: the one way they are built)."""
    return criteria(args.threshold, args.alpha, args.noise_limit, args.metric_threshold)


def add_fail_args(p: argparse.ArgumentParser, what: str = "step") -> None:
    """--fail-on-regression and --fail-on: which slower verdicts exit 1 (judge.failing)."""
    p.add_argument("--fail-on-regression", action="store_true", help=f"exit 1 when any {what} is slower in wall time")
    p.add_argument("--fail-on", type=metric_list, default=(), metavar="METRIC,...",
                   help="also count these metrics' slower verdicts for --fail-on-regression (which it implies), "
                        f"e.g. cpu,memory; metrics: {', '.join(table().names)}")


def fails(args: argparse.Namespace, contrasts) -> bool:
    """Whether these verdicts fail the command under its --fail-on-regression / --fail-on."""
    return bool((args.fail_on_regression or args.fail_on) and failing(contrasts, args.fail_on))


def write_views(results, html_path: str | None, csv_path: str | None) -> None:
    """--html and --csv of a run, a merge or a report: the HTML report's analysis computed first
    (numpy, so only when --html asks for it), then render.files writes both."""
    from ..render.files import write_extras
    analysis = None
    if html_path:
        from ..analysis import analyse
        analysis = analyse(results)
    write_extras(results, analysis, html_path, csv_path)


def metric_threshold(text: str) -> tuple[str, float]:
    """'memory=0.1' -> ('memory', 0.1); argparse type for --metric-threshold."""
    name, _, value = text.partition("=")
    names = table().names
    if name not in names or name == "wall":
        raise argparse.ArgumentTypeError(f"{name!r} is not a metric with its own threshold "
                                         f"(one of {', '.join(m for m in names if m != 'wall')}; wall's is --threshold)")
    return name, fraction(value)


def metric_list(text: str) -> tuple[str, ...]:
    """'cpu,memory' -> ('cpu', 'memory'); argparse type for --fail-on."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    bad = [n for n in names if n not in table()]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"{(bad or [text])[0]!r} is not a metric (one of {', '.join(table().names)})")
    return names


_FLAG_VALUE_OPTIONS = ("-hf", "--hyperfine-extra-flags", "-sf", "--s5cmd-extra-flags", "--extra-flags")


def bind_flag_values(argv: list[str]) -> list[str]:
    """`-hf '--runs 3'` and `-sf --numworkers=8` take values that start with '-', which argparse
    would read as options (s5cmd's script needed a leading space); bind them as `-hf=VALUE`."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] in _FLAG_VALUE_OPTIONS and i + 1 < len(argv):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def reserved_option(parser: argparse.ArgumentParser, argv: list[str], dests: tuple[str, ...]) -> str | None:
    """The first option in argv (as the user spelled it) that sets one of `dests` of `parser`: the
    options a command that runs benchmarks sets itself (nightly's and bisect's refs, outputs, ...)."""
    spellings = {s for a in parser._actions if a.dest in dests for s in a.option_strings}
    return next((a.split("=")[0] for a in argv if a.split("=")[0] in spellings), None)
