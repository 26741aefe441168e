"""The verdict engine: a run's last steps, in one place.

Per-metric comparisons come from stats (the runner's per look, `compare`'s per saved pair of
builds); everything after them is here: the criteria a run is judged by (the options over the
defaults, or a results file's recorded settings — rebuilt in exactly one way), the adjustment of
the whole family of comparisons (steps × contenders × metrics, weighted Benjamini–Hochberg), the
verdicts it settles, the N-way scoreboard, and which verdicts fail a run (--fail-on-regression,
--fail-on). `pipeline.run` (and so nightly, bisect and calibrate, which run it), `merge` and
`compare` all call it, so a sharded, merged or re-compared run cannot be judged differently
from the run itself.

Before measuring, `design_warnings` says which steps' designs cannot reach a verdict at all.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from . import results as rs, stats
from .figures import criteria  # noqa: F401  (what every command that judges builds its criteria with)
# which verdicts fail a run is the verdicts' own (commands' argument checks read it without stats)
from .verdict import fail_metrics, failing  # noqa: F401

MULTIPLE_TESTING = "benjamini-hochberg across the run's comparisons (steps x contenders x metrics)"


# ---- the criteria ----------------------------------------------------------------------------
def recorded(settings: rs.Settings) -> stats.Criteria:
    """The criteria a results file's settings record: how `merge` (and anything else re-judging a
    saved run) judges it as the run did, metric thresholds included."""
    return settings.criteria


# ---- the family -------------------------------------------------------------------------------
def adjust_groups(groups: list[list[stats.Comparison]], criteria: stats.Criteria,
                  per_contender: bool = False) -> list[list[stats.Comparison]]:
    """Comparisons in groups (a step's, a compared pair's) adjusted as one family: every comparison
    of the run, or (calibrate) each contender's apart. New lists; the comparisons given stay."""
    comps = [list(g) for g in groups]
    contenders = list(dict.fromkeys(c.contender for cs in comps for c in cs))
    for family in (contenders if per_contender else [None]):
        members = [(k, i) for k, cs in enumerate(comps) for i in range(len(cs))
                   if family is None or cs[i].contender == family]
        for (k, i), c in zip(members, stats.adjust_family([comps[k][i] for k, i in members], criteria)):
            comps[k][i] = c
    return comps


def adjust(scenarios: Iterable[rs.Scenario], criteria: stats.Criteria,
           per_contender: bool = False) -> tuple[rs.Scenario, ...]:
    """The run's p-value adjustment over its family; new scenarios, the measured ones unchanged."""
    scenarios = list(scenarios)
    adjusted = iter(adjust_groups([list(st.all_comparisons()) for sc in scenarios for st in sc.steps],
                                  criteria, per_contender))
    return tuple(dataclasses.replace(sc, steps=tuple(_with_comparisons(st, next(adjusted)) for st in sc.steps))
                 for sc in scenarios)


def _with_comparisons(st: rs.Step, comps: list) -> rs.Step:
    """The step with its comparisons replaced, wall apart from the other metrics as rs.Step keeps them."""
    return dataclasses.replace(st, comparisons=tuple(c for c in comps if c.metric == "wall"),
                               metric_comparisons=tuple(c for c in comps if c.metric != "wall"))


def unadjusted(c: stats.Comparison) -> stats.Comparison:
    """A comparison with its own p-value back (p_raw, where an adjustment replaced it): what a
    shard's comparison was before the shard adjusted it within itself. A plain Comparison, so its
    phrase is said again from the stored factor, as for any comparison judged again."""
    kw = {f.name: getattr(c, f.name) for f in dataclasses.fields(stats.Comparison)}
    return stats.Comparison(**{**kw, "p_value": c.p_value if c.p_raw is None else c.p_raw, "p_raw": None})


# ---- the run's verdicts -------------------------------------------------------------------------
@dataclass(frozen=True)
class Judged:
    """A run's scenarios with their family-adjusted verdicts, and its scoreboard (None for two builds)."""
    scenarios: tuple[rs.Scenario, ...]
    scoreboard: dict | None


def scoreboard(scenarios: Iterable[rs.Scenario], labels) -> dict | None:
    """The N-way scoreboard from the wall-time comparisons (stats.scoreboard)."""
    return stats.scoreboard((st.comparisons for sc in scenarios for st in sc.steps), list(labels))


def verdicts(scenarios: Iterable[rs.Scenario], labels, criteria: stats.Criteria,
             per_contender: bool = False) -> Judged:
    """A run's last steps: its comparisons adjusted as one family (per contender for calibrate),
    which settles their verdicts, and the scoreboard."""
    adjusted = adjust(scenarios, criteria, per_contender)
    return Judged(adjusted, scoreboard(adjusted, labels))


def rejudge(scenarios: Iterable[rs.Scenario], labels, criteria: stats.Criteria) -> Judged:
    """Saved comparisons judged again as one run: each from its own p-value (a shard adjusted
    within the shard only), then verdicts() over all of them (merge)."""
    raw = [dataclasses.replace(sc, steps=tuple(dataclasses.replace(
        st, comparisons=tuple(unadjusted(c) for c in st.comparisons),
        metric_comparisons=tuple(unadjusted(c) for c in st.metric_comparisons)) for st in sc.steps))
        for sc in scenarios]
    return verdicts(raw, labels, criteria)


# ---- before measuring --------------------------------------------------------------------------
def design_warnings(units, rounds: int, criteria: stats.Criteria) -> list[str]:
    """One line naming the judged steps whose planned rounds cannot reach alpha at all (1 round of
    1 + 1 runs: two arrangements and no noise to estimate), said before anything is measured."""
    from .runner import split_runs  # the runner's own split of a step's runs into rounds
    lost = [u for u in units
            if not stats.reachable([(k, k) for k in split_runs(u.runs, rounds)], criteria)]
    if not lost:
        return []
    names = ", ".join(f"{u.scenario.name} / {u.step.name}" for u in lost[:3]) + (" ..." if len(lost) > 3 else "")
    return [f"{len(lost)} step(s) cannot reach a verdict at alpha {criteria.alpha:g} ({names}): one run per build "
            "gives no test anything to decide with; they are timed, not judged (-r 2 or more to judge them)"]
