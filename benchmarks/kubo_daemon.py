#!/usr/bin/env python3
"""The daemon's own metrics (issue 36) on real kubo builds: not a test, prints the figures for the
closing note. Cases run one after another, never two at once on 2 cores.

  hold64  kubo v0.40.1 against the same kubo whose `ipfs add` holds 64 MiB more of the Go heap while
          it runs (tests/origins.make_kubo_hold_origin), in a default --quick run (online daemon).
          Target: `slower` on daemon memory for the add steps, while the CLI's memory (the thin
          client hyperfine times) is `no significant change`.
  aa      kubo v0.40.1 against itself (--measure-identical), default --quick, online. Target: no
          daemon metric gives a verdict, and each is `no significant change` on >= 80% of steps.
  aa-long the same on three steps (small files / add, large file / add, large file / get) with
          five minutes of measuring each (--budget 15m) where --quick gives one: whether daemon CPU,
          `inconclusive` on every step of a --quick A/A, is shown unchanged once it has the runs
          its noise asks for (a question of the budget, not of the metric).
  aa-60m  the whole `aa` (its 12 online steps) with five minutes of measuring a step (--budget
          60m): the A/A target on every step, at half the full defaults' ten minutes a step.
  aa-1    the default --quick `aa` with --runs-per-daemon 1: every run on a daemon of its own, so
          no daemon's level is shared by two runs (benchmarks/daemon_clusters.py: shared by the
          runs of a part of 4, it lifts a step's false alarms from 5% to 9-22%); what it costs.
  aa-raw  the same on tree / add --raw-leaves alone (--only), the step whose A/A gave a false
          `faster` on wall and daemon CPU twice (issue 36); aa-tree: the tree scenario's five steps.
          Each A/A case also prints, per step and build, the medians by where a run sat in its
          hyperfine call (first of the call, after its own build's run, after the other's): a bias
          that follows a position shows there, one that follows a daemon shows in every column.

  Each A/A case also prints the lag-1 autocorrelation of the builds' daemon-CPU difference (log
  B - log A, run by run), against the same series shuffled: drift of the whole machine cancels in
  the difference, a daemon's own drift does not (the reason for --daemon-restart-every, issue 36).
  And per step the intraclass correlation of log B - log A by round (icc): the share of its
  variance that is the round's, i.e. of the round's two daemons (each daemon has a level of its
  own for its whole life), beside the round-as-unit estimate (the mean of the rounds' mean log
  ratios, a t-test over rounds): what judging the daemon's metrics by round would say.
  --restart-every K passes --daemon-restart-every K to every case (0: one daemon per scenario);
  --analyse FILE... prints the correlation of results files already written, and runs nothing.

kubo's own documented daemon changes are cases of benchmarks/kubo_history.py (v040-go126,
v035-online-add, v040-batch-memory); their daemon figures print there.

Usage: .venv/bin/python benchmarks/kubo_daemon.py [--cases hold64,aa] [--out DIR] [--builds-dir DIR]
       [--restart-every K] [--analyse FILE...]
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from kubo_history import arguments, run_case  # noqa: E402

CASES = {
    "hold64": (("v1.0.0", "v1.1.0"), ("--quick",)),
    "aa": (("v1.0.0", "v1.0.0"), ("--quick", "--measure-identical")),
    "aa-raw": (("v1.0.0", "v1.0.0"), ("--quick", "--measure-identical", "--only", "tree/add --raw-leaves", "--no-profile")),
    "aa-tree": (("v1.0.0", "v1.0.0"), ("--quick", "--measure-identical", "--only", "tree", "--no-profile")),
    "aa-long": (("v1.0.0", "v1.0.0"), ("--quick", "--measure-identical", "--only", "small files/add", "--only",
                                       "large file/add", "--only", "large file/get", "--budget", "15m", "--no-profile")),
    "aa-60m": (("v1.0.0", "v1.0.0"), ("--quick", "--measure-identical", "--budget", "60m", "--no-profile")),
    "aa-1": (("v1.0.0", "v1.0.0"), ("--quick", "--measure-identical", "--runs-per-daemon", "1")),
}
DAEMON = ("daemon-cpu", "daemon-memory", "daemon-writes", "daemon-alloc")


def origin(out: Path) -> Path:
    """The cases' local origin, made once per output directory (v1.0.0 is built once for both)."""
    from origins import make_kubo_hold_origin

    root = out / "origin-kubo-hold"
    if not (root / "origin.git").is_dir():
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        make_kubo_hold_origin(root)
    return root / "origin.git"


