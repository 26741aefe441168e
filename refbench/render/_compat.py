"""Interim: defaults for older results files until results.Results.from_json fills them."""
from __future__ import annotations

from .. import stats

# ---- reading any schema version ----------------------------------------------------------------
_BUILD_DEFAULTS = {"times": [], "user": [], "system": [], "exit_codes": [], "rounds": [], "stats": None,
                   "cpu_mean": None, "cpu_wall_ratio": None, "rss_kb": None, "check": None, "command": "",
                   "prepare": None}


def normalise(results: dict) -> dict:
    """A copy with every optional field present, so views read files written by any schema
    version this refbench accepts (fields added later default to None / empty)."""
    import copy
    r = copy.deepcopy(results)
    for k, v in (("environment", {}), ("timing", {}), ("command_line", []), ("backend", {}), ("scoreboard", None),
                 ("created", ""), ("refbench", ""), ("target", {"name": "?"})):
        if r.get(k) is None:
            r[k] = v
    r["backend"].setdefault("kind", "")
    st_defaults = {"runs": None, "warmup": None, "rounds": None, "check_differs": False, "comparisons": []}
    for sc in r.get("scenarios", []):
        sc.setdefault("fixture", {})
        for k in ("kind", "files", "bytes", "size", "count"):
            sc["fixture"].setdefault(k, None)
        for st in sc.get("steps", []):
            for k, v in st_defaults.items():
                st.setdefault(k, v)
            for lab, b in st.get("builds", {}).items():
                for k, v in _BUILD_DEFAULTS.items():
                    b.setdefault(k, copy.copy(v))
                if b["stats"] is None and b["times"]:
                    b["stats"] = stats.summarize(b["times"]).to_json()
    s = r.setdefault("settings", {})
    for k, v in (("runs", "?"), ("rounds", "?"), ("warmup", "?"), ("quick", False), ("threshold", 0.05),
                 ("alpha", 0.05), ("noise_limit", 0.10)):
        s.setdefault(k, v)
    for b in r.get("builds", []):
        for k in ("ref", "sha", "kind", "source", "toolchain", "build_seconds"):
            b.setdefault(k, None)
        b.setdefault("cached", False)
    r.setdefault("baseline", r["builds"][0]["label"] if r.get("builds") else None)
    return r
