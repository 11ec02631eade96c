"""What the controller benchmark found, per fleet size, and whether it met the targets.

The driver (``controller.py``) fills a ``SizeResult`` per fleet size from the
generators' tallies and its own samples; this module only reads and prints them.
Targets are printed beside the numbers, never asserted: the machine is shared, and a
loaded machine inflates every latency, so the load average is printed too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loadgen import KINDS

BURST_MOVE_MS = 20.0  # a burst for an unavailable model moves heartbeat p99 by less


def percentile(values: list[float], pct: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(pct / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


@dataclass(frozen=True)
class Progress:
    """How far the fleet is, from the controller's status document."""

    hosts: int = 0  # registered
    ready: int = 0  # routable replicas
    missing: int = 0  # replicas the plan wants and has not got, constraints permitting
    pending: int = 0  # commands queued or delivered and not acknowledged
    proposed: int = 0  # actions the last pass proposed or deferred
    mode: str = "unknown"  # the effective mode
    plan: str | None = None  # the generation of the last plan, None before the first
    warnings: tuple[str, ...] = ()  # the controller's own, as its status lists them

    @classmethod
    def of(cls, status: dict[str, Any]) -> Progress:
        reconciliation = status.get("reconciliation") or {}
        models = status.get("models") or []
        return cls(
            hosts=len(status.get("hosts") or []),
            ready=sum(int(m.get("ready") or 0) for m in models),
            missing=sum(int(m.get("missing") or 0) for m in models if not m.get("unmet")),
            pending=len(status.get("pending_commands") or []),
            proposed=len(reconciliation.get("actions") or [])
            + len(reconciliation.get("deferred") or []),
            mode=str((status.get("mode") or {}).get("effective", "unknown")),
            plan=(status.get("controller") or {}).get("plan_generation"),
            warnings=tuple(str(w) for w in status.get("warnings") or []),
        )

    def converged(self, hosts: int) -> bool:
        return self.hosts == hosts and not (self.missing or self.pending or self.proposed)

    def describe(self) -> str:
        return (
            f"{self.hosts} hosts registered, {self.ready} replicas ready, {self.missing} "
            f"missing, {self.pending} commands pending, {self.proposed} actions proposed"
        )


@dataclass(frozen=True)
class Convergence:
    """What the controller's status said when the warm-up ended."""

    converged: bool
    seconds: float  # from the first registration slot
    progress: Progress


@dataclass
class Window:
    offered: int
    served: int
    latencies: dict[str, list[float]]
    errors: dict[str, int]
    resent: int
    lags: list[float]
    ctl_cpu: float  # share of one core
    gen_cpu: float  # share of one core
    seconds: float
    load: tuple[float, float, float]

    def p99(self, kind: str) -> float:
        return percentile(self.latencies[kind], 99)