def verdicts(doc: dict) -> list[tuple[str, str, str, float]]:
    """(step, metric, verdict, relative change) of every comparison of a results document."""
    return [(f"{sc['name']}/{st['name']}", c["metric"], c["verdict"], c["rel"])
            for sc in doc["scenarios"] for st in sc["steps"] for c in st["comparisons"]]


def report(name: str, r: dict) -> None:
    print(f"\n## {name} ({r['seconds']} s)")
    if "error" in r:
        print(f"  failed: {r['error']}")
        return
    rows = verdicts(r["doc"])
    for step, metric, verdict, rel in rows:
        if metric in ("wall", "memory", *DAEMON):
            print(f"  {step:40s} {metric:14s} {verdict:26s} {rel:+.1%}")
    daemon = [(s, m, v) for s, m, v, _ in rows if m in DAEMON]
    judged = [v for _, _, v in daemon if v != "not judged"]
    unchanged = sum(v == "no significant change" for v in judged)
    print(f"  daemon comparisons: {len(daemon)}; judged {len(judged)}; no significant change {unchanged}"
          f" ({unchanged / max(len(judged), 1):.0%}); others: "
          f"{sorted({(s, m, v) for s, m, v in daemon if v not in ('no significant change',)})}")


def positions(doc: dict, metrics: tuple[str, ...] = ("times", "daemon_cpu")) -> None:
    """Per step and build, each metric's median (ms) by the run's place in its round's hyperfine
    call: its first run, a run right after the same build's, a run right after the other's. The
    calls are rebuilt from the run's order seed as the runner made them (round_orders), a round
    longer than a planned one in parts (Runner.pair_cap, from f8ba00a on: a file written before
    that ran such rounds in one call, and its extra rounds' places are then misread)."""
    from statistics import median

    from refbench.runner import interleave_seq, round_orders, round_parts
    from refbench.stopping import split_runs
    seed = doc["settings"]["order_seed"]
    # a round longer than a planned one ran in parts, each on fresh daemons (Runner.pair_cap)
    planned = doc["settings"].get("runs"), doc["settings"].get("rounds")
    cap = doc["settings"].get("pair_runs") or (max(split_runs(*planned)) if all(isinstance(v, int) for v in planned) else None)
    for sc in doc["scenarios"]:
        for st in sc["steps"]:
            labels = list(st["builds"])
            if len(labels) != 2 or any(m not in st["builds"][lab] for lab in labels for m in metrics):
                continue
            where: dict[int, dict[str, list[int]]] = {0: {}, 1: {}}
            seen = [0, 0]
            for r in range(st["rounds"]):
                runs = st["builds"][labels[0]]["rounds"].count(r)
                for part, n in round_parts(round_orders(2, r + 1, seed)[r], runs, cap):  # a call each
                    seq, _ = interleave_seq(part, n, "runs")
                    for pos, b in enumerate(seq):
                        place = "first" if pos == 0 else "after own" if seq[pos - 1] == b else "after other"
                        where[b].setdefault(place, []).append(seen[b])
                        seen[b] += 1
            for b, lab in enumerate(labels):
                cells = [f"{place} (n {len(ix)}): " + " / ".join(
                    f"{1000 * median(st['builds'][lab][m][i] for i in ix):.0f}" for m in metrics)
                    for place, ix in sorted(where[b].items())]
                print(f"  {sc['name'] + '/' + st['name']:40s} {lab:12s} {' | '.join(cells)}  ({' / '.join(metrics)}, ms)")


def lag1(x: list[float]) -> float:
    """The lag-1 autocorrelation of a series (0.0 for a constant one)."""
    m = sum(x) / len(x)
    d = [v - m for v in x]
    den = sum(v * v for v in d)
    return sum(a * b for a, b in zip(d, d[1:])) / den if den else 0.0


def two_build_steps(doc: dict):
    """(scenario/step, its two builds' records) of every step of a results document run by two builds."""
    for sc in doc["scenarios"]:
        for st in sc["steps"]:
            if len(st["builds"]) == 2:
                yield f"{sc['name']}/{st['name']}", list(st["builds"].values())


def series(builds: list[dict], metric: str, least: int = 2) -> tuple[list[float], list[float]] | None:
    """The two builds' per-run figures of `metric`, run i of each side by side; None where a build
    lacks it, they differ in length, have fewer than `least` runs or a figure is not positive (logs)."""
    a, b = builds[0].get(metric), builds[1].get(metric)
    if not a or not b or len(a) != len(b) or len(a) < least or min(a + b) <= 0:
        return None
    return a, b


