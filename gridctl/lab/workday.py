"""The seeded workday: demand curves per workload and the fleet's physical events.

Phases are fractions of the scenario's duration, so a 30-minute and a
two-hour day have the same shape: a morning ramp, a coding surge, a creative
campaign, a thermal throttle of the first GPU server, an outage of one office
machine, its recovery, and a cooldown. ``curves`` gives one multiplier per
workload per minute; a workload trace replaces its curve (mean-normalised).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gridctl.lab.rng import Stream
from gridctl.lab.traces import Trace, trace_curve

WORKLOADS = (
    "coding",
    "research",
    "marketing",
    "sales",
    "design",
    "image",
    "video",
    "embedding",
    "general",
)
CREATIVE = frozenset({"marketing", "design", "image", "video"})

RAMP_END = 0.10
SURGE = (0.10, 0.30)
CAMPAIGN = (0.30, 0.50)
THROTTLE = (0.40, 0.55)
OUTAGE = (0.55, 0.70)
COOLDOWN_START = 0.85


def phase_of(fraction: float) -> str:
    if fraction < RAMP_END:
        return "ramp"
    if SURGE[0] <= fraction < SURGE[1]:
        return "coding-surge"
    if CAMPAIGN[0] <= fraction < CAMPAIGN[1]:
        return "creative-campaign"
    if OUTAGE[0] <= fraction < OUTAGE[1]:
        return "node-outage"
    if fraction >= COOLDOWN_START:
        return "cooldown"
    return "recovery"


def _multiplier(workload: str, fraction: float) -> float:
    value = 1.0
    if fraction < RAMP_END:
        value = 0.5 + 0.5 * fraction / RAMP_END
    if SURGE[0] <= fraction < SURGE[1] and workload == "coding":
        value *= 3.0
    if CAMPAIGN[0] <= fraction < CAMPAIGN[1] and workload in CREATIVE:
        value *= 2.5
    if fraction >= COOLDOWN_START:
        value *= 0.2
    return value


def builtin_curve(workload: str, minutes: int) -> tuple[float, ...]:
    return tuple(_multiplier(workload, (m + 0.5) / minutes) for m in range(minutes))


def curves(minutes: int, traces: Mapping[str, Trace]) -> dict[str, tuple[float, ...]]:
    """One demand multiplier per minute for every workload (traces replace their curve)."""
    result: dict[str, tuple[float, ...]] = {}
    for workload in WORKLOADS:
        builtin = builtin_curve(workload, minutes)
        trace = traces.get(workload)
        result[workload] = trace_curve(trace, builtin) if trace is not None else builtin
    return result


@dataclass(frozen=True)
class HostEvent:
    """A physical event on one host over [start, end) minutes."""

    kind: str  # throttle | outage | activity | battery
    host_id: str
    start: int
    end: int


ACTIVITY_SHARE = 0.2  # a laptop's owner works on it for a fifth of the day
BATTERY = (0.60, 0.75)  # every other laptop is unplugged for this part of the day


def host_events(host_ids: tuple[str, ...], minutes: int, seed: int) -> tuple[HostEvent, ...]:
    """The thermal throttle hits the first GPU server, the outage the first office mini
    (falling back to the last host), each over its phase of the day. Each laptop's
    owner is active for a seeded fifth of the day (local apps take memory, the host
    throttles), and every other laptop runs on battery for a while (paused)."""

    def span(phase: tuple[float, float]) -> tuple[int, int]:
        return int(phase[0] * minutes), max(int(phase[0] * minutes) + 1, int(phase[1] * minutes))

    events: list[HostEvent] = []
    gpu = next((h for h in host_ids if h.startswith("gpu-server")), None)
    if gpu is not None:
        events.append(HostEvent("throttle", gpu, *span(THROTTLE)))
    managed = [h for h in host_ids if not h.startswith("external")]
    victim = next((h for h in managed if h.startswith("mini")), managed[-1] if managed else None)
    if victim is not None and len(managed) > 1:
        events.append(HostEvent("outage", victim, *span(OUTAGE)))
    stream = Stream(seed, "laptops")
    laptops = [h for h in managed if h.startswith("laptop")]
    for index, laptop in enumerate(laptops):
        length = max(1, int(ACTIVITY_SHARE * minutes))
        start = stream.below(max(1, minutes - length))
        events.append(HostEvent("activity", laptop, start, start + length))
        if index % 2 == 1:
            events.append(HostEvent("battery", laptop, *span(BATTERY)))
    return tuple(events)
