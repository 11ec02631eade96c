"""One bounded workday on the embedded fleet, and the checks that say whether it held.

The day has four phases, as fractions of ``--duration``:

- morning (0-20 %): light general work naming the baseline, and unbound coding
  work (``model: auto``) that the baseline answers until the controller loads
  the coding specialist for it;
- surge (20-60 %): heavy general work on the baseline and no coding: the
  baseline scales to three replicas, which takes the specialist's host; once it
  has three (at the latest at 42 %) the third host is drained like a laptop
  whose owner needs it, and resumed once it routes nothing (at the latest at
  56 %);
- quiet (60 % until the baseline is back at one replica, at most 80 %): no
  requests. The surge's demand decays and the replicas it
  added are no longer recently used, so the baseline returns to one replica
  (the spec's demo also converges to idle before admitting the next mix: a
  replica that served a request within the scale-down cooldown stays desired,
  and light traffic spread over three replicas keeps all three recent);
- cooldown (from there to 100 %): the morning's mix again: the specialist is loaded again
  on a host the baseline gave back.

Every request goes through the router with the official client; the timeline
is the controller's own status. ``run_day`` returns what happened; ``verdicts``
says which of the day's promises held, each with the evidence.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from gridctl.demo.desired import (
    BASELINE,
    HOST_CAPACITY_MB,
    SPECIALIST,
    Strategy,
    write_desired_state,
)
from gridctl.demo.timeline import Line, Sample, Watcher
from gridctl.demo.traffic import Outcome, Stream, Traffic
from gridctl.fleetrun import FleetRun, FleetSettings, start_fleet, stop_fleet

MACHINES = 3
LAPTOP = f"local-{MACHINES}"
MODELS = (BASELINE, SPECIALIST)
# (phase, the share of the day at which it starts). The quiet phase ends early once the
# baseline is back at one replica; the drain waits for the surge's three replicas.
PHASES = (("morning", 0.0), ("surge", 0.2), ("quiet", 0.6), ("cooldown", 0.8))
DRAIN_BY, RESUME_BY = 0.42, 0.56
SURGE_USERS = 10  # closed-loop users with no rest: a queue on one replica, 3 replicas wanted
STARTUP_DEADLINE = 300.0
STATE_MARKER = ".gridctl-demo"
FINISH_SECONDS = 150.0  # the client's own timeout and retries bound a request


@dataclass
class DayResult:
    strategy: str
    duration: float
    phases: list[tuple[str, float]]  # (name, start seconds since the day began)
    outcomes: list[Outcome]
    samples: list[Sample]
    lines: list[Line]
    drained: tuple[float, float] | None  # (drained at, resumed at)
    left_running: list[str] = field(default_factory=list)
    stop_problems: list[str] = field(default_factory=list)
    unanswered: int = 0  # requests still in flight when the fleet was stopped

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.error is not None]


def _phase_bounds(result: DayResult, name: str) -> tuple[float, float]:
    starts = [s for _, s in result.phases] + [result.duration]
    index = [n for n, _ in result.phases].index(name)
    return starts[index], starts[index + 1]


def _counts(result: DayResult, model: str, start: float, end: float) -> list[int]:
    return [len(s.routable.get(model, ())) for s in result.samples if start <= s.at < end]


@dataclass(frozen=True)
class Verdict:
    promise: str
    held: bool
    evidence: str


def verdicts(result: DayResult) -> list[Verdict]:
    """The day's promises, each with the numbers behind it."""
    m0, m1 = _phase_bounds(result, "morning")
    s0, s1 = _phase_bounds(result, "surge")
    q0, _q1 = _phase_bounds(result, "quiet")
    c0, c1 = _phase_bounds(result, "cooldown")
    base_morning = _counts(result, BASELINE, m0, m1)
    base_surge = _counts(result, BASELINE, s0, s1)
    base_end = _counts(result, BASELINE, q0, c1)
    spec_morning = _counts(result, SPECIALIST, m0, m1)
    spec_surge = _counts(result, SPECIALIST, s0, s1)
    spec_cool = _counts(result, SPECIALIST, c0, c1 + 1)
    adaptive = result.strategy == "smart"  # a static map promises only safety
    out = [
        Verdict(
            "baseline scales 1 -> 3 during the surge",
            bool(base_morning) and min(base_morning) == 1 and max(base_surge, default=0) == 3,
            f"baseline replicas: morning {_span(base_morning)}, surge {_span(base_surge)}",
        ),
        Verdict(
            "the specialist is offloaded during the surge and restored after it",
            max(spec_morning, default=0) >= 1
            and 0 in spec_surge
            and bool(spec_cool)
            and spec_cool[-1] >= 1,
            f"specialist replicas: morning {_span(spec_morning)}, surge {_span(spec_surge)}, "
            f"cooldown {_span(spec_cool)} (last {spec_cool[-1] if spec_cool else '-'})",
        ),
        Verdict(
            "the cooldown scales the baseline back to 1",
            bool(base_end) and base_end[-1] == 1,
            f"baseline replicas after the surge: {_span(base_end)}, last "
            f"{base_end[-1] if base_end else '-'}",
        ),
    ]
    if not adaptive:
        out = []
    if result.drained is not None:
        drained_at, resumed_at = result.drained
        during = [s.routable for s in result.samples if drained_at + 20 <= s.at < resumed_at]
        evacuated = bool(during) and all(
            LAPTOP not in hosts for routable in during[-1:] for hosts in routable.values()
        )
        out.append(
            Verdict(
                f"the drained host {LAPTOP} is evacuated",
                evacuated,
                f"models routed on {LAPTOP} at the drain's end: "
                + (", ".join(m for m, h in during[-1].items() if LAPTOP in h) or "none")
                if during
                else "no sample between the drain and the resume",
            )
        )
    failed = result.failed
    out.append(
        Verdict(
            "no failed request",
            not failed and not result.unanswered and len(result.outcomes) > 0,
            f"{len(result.outcomes) - len(failed)} served, {len(failed)} failed, "
            f"{result.unanswered} unanswered when the day ended"
            + (f" (first: {failed[0].error} at {failed[0].started:.0f}s)" if failed else ""),
        )
    )
    out.append(
        Verdict(
            "nothing left running",
            not result.left_running,
            ", ".join(result.left_running) or "every controller, node and engine process stopped",
        )
    )
    return out