def correlation(doc: dict, metrics: tuple[str, ...] = ("daemon_cpu", "times"), shuffles: int = 1000) -> list[str]:
    """Per step of a two-build results document and per metric: the lag-1 autocorrelation of the
    run-by-run difference log B - log A in run order, the mean of the same series shuffled, and the
    share of shuffles at least as high (p). Runs i of A and B ran side by side in one round, so
    whatever drifts on the whole machine cancels; what is left is each build's own process."""
    import math
    import random

    rng = random.Random(1)
    rows = []
    for name, builds in two_build_steps(doc):
        cells = []
        for m in metrics:
            if (pair := series(builds, m, least=6)) is None:
                continue
            diff = [math.log(y) - math.log(x) for x, y in zip(*pair)]
            r, shuffled = lag1(diff), []
            for _ in range(shuffles):
                rng.shuffle(diff)
                shuffled.append(lag1(diff))
            p = sum(v >= r for v in shuffled) / shuffles
            cells.append(f"{m} {r:+.2f} (shuffled {sum(shuffled) / shuffles:+.2f}, p {p:.3f})")
        if cells:
            rows.append(f"  {name:40s} lag-1 of log B - log A: {'; '.join(cells)}")
    return rows


def icc(groups: list[list[float]]) -> float:
    """The intraclass correlation of a one-way layout (ANOVA estimator, unequal group sizes by their
    mean): the share of the variance that lies between the groups; 0.0 when nothing varies."""
    from statistics import fmean

    k, n = len(groups), sum(map(len, groups))
    grand = fmean(v for g in groups for v in g)
    msb = sum(len(g) * (fmean(g) - grand) ** 2 for g in groups) / (k - 1)
    msw = sum((v - fmean(g)) ** 2 for g in groups for v in g) / (n - k)
    den = msb + (n / k - 1) * msw
    return (msb - msw) / den if den > 0 else 0.0


def round_icc(doc: dict, metrics: tuple[str, ...] = ("daemon_cpu", "daemon_memory", "times")) -> list[str]:
    """Per step of a two-build results document and per metric: icc of the run-by-run log B - log A
    grouped by round, and the round-as-unit estimate with its t-test over rounds (p); then each
    metric's mean icc over the steps. Runs of one round share their two daemons."""
    import math
    from statistics import fmean

    from scipy import stats as sps

    rows, seen = [], {}
    for name, builds in two_build_steps(doc):
        cells = []
        for m in metrics:
            if (pair := series(builds, m)) is None:
                continue
            by: dict[int, list[float]] = {}
            for r, x, y in zip(builds[0]["rounds"], *pair):
                by.setdefault(r, []).append(math.log(y) - math.log(x))
            groups = [g for g in by.values() if len(g) >= 2]
            if len(groups) < 3:
                continue
            means = [fmean(g) for g in groups]
            seen.setdefault(m, []).append(icc(groups))
            cells.append(f"{m} icc {seen[m][-1]:+.2f}, by round {math.expm1(fmean(means)):+.1%} "
                         f"(p {sps.ttest_1samp(means, 0.0).pvalue:.3f}, {len(groups)} rounds)")
        if cells:
            rows.append(f"  {name:40s} {'; '.join(cells)}")
    rows += [f"  mean icc of {m}: {fmean(v):+.2f} over {len(v)} steps" for m, v in seen.items()]
    return rows


def main() -> None:
    def extra(ap) -> None:
        ap.add_argument("--restart-every", type=int, default=None, metavar="K")
        ap.add_argument("--analyse", nargs="+", metavar="FILE", default=None)

    args, out = arguments(__doc__, CASES, "/tmp/kubo-daemon", extra)
    if args.analyse:
        for f in args.analyse:
            print(f"\n## {f}")
            doc = json.loads(Path(f).read_text())
            print("\n".join(correlation(doc) + round_icc(doc)))
        return
    repo = origin(out)
    restart = () if args.restart_every is None else ("--daemon-restart-every", str(args.restart_every))
    cases = {name: (refs, (*options, *restart)) for name, (refs, options) in CASES.items()}
    for name in args.cases.split(","):
        source = ("-t", "kubo", "--repo", str(repo))
        r = run_case(name, out, Path(args.builds_dir), cases, source)
        report(name, r)
        if "doc" in r:
            print(f"  daemon restarts: {r['doc']['backend'].get('daemon restarts', 'not recorded')}")
        if name.startswith("aa") and "doc" in r:
            positions(r["doc"])
            print("\n".join(correlation(r["doc"])))
            print("\n".join(round_icc(r["doc"])))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
