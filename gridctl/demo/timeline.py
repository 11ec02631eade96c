"""What changed in the fleet and why, read from the controller's status document.

A watcher polls ``/allocator/status`` about once a second and keeps, per poll,
which hosts route each model and each host's state. A line is written whenever
either changes: a replica became routable or stopped being routable, or a host
was drained, paused or resumed, with the controller's own reason for the
model's target at that moment. The samples also feed the report's residency
chart, so the timeline and the chart never disagree.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass(frozen=True)
class Sample:
    at: float  # seconds since the day began
    routable: dict[str, tuple[str, ...]]  # model -> hosts that route it
    host_states: dict[str, str]
    desired: dict[str, int]  # model -> replicas the controller wants


@dataclass(frozen=True)
class Line:
    at: float
    kind: str  # "scale" | "host" | "phase" | "note"
    text: str
    model: str | None = None
    replicas: int | None = None


def _why(status: dict[str, Any], model: str) -> str:
    """The plan's reason for the model's target, and the model's health in words."""
    plan = status.get("plan") or {}
    target = ((plan.get("models") or {}).get(model) or {}) if isinstance(plan, dict) else {}
    parts = []
    if target.get("target_reason"):
        parts.append(f"target {target.get('target_replicas')} ({target['target_reason']})")
    for row in status.get("models") or []:
        if row.get("model_id") == model and row.get("reason"):
            parts.append(str(row["reason"]))
    for p in plan.get("preemptions") or [] if isinstance(plan, dict) else []:
        if p.get("model_id") == model:
            parts.append(f"preempted on {p.get('host_id')} for {p.get('beneficiary')}")
    return "; ".join(parts)


def read_sample(status: dict[str, Any], at: float) -> Sample:
    routable: dict[str, list[str]] = {}
    states: dict[str, str] = {}
    for host in status.get("hosts") or []:
        states[host["host_id"]] = str(host.get("state"))
        for r in host.get("residencies") or []:
            if r.get("routable"):
                routable.setdefault(r["model_id"], []).append(host["host_id"])
    desired = {
        str(row["model_id"]): int(row.get("desired") or 0) for row in status.get("models") or []
    }
    return Sample(
        at,
        {m: tuple(sorted(h)) for m, h in sorted(routable.items())},
        dict(sorted(states.items())),
        desired,
    )


@dataclass
class Watcher:
    """Polls the controller until stopped; every change becomes a ``Line``."""

    base_url: str
    day_started: float
    models: tuple[str, ...]
    interval: float = 1.0
    samples: list[Sample] = field(default_factory=list)
    lines: list[Line] = field(default_factory=list)
    poll_errors: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None
    echo: Any = None  # called with each new line (the live timeline)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="demo-watcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def note(self, kind: str, text: str) -> None:
        self._add(Line(time.monotonic() - self.day_started, kind, text))

    def _add(self, line: Line) -> None:
        with self._lock:
            self.lines.append(line)
        if self.echo is not None:
            self.echo(line)

    def _run(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=10) as client:
            while not self._stop.is_set():
                try:
                    response = client.get("/allocator/status")
                    response.raise_for_status()
                    status = response.json()
                except (httpx.HTTPError, ValueError):
                    self.poll_errors += 1
                else:
                    self._observe(status, time.monotonic() - self.day_started)
                self._stop.wait(self.interval)

    def _observe(self, status: dict[str, Any], at: float) -> None:
        sample = read_sample(status, at)
        before = self.samples[-1] if self.samples else None
        with self._lock:
            self.samples.append(sample)
        for model in self.models:
            now = sample.routable.get(model, ())
            was = before.routable.get(model, ()) if before else ()
            if now == was:
                continue
            added = sorted(set(now) - set(was))
            gone = sorted(set(was) - set(now))
            moves = ", ".join([*(f"+{h}" for h in added), *(f"-{h}" for h in gone)])
            why = _why(status, model)
            self._add(
                Line(
                    at,
                    "scale",
                    f"{model}: {len(was)} -> {len(now)} routable ({moves})"
                    + (f"; controller: {why}" if why else ""),
                    model=model,
                    replicas=len(now),
                )
            )
        for host, state in sample.host_states.items():
            was_state = before.host_states.get(host) if before else None
            if before is not None and state != was_state:
                self._add(Line(at, "host", f"host {host}: {was_state} -> {state}"))

    def snapshot(self) -> tuple[list[Sample], list[Line]]:
        with self._lock:
            return list(self.samples), list(self.lines)
