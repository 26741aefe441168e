"""The bottom floor: sizes, durations and slugs, as scenarios.toml writes them and as every view
prints them. Config (the first stage) and render (the last) both import this module and nothing
else of each other, so a size or a name reads the same everywhere."""
from __future__ import annotations

import re

# binary multiples, as s5cmd's bench and truncate read them ("1M" = 1048576 bytes)
BINARY_UNITS = {"": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]?)(?:i?B)?\s*$", re.IGNORECASE)


def parse_size(text: str | int) -> int:
    """'1M' -> 1048576. K/M/G/T/P are binary multiples, as in s5cmd's bench (and truncate)."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise ValueError(f"size must not be negative: {text}")
        return text
    m = _SIZE_RE.fullmatch(str(text))
    if not m:
        raise ValueError(f"not a size: {text!r} (expected e.g. 512, 64K, 1M, 10G, 300G)")
    number, unit = m.groups()
    value = float(number) * BINARY_UNITS[unit.upper()]
    if value != int(value):
        raise ValueError(f"size is not a whole number of bytes: {text!r}")
    return int(value)


def format_size(n: int) -> str:
    """1048576 -> '1M': exact binary units when possible, else bytes (scenarios.toml's notation,
    the inverse of parse_size)."""
    for unit in ("P", "T", "G", "M", "K"):
        mult = BINARY_UNITS[unit]
        if n >= mult and n % mult == 0:
            return f"{n // mult}{unit}"
    return str(n)


def human_bytes(n: float) -> str:
    """A size with one decimal in the largest binary unit below it: '1.5 GiB' (CLI messages)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


def fmt_duration(seconds: float) -> str:
    """A wall-clock duration as a clock reads: 75 -> '1:15', 3725 -> '1:02:05'."""
    seconds = max(0, int(round(seconds)))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def slug(*parts: str) -> str:
    """A name for paths and HTML anchors: 'Small files', 'upload' -> 'small-files-upload'."""
    return re.sub(r"[^a-z0-9]+", "-", "-".join(parts).lower()).strip("-") or "x"


# rates, as networks are sold and S3's guidelines state them: decimal multiples of bytes or bits
# per second ("40MB/s" = 40,000,000 bytes/s, "1Gbit/s" = 125,000,000 bytes/s)
DECIMAL_UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(B|bit)/s\s*$", re.IGNORECASE)


def parse_rate(text: str | int) -> int:
    """'40MB/s' -> 40000000 bytes per second; '1Gbit/s' -> 125000000. Decimal multiples, as a
    network's speed is written (an integer is bytes per second)."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text <= 0:
            raise ValueError(f"a rate must be positive: {text}")
        return text
    m = _RATE_RE.fullmatch(str(text))
    if not m:
        raise ValueError(f"not a rate: {text!r} (expected e.g. 40MB/s, 1Gbit/s, 500KB/s)")
    number, unit, per = m.groups()
    value = float(number) * DECIMAL_UNITS[unit.upper()] / (8 if per.lower() == "bit" else 1)
    if value < 1:
        raise ValueError(f"a rate must be at least 1 byte per second: {text!r}")
    return int(value)


def format_rate(bytes_per_s: int) -> str:
    """125000000 -> '125 MB/s': the largest decimal unit, three significant digits at most."""
    for unit in ("T", "G", "M", "K"):
        mult = DECIMAL_UNITS[unit]
        if bytes_per_s >= mult:
            return f"{bytes_per_s / mult:.3g} {unit}B/s"
    return f"{bytes_per_s} B/s"
