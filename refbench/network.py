"""Network profiles: how far the S3 server is from the commands, made real by a shaper on loopback.

The embedded MinIO answers on loopback in well under a millisecond and gives one connection all
the bandwidth there is: one stream is fastest there and every extra request is overhead. Users run
s5cmd against S3, where each request waits a round trip and each connection gets its own share of
bandwidth, and that is what most of s5cmd's performance work is about. Measured on loopback, a
change for that world can come out reversed (issue 26: s5cmd v2.2.0's concurrent `cat` of a
256 MiB object, +49% slower on loopback, 58% faster behind 10 ms and 40 MB/s per connection).

A profile names the round-trip time, each connection's bandwidth in each direction, and jitter.
`loopback` means no shaper at all (the commands reach MinIO directly); every other profile puts
toxiproxy (backends/toxiproxy.py) between the commands and the server, with the toxics `toxics()`
gives. toxiproxy shapes each connection on its own, as S3 limits each connection: a cap on all
connections together is not something it can do, so a profile has none (see docs/network.md).

Pure: no process is started here. The scenarios file may declare more profiles (`[networks.NAME]`,
read by `from_table`); a scenario or a step names the one it runs under, `--network` the one of
every step that names none.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping

from .errors import RefbenchError
from .units import format_rate, parse_rate

LOOPBACK = "loopback"  # no shaper: the commands talk to the server directly


@dataclass(frozen=True)
class NetworkProfile:
    name: str
    rtt_ms: int = 0  # added to every round trip: half on the way up, half on the way down
    jitter_ms: int = 0  # the round trip varies by up to +/- this, uniformly, chunk by chunk
    down: int | None = None  # bytes/s per connection, server to client (GET); None: not limited
    up: int | None = None  # bytes/s per connection, client to server (PUT)
    description: str = ""  # where the figures come from

    @property
    def direct(self) -> bool:
        """No shaper between the commands and the server."""
        return self.name == LOOPBACK

    def toxics(self) -> tuple[dict, ...]:
        """toxiproxy's toxics for this profile: a latency toxic on each direction that carries
        half the round trip (the odd millisecond goes down, with the response), then a bandwidth
        toxic per direction. toxiproxy's delays are whole milliseconds and its rates KB/s (1000
        bytes), so the figures are rounded the way it reads them."""
        up_ms, up_jitter = self.rtt_ms // 2, self.jitter_ms // 2
        legs = (("upstream", up_ms, up_jitter, self.up),
                ("downstream", self.rtt_ms - up_ms, self.jitter_ms - up_jitter, self.down))
        out = []
        for stream, delay, jitter, rate in legs:
            if delay or jitter:
                out.append(_toxic("latency", stream, latency=delay, jitter=jitter))
            if rate:
                out.append(_toxic("bandwidth", stream, rate=max(1, rate // 1000)))
        return tuple(out)

    def words(self) -> str:
        """The figures as a reader of the summary needs them: '10 ms round trip, 40 MB/s per
        connection each way'."""
        if self.direct:
            return "no shaping: MinIO directly on 127.0.0.1"
        parts = [f"{self.rtt_ms} ms round trip" + (f" ± {self.jitter_ms} ms" if self.jitter_ms else "")]
        if self.up and self.up == self.down:
            parts.append(f"{format_rate(self.up)} per connection each way")
        else:
            parts += [f"{format_rate(rate)} per connection {way}" for way, rate in (("down", self.down), ("up", self.up))
                      if rate]
        return ", ".join(parts)

    def record(self) -> dict:
        """The profile as results.json keeps it (beside the name each step records)."""
        return {"rtt_ms": self.rtt_ms, "jitter_ms": self.jitter_ms, "down_bytes_per_s": self.down,
                "up_bytes_per_s": self.up, "words": self.words()}


def _toxic(kind: str, stream: str, **attributes) -> dict:
    return {"name": f"{kind}_{stream}", "type": kind, "stream": stream, "toxicity": 1.0, "attributes": attributes}


