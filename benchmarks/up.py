"""``gridctl up`` timed: controller start to the first routable model, and where it goes.

The acceptance number is the one ``gridctl up`` itself prints ("controller start ->
model routable: X.XX s", counted from the moment it spawned the controller). This
module runs ``gridctl up`` N times, each in fresh processes with a fresh state
directory, free ports and a private context directory (the operator's current
context is never touched), reads that line, stops the fleet with Ctrl-C (SIGINT)
and rebuilds the run's timeline from the controller's and the nodes' JSON logs:

    controller start -> controller announced (imports, store, desired state read)
    -> node started (its interpreter and imports) -> host registered
    -> load issued (the first tick that plans it) -> load delivered -> load done
       (fetch and verify the weights) -> warm issued -> warm delivered
    -> engine spawned -> engine ready (its /health and /v1/models) -> warm receipt
       taken by the controller (routable) -> ``up`` prints it

Each phase is printed per run and as the median of the runs. Phases of different
hosts overlap; the timeline follows the host whose model became routable first.

Children read their bytecode from a private cache (``PYTHONPYCACHEPREFIX``) filled
by one untimed run, as an installed ``gridctl`` does; with ``--no-bytecode-cache``
they compile every module at each start (as with ``PYTHONDONTWRITEBYTECODE``).

    python benchmarks/up.py --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROUTABLE = re.compile(r"controller start -> model routable: ([0-9.]+) s \((\S+) on (\S+)\)")
RUN_DEADLINE_SECONDS = 90.0
STOP_DEADLINE_SECONDS = 60.0


@dataclass
class UpRun:
    routable_after: float  # what `gridctl up` printed
    model: str
    host: str
    marks: dict[str, float] = field(default_factory=dict)  # phase end -> s after start


def cpu_pressure() -> str:
    """The share of the last 10 s in which some runnable task waited for a core (Linux
    PSI): what other work on a shared machine took from this run."""
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except (OSError, IndexError):
        return "cpu pressure unknown"
    return "cpu pressure " + line.split()[1].replace("avg10=", "") + " %"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def free_block(size: int) -> int:
    """A first port whose ``size`` ports are all free now (engine and mirror ports)."""
    for base in range(31000, 60000 - size, size):
        try:
            for port in range(base, base + size):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise SystemExit("no free block of ports")


def child_environment(scratch: Path, bytecode_cache: bool) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["GRIDCTL_CONFIG_DIR"] = str(scratch / "config")  # contexts recorded here, not in ~
    if bytecode_cache:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(scratch / "pycache")
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_up_once(scratch: Path, index: int, machines: int, env: dict[str, str]) -> UpRun:
    """One ``gridctl up`` until its first routable line, then Ctrl-C and wait for it."""
    state = scratch / f"run-{index}"
    argv = [
        sys.executable, "-m", "gridctl", "up",
        "--state-dir", str(state),
        "--port", str(free_port()),
        "--engine-port-base", str(free_block(50 * machines)),
        "--machines", str(machines),
        "--log-format", "json",
    ]  # fmt: skip
    proc = subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    found: re.Match[str] | None = None
    seen_at = 0.0
    deadline = time.monotonic() + RUN_DEADLINE_SECONDS
    transcript: list[str] = []
    try:
        for line in proc.stdout:  # blocks per line; the deadline is checked between lines
            transcript.append(line.rstrip())
            found = ROUTABLE.search(line)
            if found is not None:
                seen_at = time.time()
                break
            if time.monotonic() > deadline:
                break
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=STOP_DEADLINE_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
    if found is None:
        tail = "\n".join(transcript[-20:])
        raise SystemExit(f"run {index}: no routable model within the deadline:\n{tail}")
    after = float(found.group(1))
    run = UpRun(after, found.group(2), found.group(3))
    run.marks = timeline(state / "logs", seen_at - after, run.model, run.host)
    run.marks["up printed routable"] = after
    return run


def _records(path: Path) -> list[dict[str, object]]:
    rows = []
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and "time" in row:
            rows.append(row)
    return rows


def _at(row: dict[str, object]) -> float:
    return datetime.fromisoformat(str(row["time"]).replace("Z", "+00:00")).timestamp()


def timeline(logs: Path, started: float, model: str, host: str) -> dict[str, float]:
    """Seconds after the controller's start at which each phase of ``model`` on ``host``
    ended, from the first matching log record of each."""
    controller = _records(logs / "controller.log")
    node = _records(logs / f"{host}.log")
    patterns: list[tuple[str, list[dict[str, object]], str]] = [
        ("controller announced", controller, r"^gridctl controller on "),
        ("node started", node, rf"^node {host} started"),
        ("host registered", controller, rf"^host_registered host {host}$"),
        ("load issued", controller, rf"^issued action \S+ host {host} model {model}: load"),
        ("load delivered", node, rf"^delivered action \S+ load {model}: accepted"),
        ("load done", node, r"^action \S+ load succeeded"),
        ("warm issued", controller, rf"^issued action \S+ host {host} model {model}: warm"),
        ("warm delivered", node, rf"^delivered action \S+ warm {model}: accepted"),
        ("engine spawned", node, rf"^engine for {model} started"),
        ("engine ready", node, r"^action \S+ warm succeeded"),
        ("routable at controller", controller, rf"^warm_succeeded action \S+ host {host}"),
    ]
    marks: dict[str, float] = {}
    for name, rows, pattern in patterns:
        for row in rows:
            if row.get("model", model) != model:  # records naming a model name this one
                continue
            if re.search(pattern, str(row.get("message", ""))):
                marks[name] = _at(row) - started
                break
    return marks


def phases(marks: dict[str, float]) -> list[tuple[str, float]]:
    """(phase, seconds) between consecutive marks, in time order."""
    ordered = sorted(marks.items(), key=lambda kv: kv[1])
    out, before, last = [], "controller start", 0.0
    for name, at in ordered:
        out.append((f"{before} -> {name}", at - last))
        before, last = name, at
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--machines", type=int, default=2)
    parser.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="children compile every module at each start (PYTHONDONTWRITEBYTECODE)",
    )
    parser.add_argument("--keep", type=Path, default=None, help="keep the runs' state here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gridctl-up-bench-") as tmp:
        scratch = Path(tmp) if args.keep is None else args.keep
        env = child_environment(scratch, not args.no_bytecode_cache)
        if not args.no_bytecode_cache:
            run_up_once(scratch, 0, args.machines, env)  # fills the bytecode cache
        runs = []
        for i in range(1, args.runs + 1):
            run = run_up_once(scratch, i, args.machines, env)
            runs.append(run)
            steps = ", ".join(
                f"{name.split(' -> ')[1]} {1000 * width:.0f}" for name, width in phases(run.marks)
            )
            print(
                f"run {i}: controller start -> model routable {run.routable_after:.2f} s "
                f"({run.model} on {run.host}; load average {os.getloadavg()[0]:.2f}, "
                f"{cpu_pressure()})\n"
                f"  ms: {steps}",
                flush=True,
            )
    values = [r.routable_after for r in runs]
    print(
        f"controller start -> routable: median {statistics.median(values):.2f} s, "
        f"min {min(values):.2f} s, max {max(values):.2f} s over {len(values)} runs"
    )
    names = [n for n, _ in phases(runs[len(runs) // 2].marks)]
    print("phase (median of the runs, ms):")
    for name in names:
        end = name.split(" -> ", 1)[1]
        widths = [dict(phases(r.marks)).get(name) for r in runs]
        ends = [r.marks[end] for r in runs if end in r.marks]
        known = [w for w in widths if w is not None]
        if known:
            print(
                f"  {name:<52} {1000 * statistics.median(known):7.0f}   "
                f"(ends at {1000 * statistics.median(ends):5.0f})"
            )


if __name__ == "__main__":
    main()