def merge(results: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """One window's tallies of every generator process, summed."""
    merged: dict[str, Any] = {
        "offered": 0,
        "served": 0,
        "latencies": {k: [] for k in KINDS},
        "errors": {},
        "resent": 0,
        "lags": [],
    }
    for result in results:
        tally = result["tallies"].get(name)
        if tally is None:
            continue
        for key in ("offered", "served", "resent"):
            merged[key] += tally[key]
        for kind in KINDS:
            merged["latencies"][kind].extend(tally["latencies"][kind])
        for what, count in tally["errors"].items():
            merged["errors"][what] = merged["errors"].get(what, 0) + count
        merged["lags"].extend(tally["lags"])
    return merged


@dataclass
class SizeResult:
    hosts: int
    processes: int
    loop: str
    convergence: Convergence
    warmup: dict[str, Any]  # the merged warm-up tally (no latencies reported)
    windows: dict[str, Window]  # steady, then burst
    burst: list[tuple[int, float]]  # (status, ms) per burst request
    burst_model: str
    connects: int

    def moved(self, kind: str) -> float:
        """How far the burst moved this kind's p99 from the steady window of this run."""
        return self.windows["burst"].p99(kind) - self.windows["steady"].p99(kind)


def ms(value: float) -> str:
    return f"{value:.0f} ms" if value >= 10 else f"{value:.1f} ms"


def errors_by_kind(errors: dict[str, int]) -> str:
    if not errors:
        return "errors 0"
    kinds: dict[str, list[str]] = {}
    for key, count in sorted(errors.items()):
        kind, what = key.split(": ", 1)
        kinds.setdefault(kind, []).append(f"{what} x{count}")
    detail = "; ".join(f"{kind}: {', '.join(items)}" for kind, items in kinds.items())
    return f"errors {sum(errors.values())} ({detail})"


def report(result: SizeResult) -> None:
    c = result.convergence
    first = next(iter(result.windows.values()))
    print(
        f"\n{result.hosts} hosts ({result.processes} generator process(es) on {result.loop}, "
        f"{first.seconds:.0f} s windows)"
    )
    state = c.progress.describe()
    if c.converged:
        print(f"  converged {c.seconds:.1f} s after the first registration slot ({state})")
    else:
        print(
            f"  NOTE: not converged after {c.seconds:.0f} s ({state}); the windows below "
            "measure a fleet still converging"
        )
        shown = "; ".join(w[:200] for w in c.progress.warnings[:3]) or "none"
        print(
            f"        effective mode {c.progress.mode}, last plan {c.progress.plan or 'none'}, "
            f"controller warnings: {shown}"
        )
    w0 = result.warmup
    print(
        f"  warm-up {w0['served']} heartbeats served of {w0['offered']} offered, "
        f"{errors_by_kind(w0['errors'])}, {w0['resent']} lease heartbeats resent after a reset"
    )
    for name, w in result.windows.items():
        rate = w.offered / w.seconds
        print(
            f"  {name:<7} served/offered {w.served}/{w.offered} ({rate:.0f} req/s offered), "
            f"{errors_by_kind(w.errors)}, {w.resent} lease heartbeats resent after a reset"
        )
        for kind in KINDS:
            values = w.latencies[kind]
            print(
                f"          {kind:<7} p50 {ms(percentile(values, 50)):>8}  "
                f"p99 {ms(percentile(values, 99)):>8}  max {ms(max(values, default=0)):>8}"
            )
        ctl_per = w.ctl_cpu * w.seconds / w.served * 1000 if w.served else float("nan")
        gen_per = w.gen_cpu * w.seconds / w.served * 1000 if w.served else float("nan")
        print(
            f"          controller CPU {w.ctl_cpu * 100:.0f}% of a core ({ctl_per:.2f} ms per "
            "served heartbeat; serving and planning processes, ticks and probes included)"
        )
        print(
            f"          generators CPU {w.gen_cpu * 100:.0f}% of a core ({gen_per:.2f} ms per "
            f"served heartbeat), event-loop lag p50 {ms(percentile(w.lags, 50))} "
            f"p99 {ms(percentile(w.lags, 99))} max {ms(max(w.lags, default=0))}"
        )
        print(f"          load average {w.load[0]:.2f} {w.load[1]:.2f} {w.load[2]:.2f}")
    if result.burst:
        codes: dict[int, int] = {}
        for status, _ in result.burst:
            codes[status] = codes.get(status, 0) + 1
        took = [t for _, t in result.burst]
        print(
            f"  burst: {len(result.burst)} requests for {result.burst_model!r} "
            f"(statuses {codes}), p50 {ms(percentile(took, 50))}, p99 {ms(percentile(took, 99))}"
        )
        for kind in KINDS:
            print(
                f"  {kind} heartbeat p99: steady window {ms(result.windows['steady'].p99(kind))}"
                f", burst window {ms(result.windows['burst'].p99(kind))} "
                f"(moved {result.moved(kind):+.1f} ms)"
            )
    print(f"  connections opened: {result.connects} for {result.hosts} hosts")


def _mark(ok: bool) -> str:
    return "met" if ok else "NOT met"


def targets(results: list[SizeResult]) -> list[str]:
    """The acceptance targets, judged on the sizes this run measured."""
    lines = []
    for r in results:
        steady = r.windows["steady"]
        both = list(r.windows.values())
        errors = sum(sum(w.errors.values()) for w in both)
        early = sum(r.warmup["errors"].values())
        zero = f"0 errors in the windows {_mark(errors == 0)} ({early} in the warm-up)"
        lease, control = steady.p99("lease"), steady.p99("control")
        if not r.convergence.converged:
            lines.append(f"{r.hosts} hosts: NOTE the fleet had not converged (see above)")
        if r.hosts == 1000:
            served = all(w.served == w.offered for w in both)
            lines.append(
                f"1000 hosts: all offered served {_mark(served)}, {zero}, lease p99 "
                f"{ms(lease)} <= 100 ms {_mark(lease <= 100)}, control p99 "
                f"{ms(control)} <= 250 ms {_mark(control <= 250)}"
            )
        if r.hosts == 2000:
            worst = max(lease, control)
            lines.append(f"2000 hosts: {zero}, p99 {ms(worst)} <= 1 s {_mark(worst <= 1000)}")
        if r.burst:
            moved = max(r.moved(kind) for kind in KINDS)
            lines.append(
                f"{r.hosts} hosts: the burst moved heartbeat p99 by {moved:+.1f} ms, < "
                f"{BURST_MOVE_MS:g} ms {_mark(moved < BURST_MOVE_MS)}"
            )
    return lines
