"""Request accounting: what each build asked the S3 server to do in a step, counted by the server.

The embedded MinIO is started with MINIO_PROMETHEUS_AUTH_TYPE=public and its metrics v3 endpoint
`/minio/metrics/v3/api/requests` is read before and after one untimed run of each build: the
difference is that run's requests by API (`minio_api_requests_total{name=...,type="s3"}`), its
4xx / 5xx / canceled requests and the bytes the server received and sent. These are exact counts,
so any difference between builds is a fact, not an estimate. The v3 endpoint is computed on every
read; the v2 one caches its HTTP group for 10 s, which would blur one run into the next.

MinIO updates a request's counters just after its handler returns, so a read right after the
client exits can miss the last request: `settled` reads until two reads agree. A label appears
only after its first request, so a counter missing before the run counts as 0.
"""
from __future__ import annotations

import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Mapping

from prometheus_client.parser import text_string_to_metric_families

from . import results as rs
from .errors import RunError

METRICS_PATH = "/minio/metrics/v3/api/requests"
_PREFIX = "minio_api_requests_"
# the counters beside the per-API ones, as a Requests field each (totals only, no `name` label
# for the traffic ones)
_PER_API = {"total": "by_api", "4xx_errors_total": "errors_4xx", "5xx_errors_total": "errors_5xx",
            "canceled_total": "canceled"}
_TOTALS = {"traffic_received_bytes": "received_bytes", "traffic_sent_bytes": "sent_bytes"}
# what a RequestChange calls the counters that are not an API
_LABELS = {"received_bytes": "bytes received", "sent_bytes": "bytes sent", "errors_4xx": "4xx errors",
           "errors_5xx": "5xx errors", "canceled": "canceled requests"}
# The bytes of a response the server writes itself (a listing, a multi-delete's result) vary by a
# few bytes from run to run with the ids and times in it: the request counts are exact, the bytes
# exact only for the objects' data. So a byte count differs only beyond this slack.
BYTES_SLACK, BYTES_SLACK_SHARE = 4096, 0.01
_BYTE_KEYS = ("received_bytes", "sent_bytes")
BUCKET_NOTE = ("no request accounting and no server CPU per run: they need the embedded MinIO (its metrics, its "
               "process); -b BUCKET is a server refbench does not run")


@dataclass(frozen=True)
class Counters:
    """One read of the endpoint: the S3 counters, cumulative since the server started."""
    by_api: Mapping[str, int] = field(default_factory=dict)
    errors_4xx: int = 0
    errors_5xx: int = 0
    canceled: int = 0
    received_bytes: int = 0
    sent_bytes: int = 0


def parse(text: str) -> Counters:
    """The S3 request counters of a metrics v3 page (Prometheus text format; other request types,
    such as the server's internal ones, are left out)."""
    by_api: dict[str, int] = {}
    sums = {"errors_4xx": 0, "errors_5xx": 0, "canceled": 0, "received_bytes": 0, "sent_bytes": 0}
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as e:
        raise RunError(f"MinIO metrics ({METRICS_PATH}): not Prometheus text ({e})") from None
    for fam in families:
        for s in fam.samples:
            if not s.name.startswith(_PREFIX) or s.labels.get("type", "s3") != "s3":
                continue
            key = s.name[len(_PREFIX):]
            if key in _PER_API and "name" in s.labels:
                if _PER_API[key] == "by_api":
                    by_api[s.labels["name"]] = by_api.get(s.labels["name"], 0) + int(s.value)
                else:
                    sums[_PER_API[key]] += int(s.value)
            elif key.removesuffix("_total") in _TOTALS:  # the parser names a counter's sample *_total
                sums[_TOTALS[key.removesuffix("_total")]] += int(s.value)
    return Counters(by_api=MappingProxyType(by_api), **sums)


def scrape(endpoint: str, timeout: float = 5.0) -> Counters:
    url = endpoint.rstrip("/") + METRICS_PATH
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return parse(r.read().decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError) as e:
        raise RunError(f"cannot read MinIO's metrics at {url}: {e}") from None


def settled(endpoint: str, interval: float = 0.05, limit: float = 5.0) -> Counters:
    """Read until two reads in a row agree (counters are updated just after each handler
    returns); after `limit` seconds the last read is taken."""
    last = scrape(endpoint)
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        time.sleep(interval)
        now = scrape(endpoint)
        if now == last:
            return now
        last = now
    return last


def delta(before: Counters, after: Counters) -> rs.Requests:
    """The requests made between two reads (a label new in `after` started at 0)."""
    apis = {k: v - before.by_api.get(k, 0) for k, v in after.by_api.items()}
    return rs.Requests(by_api=MappingProxyType({k: v for k, v in sorted(apis.items()) if v}),
                       errors_4xx=after.errors_4xx - before.errors_4xx,
                       errors_5xx=after.errors_5xx - before.errors_5xx, canceled=after.canceled - before.canceled,
                       received_bytes=after.received_bytes - before.received_bytes,
                       sent_bytes=after.sent_bytes - before.sent_bytes)


def server_cpu(requests: rs.Requests, before: float | None, after: float | None) -> rs.Requests:
    """The run's requests with the server's CPU time over it (seconds, rounded to the clock tick's
    precision), where both reads were had. MinIO's background work (its scanner) in that time
    counts too: context beside the exact counts, never a verdict."""
    if before is None or after is None:
        return requests
    return replace(requests, server_cpu=round(max(0.0, after - before), 6))


def changes(baseline: rs.Requests, contender: rs.Requests, label: str) -> tuple[rs.RequestChange, ...]:
    """Every counter in which the contender's run differs from the baseline's: APIs first (by
    name), then bytes and errors."""
    out = []
    for api in sorted(set(baseline.by_api) | set(contender.by_api)):
        a, b = baseline.by_api.get(api, 0), contender.by_api.get(api, 0)
        if a != b:
            out.append(rs.RequestChange(contender=label, name=api, baseline_value=a, value=b))
    for key, name in _LABELS.items():
        a, b = getattr(baseline, key), getattr(contender, key)
        if a != b and not (key in _BYTE_KEYS and abs(b - a) <= max(BYTES_SLACK, BYTES_SLACK_SHARE * a)):
            out.append(rs.RequestChange(contender=label, name=name, baseline_value=a, value=b))
    return tuple(out)


def step_changes(requests: Mapping[str, rs.Requests], labels: list[str]) -> tuple[rs.RequestChange, ...]:
    """Each contender's changes against the baseline (labels[0])."""
    base = requests.get(labels[0])
    if base is None:
        return ()
    return tuple(c for lab in labels[1:] if lab in requests for c in changes(base, requests[lab], lab))
