"""Change points in a nightly series, with Apache Otava's E-Divisive means (Hunter).

`detect(series, params)` looks only for shifts that persist:

1. single-night spikes are taken out first: every night but the first and the last becomes the
   median of itself and its two neighbours (a running median of 3). A noisy night between two
   normal ones disappears; a new level that holds two nights or more keeps its first night.
2. the result goes through `otava.analysis.compute_change_points(series, window_len, max_pvalue,
   min_magnitude)` (E-Divisive split over sliding windows, then the t-test merge step);
3. a change point whose new level lasts fewer than `min_nights` nights is dropped (the last night
   is never smoothed, so a single slow last night is never a change point until the next night
   confirms it), the neighbours' statistics are recomputed without it (two-sample t-test between
   the adjacent segments of raw nights, relative change of their medians), and filtered again by
   p-value and magnitude.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from .verdict import THRESHOLD


@dataclass(frozen=True)
class Params:
    window: int = 30  # Otava's window_len: nights per sliding window of the split step
    max_pvalue: float = 0.001  # a change point's t-test p-value must be below this
    min_magnitude: float = THRESHOLD  # ... and its relative change beyond this (nightly: the run's --threshold)
    min_nights: int = 2  # a new level must last this many nights (1 = alarm on a single slow night)
    despike: bool = True  # running median of 3 before the analysis


@dataclass(frozen=True)
class ChangePoint:
    index: int  # first night (0-based position in the series) of the new level
    before: float  # median of the segment before
    after: float  # median of the segment from index to the next change point
    rel: float  # after / before - 1 (> 0: slower, for times)
    pvalue: float
    nights_before: int
    nights_after: int

    @property
    def slower(self) -> bool:
        return self.rel > 0


def _otava_indices(series: list[float], p: Params) -> list[int]:
    from otava.analysis import compute_change_points

    # a plain list: Otava 0.8 slices its windows only from sequences that are not numpy arrays
    cps, _weak = compute_change_points([float(x) for x in series], window_len=max(2, p.window),
                                       max_pvalue=p.max_pvalue, min_magnitude=p.min_magnitude)
    return sorted({int(c.index) for c in cps if 0 < int(c.index) < len(series)})


def _stats(series: np.ndarray, idx: list[int]) -> list[ChangePoint]:
    """Each change point against its neighbours, on the raw nights: the medians of the two
    segments (a spike inside one cannot make or break a change) and a t-test."""
    bounds = [0, *idx, len(series)]
    out = []
    for k, i in enumerate(idx):
        left, right = series[bounds[k]:i], series[i:bounds[k + 2]]
        before, after = float(np.median(left)), float(np.median(right))
        if len(left) + len(right) > 2 and (left.std() > 0 or right.std() > 0):
            p = float(sps.ttest_ind(left, right, equal_var=True).pvalue)
        else:
            p = 0.0 if before != after else 1.0
        rel = after / before - 1 if before > 0 else math.inf
        out.append(ChangePoint(i, before, after, rel, p if math.isfinite(p) else 1.0, len(left), len(right)))
    return out


def despike(values: list[float]) -> list[float]:
    """Running median of 3; the first and last values stay as they are."""
    return [v if i in (0, len(values) - 1) else sorted(values[i - 1:i + 2])[1] for i, v in enumerate(values)]


def detect(series, params: Params = Params()) -> list[ChangePoint]:
    """Persistent change points of `series` (one value per night, oldest first)."""
    values = [float(x) for x in series if x is not None and math.isfinite(float(x))]
    if len(values) < max(3, params.min_nights + 2):
        return []
    arr = np.asarray(values)
    idx = _otava_indices(despike(values) if params.despike else values, params)
    while idx:
        cps = _stats(arr, idx)
        short = [c for c in cps if c.nights_after < params.min_nights or c.nights_before < params.min_nights]
        if short:  # a transient: drop the shortest-lived level first, then look again
            drop = min(short, key=lambda c: (min(c.nights_after, c.nights_before), c.pvalue))
            idx.remove(drop.index)
            continue
        weak = [c for c in cps if not (c.pvalue < params.max_pvalue and abs(c.rel) > params.min_magnitude)]
        if weak:
            idx.remove(max(weak, key=lambda c: (c.pvalue, -abs(c.rel))).index)
            continue
        return cps
    return []