def _span(counts: list[int]) -> str:
    if not counts:
        return "-"
    return f"{min(counts)}..{max(counts)}"


def _ours(state_root: Path) -> list[psutil.Process]:
    """Processes whose command line names this day's state directory."""
    mine = str(state_root)
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if proc.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error):
            if any(mine in part for part in (proc.info.get("cmdline") or [])):
                found.append(proc)
    return found


def _node_override(state_root: Path, host: str, verb: str) -> None:
    """``gridctl node drain|resume`` against a logical host, as an operator runs it."""
    args = [sys.executable, "-m", "gridctl", "node", verb, "--state-dir", str(state_root / host)]
    if verb != "resume":
        args += ["--reason", "its owner needs the laptop"]
    subprocess.run(args, check=True, capture_output=True, timeout=60)


def _accepted(status: dict[str, object]) -> bool:
    """True once a revision is in force; a rejected one raises with its errors."""
    desired = status.get("desired")
    if not isinstance(desired, dict):
        return False
    if desired.get("last_good_revision"):
        return True
    rejected = desired.get("rejected") or []
    if rejected:
        errors = "; ".join(
            f"{e.get('file')}:{e.get('line')}: {e.get('message')}"
            for e in rejected[-1].get("errors") or []
        )
        raise RuntimeError(f"the demo's desired state was rejected: {errors}")
    return False


def _wait(what: str, check: Callable[[], bool], deadline: float) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
            if check():
                return
        time.sleep(0.5)
    raise TimeoutError(f"{what} not reached within {deadline:.0f}s")


@dataclass
class DayPlan:
    strategy: Strategy
    duration: float
    state_root: Path
    port: int = 22180
    engine_port_base: int = 23800
    say: Callable[[str], None] = print


def run_day(plan: DayPlan) -> DayResult:
    """Start the fleet, run the day, stop everything; always returns what was seen."""
    root = plan.state_root
    _fresh_state_root(root)
    desired_dir = root / "desired"
    write_desired_state(desired_dir, plan.strategy, cooldown_seconds=max(10.0, plan.duration / 20))
    settings = FleetSettings(
        machines=MACHINES,
        watch_dir=str(desired_dir),
        state_root=str(root / "fleet"),
        port=plan.port,
        capacity_mb=HOST_CAPACITY_MB,
        engine_port_base=plan.engine_port_base,
        worktree=True,
    )
    run: FleetRun | None = None
    traffic: Traffic | None = None
    watcher: Watcher | None = None
    phases: list[tuple[str, float]] = []
    drained: tuple[float, float] | None = None
    completed = False
    unanswered = 0
    try:
        run = start_fleet(settings, detached=False, say=_indented(plan.say))
        base = run.base_url

        def status() -> dict[str, Any]:
            answer: dict[str, Any] = httpx.get(base + "/allocator/status", timeout=10).json()
            return answer

        _wait("the demo's desired state accepted", lambda: _accepted(status()), 60)
        _wait(
            f"{MACHINES} hosts registered",
            lambda: len(status()["hosts"]) == MACHINES,
            STARTUP_DEADLINE,
        )
        _wait(
            f"{BASELINE} routable",
            lambda: any(
                r["model_id"] == BASELINE and r.get("routable")
                for h in status()["hosts"]
                for r in h["residencies"]
            ),
            STARTUP_DEADLINE,
        )
        started = time.monotonic()
        watcher = Watcher(base, started, (BASELINE, SPECIALIST), echo=_echo(plan.say))
        traffic = Traffic(base, started)
        watcher.start()
        drained = _run_phases(plan, root / "fleet", traffic, watcher, started, phases)
        completed = True
    finally:
        if traffic is not None:  # requests in flight at the day's end still count
            unanswered = traffic.finish(FINISH_SECONDS if completed else 10.0)
        if watcher is not None:
            watcher.stop()
        problems = stop_fleet(run) if run is not None else []
        if run is not None:
            for child in run.children.values():
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(timeout=60)
    left = _ours(root)
    described = [f"{p.pid} {' '.join(p.cmdline()[:3])}" for p in left if _cmdline_ok(p)]
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    samples, lines = watcher.snapshot() if watcher else ([], [])
    return DayResult(
        plan.strategy.name,
        plan.duration,
        phases,
        traffic.snapshot() if traffic else [],
        samples,
        lines,
        drained,
        described,
        problems,
        unanswered,
    )