# The bundled profiles. Their reasons are in docs/network.md ("Why these figures"); in short:
BUNDLED: Mapping[str, NetworkProfile] = MappingProxyType({
    LOOPBACK: NetworkProfile(LOOPBACK, description="the embedded MinIO on 127.0.0.1, no shaper: the default"),
    # a server on the same switch: 1 GbE, a round trip of 0.1-0.5 ms, which toxiproxy (whole
    # milliseconds) can only give as 1 ms
    "lan": NetworkProfile("lan", rtt_ms=1, down=125_000_000, up=125_000_000,
                          description="a server on the same LAN: 1 Gbit/s per connection, 1 ms round trip "
                                      "(toxiproxy's smallest; a switched LAN's is 0.1-0.5 ms)"),
    # S3 from EC2 in the same region: each request waits tens of milliseconds (network and S3's
    # own time to first byte; MinIO's own is under 1 ms here), each connection streams 40-90 MB/s
    "region": NetworkProfile("region", rtt_ms=10, down=40_000_000, up=40_000_000,
                             description="S3 from EC2 in the same region: 10 ms per round trip (5 ms each way), "
                                         "40 MB/s per connection each way (AWS: 85-90 MB/s per connection at best)"),
})

PROFILE_KEYS = ("rtt", "jitter", "down", "up", "description")
_TOTAL_KEYS = ("total", "total_up", "total_down", "bandwidth_total")


def from_table(name: str, table: Any, fail: Callable[[str, str, Any], Exception]) -> NetworkProfile:
    """A `[networks.NAME]` table of the scenarios file: rtt and jitter in whole milliseconds,
    down and up as rates ('40MB/s', '1Gbit/s'; absent: not limited), a description. `fail(key,
    expected, got)` makes the error that names the file and the key."""
    where = f"networks.{name}"
    if name in BUNDLED:
        return _raise(fail(where, f"a name other than the bundled profiles ({', '.join(BUNDLED)}), whose figures "
                                  "are documented and fixed", name))
    if not isinstance(table, dict):
        return _raise(fail(where, "a table", table))
    for key in table:
        if key in _TOTAL_KEYS:
            return _raise(fail(f"{where}.{key}", "no cap on all connections together: toxiproxy shapes each "
                                                 "connection on its own (give down / up per connection)", table[key]))
        if key not in PROFILE_KEYS:
            return _raise(fail(f"{where}.{key}", f"one of the keys {', '.join(PROFILE_KEYS)}", key))
    rtt, jitter = (_millis(table, k, where, fail) for k in ("rtt", "jitter"))
    if jitter > rtt:
        return _raise(fail(f"{where}.jitter", f"at most the round trip ({rtt} ms): a delay cannot go below zero", jitter))
    description = table.get("description", "")
    if not isinstance(description, str):
        return _raise(fail(f"{where}.description", "a string", description))
    down, up = (_rate(table, k, where, fail) for k in ("down", "up"))
    return NetworkProfile(name, rtt_ms=rtt, jitter_ms=jitter, down=down, up=up, description=description)


def _millis(table: dict, key: str, where: str, fail) -> int:
    value = table.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        _raise(fail(f"{where}.{key}", "a whole number of milliseconds >= 0 (toxiproxy's delays are whole "
                                      "milliseconds)", value))
    return value


def _rate(table: dict, key: str, where: str, fail) -> int | None:
    if key not in table:
        return None
    try:
        return parse_rate(table[key])
    except ValueError:
        return _raise(fail(f"{where}.{key}", "a rate per connection like 40MB/s, 1Gbit/s or 500KB/s", table[key]))


def _raise(error: Exception):
    raise error


def resolve(name: str, profiles: Mapping[str, NetworkProfile], what: str = "--network") -> NetworkProfile:
    """The profile called `name`, or one line naming the profiles there are."""
    if name not in profiles:
        raise RefbenchError(f"{what}: unknown network profile {name!r} (known: {', '.join(profiles)})")
    return profiles[name]


def effective(step: str | None, scenario: str | None, run: str | None) -> str:
    """The profile a step runs under: its own, else its scenario's, else the run's --network,
    else loopback. A name declared in the scenarios file is a property of the step (a step
    called 'cat, region' must not run on loopback), so --network fills in only where none is."""
    return step or scenario or run or LOOPBACK
