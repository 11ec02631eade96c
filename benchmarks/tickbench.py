"""The whole tick and the operator's dry run, timed on the planner benchmark's fleets.

``benchmarks/planner.py`` times ``plan_placement``; an operator waits for more:
``compute_tick`` (portfolio + plan + reconcile) and the plan document, and, for
``gridctl plan``, a fresh interpreter importing the CLI, loading the desired
state and the snapshot file, planning and printing. This module writes a
planner-benchmark fleet as an operator would hold it (a desired-state
directory and a wire snapshot file), times ``compute_tick`` and
``outcome_document`` in-process, and runs ``gridctl plan DIR --against
SNAP.json`` (text, ``--json`` and ``--explain MODEL --json``) in fresh
processes, reporting the minimum and median wall time (a shared machine is
noisy: the minimum is the machine's best, the median its usual), the child's
CPU time (user + system: what the child itself spent, less disturbed by other
load than wall time), output bytes and the child's peak memory (``os.wait4``'s
rusage), beside the interpreter's own start (``python -c pass``). The
``--explain`` run checks that the model's explanation has a row for every host of
the fleet.

A child reads its bytecode from a cache, as an installed ``gridctl`` does: with
``PYTHONDONTWRITEBYTECODE`` set (as on a shared test machine) every fresh process
would compile the package's 100-odd modules again (about 0.1 s of each run), so the
children write and read a private cache (``PYTHONPYCACHEPREFIX`` under the fleet's
temporary directory), filled by one untimed run of each command.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gridctl.config import load_directory
from gridctl.config.snapshots import load_snapshot
from gridctl.domain import FleetSnapshot, HostSnapshot, ModelProfile
from gridctl.tick import TickInputs, compute_tick
from gridctl.tick.previewing import outcome_document

ROOT = Path(__file__).resolve().parents[1]


def _profile_yaml(p: ModelProfile) -> str:
    spec: dict[str, Any] = {
        "memory_mb": p.memory_mb,
        "runtimes": list(p.runtimes),
        "data_tier": p.data_tier.value,
        "min_replicas": p.min_replicas,
        "max_replicas": p.max_replicas,
        "priority": p.priority,
        # the config refuses a domain minimum max_replicas cannot meet; the planner takes it
        "min_failure_domains": min(p.min_failure_domains, max(1, p.max_replicas)),
        "max_colocated_models": p.max_colocated_models,
    }
    if p.runtime_memory_mb:
        spec["runtime_memory_mb"] = dict(p.runtime_memory_mb)
    if p.required_tags:
        spec["required_tags"] = list(p.required_tags)
    body = json.dumps(spec)  # JSON is YAML
    return (
        f"apiVersion: gridctl/v1\nkind: ModelProfile\nmetadata: {{name: {p.name}}}\nspec: {body}\n"
    )


def _host_json(h: HostSnapshot, now: float) -> dict[str, Any]:
    res = h.resources
    resources = {
        "capacity_mb": res.capacity_mb,
        "reserved_mb": res.reserved_mb,
        "runtimes": list(res.runtimes),
        "backends": list(res.backends),
        "tags": list(res.tags),
        "gpu_count": res.gpu_count,
        "failure_domain": res.failure_domain,
        "memory_bandwidth_gbps": res.memory_bandwidth_gbps,
        "disk_free_mb": res.disk_free_mb,
        "max_models": res.max_models,
        "allowed_data_tiers": [t.value for t in res.allowed_data_tiers],
    }
    residencies = [
        {
            "model_id": r.model_id,
            "memory_mb": r.memory_mb,
            "state": r.state.value,
            "runtime": r.runtime,
            "loaded_age_seconds": now - r.loaded_at if r.loaded_at is not None else None,
            "last_used_age_seconds": now - r.last_used_at if r.last_used_at is not None else None,
            "ownership": r.ownership.value,
            "active_requests": r.active_requests,
        }
        for r in h.residencies
    ]
    for row in residencies:  # absent, not null, where unknown
        for key in ("loaded_age_seconds", "last_used_age_seconds"):
            if row[key] is None:
                del row[key]
    return {
        "host_id": h.host_id,
        "kind": h.kind,
        "last_heartbeat": h.last_heartbeat,
        "resources": resources,
        "allocator": {"schema_version": 1, "state": h.state.value, "residencies": residencies},
    }


def write_fleet(
    directory: Path, profiles: list[ModelProfile], snapshot: FleetSnapshot
) -> tuple[Path, Path]:
    """The fleet as ``DIR`` (policy + one file of profiles) and ``SNAP.json``."""
    desired = directory / "desired"
    desired.mkdir(parents=True, exist_ok=True)
    (desired / "policy.yaml").write_text(
        "apiVersion: gridctl/v1\nkind: ControllerPolicy\nmetadata: {name: bench}\nspec: {}\n"
    )
    (desired / "models.yaml").write_text("---\n".join(_profile_yaml(p) for p in profiles))
    document = {
        "schema_version": 1,
        "now": snapshot.now,
        "hosts": [_host_json(h, snapshot.now) for h in snapshot.hosts],
        "demand": [
            {
                "model_id": d.model_id,
                "requests_per_minute": d.requests_per_minute,
                "correlated_requests_per_minute": d.correlated_requests_per_minute,
            }
            for d in snapshot.demand
        ],
    }
    path = directory / "snapshot.json"
    path.write_text(json.dumps(document))
    return desired, path


@dataclass(frozen=True)
class TickTimes:
    tick_ms: float  # compute_tick, median
    document_ms: float  # outcome_document of that tick, median
    placed: int


def time_tick(desired_dir: Path, snapshot_path: Path, runs: int) -> TickTimes:
    """Median ``compute_tick`` and ``outcome_document`` on the files' inputs, after one
    tick outside the timing (encoders generated, memos filled), each from a collected heap."""
    desired = load_directory(str(desired_dir))
    snapshot = load_snapshot(snapshot_path)
    inputs = TickInputs(
        now=snapshot.now, desired=desired, observed=snapshot, mode=desired.policy.mode
    )
    outcome = compute_tick(inputs)
    outcome_document(inputs, outcome)
    ticks, documents = [], []
    for _ in range(runs):
        gc.collect()
        started = time.perf_counter()
        outcome = compute_tick(inputs)
        ticks.append((time.perf_counter() - started) * 1000.0)
        gc.collect()
        started = time.perf_counter()
        outcome_document(inputs, outcome)
        documents.append((time.perf_counter() - started) * 1000.0)
    placed = sum(1 for a in outcome.plan.assignments if not a.existing)
    return TickTimes(statistics.median(ticks), statistics.median(documents), placed)


@dataclass(frozen=True)
class ProcessRun:
    wall_ms: float  # the median over the runs (one run: its own)
    output_bytes: int
    peak_mb: float  # the child's maximum resident set
    code: int
    min_wall_ms: float = 0.0  # the fastest of the runs
    output: bytes = b""  # the last run's stdout
    cpu_ms: float = 0.0  # the child's user + system time (median over the runs)
    min_cpu_ms: float = 0.0  # the least of the runs


BYTECODE_CACHE: dict[str, str] = {}  # {"dir": PATH} once ``print_tick_and_cli`` sets it


def run_process(argv: list[str]) -> ProcessRun:
    """One fresh process: wall time to exit, bytes on stdout, its own CPU time and peak memory."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    if "dir" in BYTECODE_CACHE:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = BYTECODE_CACHE["dir"]
    started = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert child.stdout is not None
    output = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall = (time.perf_counter() - started) * 1000.0
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    child.stdout.close()
    cpu = (usage.ru_utime + usage.ru_stime) * 1000.0
    return ProcessRun(
        wall, len(output), usage.ru_maxrss / 1024.0, child.returncode, wall, output, cpu, cpu
    )