def _fresh_state_root(root: Path) -> None:
    """Empty the day's state directory, but only one an earlier day made (its marker file):
    a mistyped ``--state-dir`` never deletes anything else."""
    if root.exists() and any(root.iterdir()):
        if not (root / STATE_MARKER).is_file():
            raise RuntimeError(
                f"{root} exists and was not made by `gridctl fleet demo`; "
                "choose a new or empty --state-dir"
            )
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    (root / STATE_MARKER).write_text("made by gridctl fleet demo; emptied by the next day\n")


def _cmdline_ok(proc: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        proc.cmdline()
        return True
    return False


def _indented(say: Callable[[str], None]) -> Callable[[str], None]:
    def indented(line: str) -> None:
        say(f"  {line}")

    return indented


def _echo(say: Callable[[str], None]) -> Callable[[Line], None]:
    def echo(line: Line) -> None:
        say(f"{_clock(line.at)}  {line.text}")

    return echo


def _clock(seconds: float) -> str:
    seconds = max(0.0, seconds)
    return f"+{int(seconds // 60):02d}:{int(seconds % 60):02d}"


def _run_phases(
    plan: DayPlan,
    fleet_root: Path,
    traffic: Traffic,
    watcher: Watcher,
    started: float,
    phases: list[tuple[str, float]],
) -> tuple[float, float] | None:
    d = plan.duration

    def at(fraction: float) -> float:
        return started + d * fraction

    bounds = dict(PHASES)

    def wait_until(moment: float) -> None:
        while (left := moment - time.monotonic()) > 0:
            time.sleep(min(left, 0.5))

    def phase(name: str) -> None:
        phases.append((name, time.monotonic() - started))
        watcher.note("phase", f"--- {name} ---")

    def mix(until: float) -> list[Stream]:
        return [
            traffic.start(Stream("general", "general", BASELINE, 1, 2.0), until),
            traffic.start(Stream("coding", "coding", "auto", 1, 1.0), until),
        ]

    def routed(model: str, host: str | None = None) -> int:
        samples, _ = watcher.snapshot()
        if not samples:
            return 0
        hosts = samples[-1].routable.get(model, ())
        return len(hosts) if host is None else int(host in hosts)

    def until(condition: Callable[[], bool], moment: float) -> None:
        """Wait for ``condition`` or for ``moment``, whichever comes first."""
        while time.monotonic() < moment and not condition():
            time.sleep(0.5)

    phase("morning")
    streams = mix(at(bounds["surge"]))
    wait_until(at(bounds["surge"]))
    for stream in streams:
        traffic.stop(stream)
    phase("surge")
    surge = traffic.start(
        Stream("surge", "general", BASELINE, SURGE_USERS, 0.0), at(bounds["quiet"])
    )
    until(lambda: routed(BASELINE) >= MACHINES, at(DRAIN_BY))
    drained_at = time.monotonic() - started
    _node_override(fleet_root, LAPTOP, "drain")
    watcher.note("note", f"operator: gridctl node drain on {LAPTOP} (its owner needs the laptop)")
    wait_until(time.monotonic() + d * 0.05)  # some of the surge meets the drained host
    until(lambda: not any(routed(m, LAPTOP) for m in MODELS), at(RESUME_BY))
    wait_until(time.monotonic() + d * 0.03)  # the evacuated host stays drained a while
    resumed_at = time.monotonic() - started  # before the command: a sample taken while
    _node_override(fleet_root, LAPTOP, "resume")  # it runs may already see the host back
    watcher.note("note", f"operator: gridctl node resume on {LAPTOP}")
    wait_until(at(bounds["quiet"]))
    traffic.stop(surge)
    phase("quiet")
    until(lambda: routed(BASELINE) == 1, at(bounds["cooldown"]))
    phase("cooldown")
    streams = mix(at(1.0))
    wait_until(at(1.0))
    for stream in streams:
        traffic.stop(stream)
    return drained_at, resumed_at
