"""The values of the results model's number mappings are checked on reading: a results file may
have been written by a pull request's untrusted job, and the summary and PR comment print these
counts as they are (explain.py's `f"{n}"` of a profile's samples, an API's requests), so a string
where a count belongs must be a malformed file, never text in the comment."""
from __future__ import annotations

import json

import pytest

from factories import one_step_doc
from refbench import results as rs
from refbench.errors import RefbenchError

STEP = "scenarios[0].steps[0]"


def _explained_doc() -> dict:
    """one_step_doc with what explains a change: each build's S3 requests and a CPU profile."""
    doc = one_step_doc()
    st = doc["scenarios"][0]["steps"][0]
    st["requests"] = {"v1.0.0": {"by_api": {"PutObject": 200, "HeadObject": 1}},
                      "PR #7": {"by_api": {"PutObject": 400, "HeadObject": 1}, "server_cpu": 0.25}}
    st["profiles"] = [{"baseline": "v1.0.0", "contender": "PR #7", "samples": {"v1.0.0": 1200, "PR #7": 1500},
                       "top": [{"function": "main.put", "baseline_share": 0.1, "contender_share": 0.2}],
                       "stacks": [["main;main.put", 120, 300]]}]
    doc["settings"]["metric_thresholds"] = {"cpu": 0.05, "memory": 1}  # a whole number is a float measure too
    doc["timing"]["untimed_by_kind"] = {"setup": 1.5, "check": 2}
    return doc


def _load(tmp_path, doc):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    return path, rs.load(path)


def test_a_file_with_numbers_in_its_number_mappings_loads_and_round_trips(tmp_path):
    doc = _explained_doc()
    _, res = _load(tmp_path, doc)
    st = res.scenarios[0].steps[0]
    assert dict(st.requests["PR #7"].by_api) == {"PutObject": 400, "HeadObject": 1}
    assert st.requests["PR #7"].total == 401
    assert dict(st.profiles[0].samples) == {"v1.0.0": 1200, "PR #7": 1500}
    assert dict(res.settings.metric_thresholds) == {"cpu": 0.05, "memory": 1}
    assert dict(res.timing.untimed_by_kind) == {"setup": 1.5, "check": 2}
    assert rs.Results.from_json(res.to_json()) == res
    with pytest.raises(TypeError):
        st.requests["PR #7"].by_api["PutObject"] = 1  # read-only, as before


@pytest.mark.parametrize("spoil,says", [
    (lambda d: d["scenarios"][0]["steps"][0]["requests"]["PR #7"]["by_api"].update(PutObject="<http:evil.example>"),
     f"{STEP}.requests['PR #7'].by_api['PutObject'] should be int, not str"),
    (lambda d: d["scenarios"][0]["steps"][0]["profiles"][0]["samples"].update({"v1.0.0": "<img src=x onerror=alert(1)>"}),
     f"{STEP}.profiles[0].samples['v1.0.0'] should be int, not str"),
    (lambda d: d["scenarios"][0]["steps"][0]["requests"]["v1.0.0"]["by_api"].update(PutObject=True),
     f"{STEP}.requests['v1.0.0'].by_api['PutObject'] should be int, not bool"),
    (lambda d: d["scenarios"][0]["steps"][0]["requests"]["v1.0.0"]["by_api"].update(PutObject=2.5),
     f"{STEP}.requests['v1.0.0'].by_api['PutObject'] should be int, not float"),
    (lambda d: d["scenarios"][0]["steps"][0]["profiles"][0]["samples"].update({"PR #7": None}),
     f"{STEP}.profiles[0].samples['PR #7'] should be int, not NoneType"),
    (lambda d: d["scenarios"][0]["steps"][0]["profiles"][0]["samples"].update({"PR #7": [1]}),
     f"{STEP}.profiles[0].samples['PR #7'] should be int, not list"),
    (lambda d: d["settings"]["metric_thresholds"].update(cpu="5%"),
     "settings.metric_thresholds['cpu'] should be int or float, not str"),
    (lambda d: d["timing"]["untimed_by_kind"].update(setup={"s": 1}),
     "timing.untimed_by_kind['setup'] should be int or float, not dict"),
    (lambda d: d["timing"]["untimed_by_kind"].update(setup=False),
     "timing.untimed_by_kind['setup'] should be int or float, not bool"),
])
def test_a_value_that_is_not_a_number_in_a_number_mapping_is_one_error_naming_the_key(tmp_path, spoil, says):
    doc = _explained_doc()
    spoil(doc)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(RefbenchError) as e:
        rs.load(path)
    assert str(e.value) == f"{path}: malformed results file: {says}"


@pytest.mark.parametrize("key,says", [(1, "key 1 should be str, not int"), (None, "key None should be str, not NoneType")])
def test_a_key_that_is_not_a_string_is_one_error_naming_it(key, says):
    """A JSON file's keys are strings; a document built in Python (from_json's other callers) may not be."""
    doc = _explained_doc()
    doc["scenarios"][0]["steps"][0]["profiles"][0]["samples"] = {key: 5}
    with pytest.raises(RefbenchError) as e:
        rs.Results.from_json(doc, "r.json")
    assert str(e.value) == f"r.json: malformed results file: {STEP}.profiles[0].samples {says}"


def test_every_mapping_of_numbers_is_checked_and_mappings_of_text_are_not():
    """The mappings whose values are numbers are found from the fields' annotations (one mechanism,
    nothing to remember for a new field); this list is the decision made for each. Text (a variant's
    environment) and free-form parts (backend, resources, cpus) are left as they are: every view
    escapes text where it prints it."""
    checked = {(cls.__name__, name) for cls in _docs() for name in rs._number_mappings(cls)}
    assert checked == {("Requests", "by_api"), ("Profile", "samples"), ("Settings", "metric_thresholds"),
                       ("Timing", "untimed_by_kind")}
    doc = one_step_doc()
    doc["builds"][1]["env"] = {"GOGC": "200"}
    assert dict(rs.Results.from_json(doc).builds[1].env) == {"GOGC": "200"}


def _docs() -> list[type]:
    return [v for v in vars(rs).values() if isinstance(v, type) and issubclass(v, rs._Doc) and v is not rs._Doc]