def median_run(argv: list[str], runs: int) -> ProcessRun:
    run_process(argv)  # untimed: fills the bytecode cache, warms the page cache
    results = [run_process(argv) for _ in range(runs)]
    return ProcessRun(
        statistics.median(r.wall_ms for r in results),
        results[-1].output_bytes,
        max(r.peak_mb for r in results),
        max(r.code for r in results),
        min(r.wall_ms for r in results),
        results[-1].output,
        statistics.median(r.cpu_ms for r in results),
        min(r.cpu_ms for r in results),
    )


def explained_hosts(output: bytes, model: str) -> int:
    """How many distinct hosts the plan document's explanation of ``model`` has rows for."""
    explanation = json.loads(output).get("explanations", {}).get(model, {})
    return len({row["host_id"] for row in explanation.get("candidates", [])})


def print_tick_and_cli(fleets: list[tuple[str, int, int, Path]], runs: int) -> None:
    """``compute_tick``, the document and the CLI dry run for each written fleet."""
    python = sys.executable
    if fleets:
        BYTECODE_CACHE["dir"] = str(fleets[0][3].parent / "pycache")
        print(f"children read bytecode cached in {BYTECODE_CACHE['dir']}")
    start = median_run([python, "-c", "pass"], max(runs, 5))
    print(
        f"interpreter start (python -c pass): min {start.min_wall_ms:.1f} ms, median "
        f"{start.wall_ms:.1f} ms, cpu min {start.min_cpu_ms:.1f} ms, median {start.cpu_ms:.1f} ms,"
        f" {start.peak_mb:.0f} MB; 'after start' subtracts the median wall"
    )
    print(
        f"{'fleet':>18} {'tick ms':>8} {'doc ms':>7} {'placed':>7} | {'command':<22}"
        f" {'min ms':>7} {'median':>7} {'after start':>11} {'cpu min':>7} {'cpu med':>7}"
        f" {'bytes':>10} {'peak MB':>8}"
    )
    for shape, hosts, models, directory in fleets:
        desired, snapshot = directory / "desired", directory / "snapshot.json"
        tick = time_tick(desired, snapshot, runs)
        label = f"{shape} {hosts}x{models}"
        base = [python, "-m", "gridctl", "plan", str(desired), "--against", str(snapshot)]
        model = first_model(desired)
        commands = (
            ("plan", base),
            ("plan --json", [*base, "--json"]),
            ("plan --explain M --json", [*base, "--json", "--explain", model]),
        )
        for name, argv in commands:
            run = median_run(argv, runs)
            assert run.code == 0, f"{' '.join(argv)} exited {run.code}"
            head = f"{label:>18} {tick.tick_ms:>8.1f} {tick.document_ms:>7.1f} {tick.placed:>7}"
            print(
                f"{head if name == 'plan' else ' ' * len(head)} | {name:<22}"
                f" {run.min_wall_ms:>7.1f} {run.wall_ms:>7.1f} {run.wall_ms - start.wall_ms:>11.1f}"
                f" {run.min_cpu_ms:>7.1f} {run.cpu_ms:>7.1f}"
                f" {run.output_bytes:>10} {run.peak_mb:>8.0f}"
            )
            if "--explain" in argv:
                rows = explained_hosts(run.output, model)
                print(f"{'':>{len(head)}} |   --explain {model}: rows for {rows} of {hosts} hosts")


def first_model(desired: Path) -> str:
    """The name of the first profile the fleet writer made (``metadata: {name: NAME}``)."""
    for path in sorted(desired.glob("*.yaml")):
        for line in path.read_text().splitlines():
            if line.startswith("metadata: {name: "):
                return line.removeprefix("metadata: {name: ").rstrip("}").strip()
    raise SystemExit(f"no model profile under {desired}")
