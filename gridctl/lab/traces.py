"""Production-shaped workload traces: parsing, validation, and mapping onto a scenario.

A trace is a headerless CSV whose first two columns are a timestamp in seconds
and a request rate; further columns are ignored. It is bounded (5 MiB by the
policy's ``trace_max_bytes``, 100,000 rows) and validated for strictly
increasing timestamps and finite, nonnegative rates; every refusal names the
line. ``trace_curve`` maps the whole trace onto the scenario's duration and
normalises its mean to the built-in curve's, so a trace moves burst timing
without changing the offered-demand scale.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass

MAX_TRACE_ROWS = 100_000


class TraceError(ValueError):
    """A trace was refused; ``line`` is 1-based (0 when the whole file is at fault)."""

    def __init__(self, source: str, line: int, message: str) -> None:
        self.source, self.line, self.message = source, line, message
        where = f"{source}:{line}" if line else source
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class Trace:
    workload: str
    source: str
    times: tuple[float, ...]
    rates: tuple[float, ...]


def _number(text: str, what: str, source: str, line: int) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TraceError(source, line, f"{what} {text.strip()!r} is not a number") from None
    if not math.isfinite(value):
        raise TraceError(source, line, f"{what} {text.strip()!r} is not finite")
    return value


def parse_trace(workload: str, source: str, data: bytes, max_bytes: int) -> Trace:
    """Validate ``data`` (the file's bytes) and return the trace, or raise ``TraceError``."""
    if len(data) > max_bytes:
        raise TraceError(source, 0, f"trace is {len(data)} bytes; the limit is {max_bytes}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise TraceError(source, line, "not UTF-8 text") from None
    times: list[float] = []
    rates: list[float] = []
    for number, row in enumerate(csv.reader(text.splitlines()), start=1):
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(times) >= MAX_TRACE_ROWS:
            raise TraceError(source, number, f"more than {MAX_TRACE_ROWS} rows")
        if len(row) < 2:
            raise TraceError(source, number, "needs a timestamp and a rate")
        t = _number(row[0], "timestamp", source, number)
        rate = _number(row[1], "rate", source, number)
        if rate < 0:
            raise TraceError(source, number, f"rate {rate:g} is negative")
        if times and t <= times[-1]:
            raise TraceError(
                source, number, f"timestamp {t:g} is not after the previous one ({times[-1]:g})"
            )
        times.append(t)
        rates.append(rate)
    if not times:
        raise TraceError(source, 0, "trace has no rows")
    if sum(rates) <= 0:
        raise TraceError(source, 0, "every rate is zero")
    return Trace(workload, source, tuple(times), tuple(rates))


def trace_curve(trace: Trace, builtin: Sequence[float]) -> tuple[float, ...]:
    """The trace sampled onto ``len(builtin)`` minutes, its mean scaled to ``builtin``'s."""
    minutes = len(builtin)
    first, last = trace.times[0], trace.times[-1]
    span = last - first
    sampled: list[float] = []
    cursor = 0
    for minute in range(minutes):
        at = first + span * (minute + 0.5) / minutes if span > 0 else first
        while cursor + 1 < len(trace.times) and trace.times[cursor + 1] <= at:
            cursor += 1
        sampled.append(trace.rates[cursor])
    mean_trace = sum(sampled) / minutes
    mean_builtin = sum(builtin) / minutes
    if mean_trace <= 0:
        return tuple(0.0 for _ in sampled)
    scale = mean_builtin / mean_trace
    return tuple(v * scale for v in sampled)
