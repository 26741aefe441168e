"""The Verdict enum: a verdict is its string (results.json, the history and older files compare
equal), with its marker, rank and one-word form in one place."""
from __future__ import annotations

import json

import pytest

import factories as fx
from refbench.verdict import BY_SEVERITY, Verdict, count, counts_line


def test_a_verdict_is_the_string_results_json_holds():
    assert [v.value for v in Verdict] == ["slower", "faster", "no significant change", "inconclusive",
                                          "identical binary", "not supported"]
    assert Verdict.SAME == "no significant change" and f"{Verdict.SAME}" == str(Verdict.SAME) == Verdict.SAME.value
    assert json.dumps({Verdict.SLOWER: Verdict.FASTER}) == '{"slower": "faster"}'
    assert {Verdict.SLOWER: 1}["slower"] == 1  # counts keyed by the enum answer to the strings templates use


def test_marker_severity_and_word():
    assert "".join(v.marker for v in Verdict) == "🔴🟢⚪🟡🟰➖"
    assert BY_SEVERITY == (Verdict.SLOWER, Verdict.FASTER, Verdict.INCONCLUSIVE, Verdict.SAME, Verdict.IDENTICAL,
                           Verdict.NOT_SUPPORTED)
    assert [v.word for v in Verdict] == ["slower", "faster", "same", "unsure", "identical", "unsupported"]
    assert [v for v in Verdict if v.moved] == [Verdict.SLOWER, Verdict.FASTER]
    assert [v for v in Verdict if v.no_change] == [Verdict.SAME, Verdict.IDENTICAL]


def test_count_and_counts_line():
    counts = count(["slower", Verdict.SLOWER, "inconclusive"])
    assert list(counts) == list(Verdict) and counts == {Verdict.SLOWER: 2, Verdict.FASTER: 0, Verdict.SAME: 0,
                                                        Verdict.INCONCLUSIVE: 1, Verdict.IDENTICAL: 0,
                                                        Verdict.NOT_SUPPORTED: 0}
    assert counts_line(counts) == "2 slower, 0 faster, 0 no significant change, 1 inconclusive"
    assert counts_line(count(["identical binary"])).endswith(", 1 identical binary")
    # an implementation's unsupported step: named only where there is one, never a change
    assert counts_line(count(["not supported"])).endswith("0 inconclusive, 1 not supported")
    assert not Verdict.NOT_SUPPORTED.moved and not Verdict.NOT_SUPPORTED.no_change
    with pytest.raises(ValueError):
        count(["slowish"])


def test_a_comparison_read_back_has_a_typed_verdict():
    r = fx.basic()
    assert all(isinstance(c.verdict, Verdict) for _, _, c in r.comparisons())
    assert r.verdict_counts() == count(c.verdict for _, _, c in r.comparisons())
