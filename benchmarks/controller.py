"""What one controller sustains: simulated hosts on the real wire protocol over real HTTP.

One run starts a real ``gridctl controller`` process on loopback (a watched directory
of model profiles, automatic mode, a state directory) and, for each fleet size, load
generator processes that each simulate a share of the hosts. Every simulated host
holds its own credential, issued with the controller's signing key as ``gridctl up``
issues them to its local nodes, and its own keep-alive HTTP/1.1 connection. It
registers with the payload a real node sends (built with ``gridctl.node.reports``),
then every 5 s sends a lease heartbeat (``request_commands: false``) and a control
heartbeat (``request_commands: true``), each carrying the receipts not yet
acknowledged, as the node agent does; like the agent, each is a small lease renewal
unless the host's inventory changed since the last full one the controller took,
the controller asked for it, or ``FULL_REFRESH_SECONDS`` (300 s) passed. It executes
the commands it receives at once (load -> cached, warm -> ready with an endpoint,
drain, unload, evict) and, like the agent, starts its next round as soon as an
action ends. A tiny engine process
answers the controller's ``/health`` probes, so warmed replicas become routable as
real ones do.

The simulated hosts are cheap so that the generators leave the controller its CPU:
a heartbeat is serialised once per change of the host's state and its per-beat
fields filled in (``simhosts``); the client is a small HTTP/1.1 keep-alive client
under uvloop (``loadgen``). Like the agent, a lease heartbeat whose connection is
reset under it is sent once more.

Each size waits for registration and convergence (every host registered, no command
pending or proposed; a generous deadline, with a note when it is not met), then runs
a steady window, and a burst window of the same length in which 50 concurrent chat
requests for a configured model that has no ready replica (it requires a tag no
host has) go through the router every 5 s. It prints, per window: offered and served
heartbeats (a heartbeat is offered when its round starts in the window; a slot a late
host could not send is offered and not served), p50/p99 per heartbeat kind, errors by
kind, the controller's CPU (psutil, share of one core), the generators' CPU per
heartbeat and event-loop lag, and the load average; then the burst's effect on
heartbeat p99 against the steady window of the same run. The machine is shared: a
loaded machine inflates every latency here, so the load average is printed beside the
numbers.

    python benchmarks/controller.py [--hosts 100,1000,2000] [--duration SECONDS]
                                    [--warmup SECONDS] [--converge SECONDS]
                                    [--burst N] [--processes P] [--loop uvloop|asyncio]

The default is a short run (100 hosts, 15 s windows).

Targets: 1,000 hosts - all offered heartbeats served, 0 errors, lease p99 <= 100 ms,
control p99 <= 250 ms; 2,000 hosts - 0 errors, p99 <= 1 s; the burst moves heartbeat
p99 by < 20 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
from fleetreport import Convergence, Progress, SizeResult, Window, merge, report, targets
from loadgen import INTERVAL, WARMUP, Phase, run_generator
from simhosts import MEMORY_MB, SHA, SimHost

MODELS = 8
REPLICAS = 2
UNPLACEABLE = "unplaceable"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(url: str, proc: subprocess.Popen[bytes], deadline: float = 120.0) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the process exited with {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not become healthy")


# --- the desired state ------------------------------------------------------------------


def write_desired(directory: Path, models: int = MODELS, replicas: int = REPLICAS) -> None:
    directory.mkdir(parents=True)
    (directory / "policy.yaml").write_text(
        textwrap.dedent("""\
            # yaml-language-server: $schema=../../schemas/controller-policy.schema.json
            apiVersion: gridctl/v1
            kind: ControllerPolicy
            metadata: {name: bench}
            spec:
              mode: automatic
            """)
    )
    docs = []
    for index in range(models):
        docs.append(
            textwrap.dedent(f"""\
                apiVersion: gridctl/v1
                kind: ModelProfile
                metadata: {{name: model-{index}}}
                spec:
                  memory_mb: {MEMORY_MB}
                  artifact: {{sha256: {SHA}}}
                  min_replicas: {replicas}
                  max_replicas: {replicas}
                """)
        )
    docs.append(
        textwrap.dedent(f"""\
            apiVersion: gridctl/v1
            kind: ModelProfile
            metadata: {{name: {UNPLACEABLE}}}
            spec:
              description: Needs a tag no host has, so it never has a ready replica.
              memory_mb: {MEMORY_MB}
              artifact: {{sha256: {SHA}}}
              required_tags: [nowhere]
              min_replicas: 1
              max_replicas: 1
            """)
    )
    (directory / "models.yaml").write_text("---\n".join(docs))


# --- the engine answering the controller's probes -------------------------------------


def engine_app() -> Any:
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def health(_request: Any) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    return Starlette(routes=[Route("/e/{rest:path}", health, methods=["GET"])])


def run_engine(port: int) -> int:
    import uvicorn

    uvicorn.run(engine_app(), host="127.0.0.1", port=port, log_level="warning")
    return 0


# --- the driver -------------------------------------------------------------------------


@dataclass
class Controller:
    proc: subprocess.Popen[bytes]
    url: str
    state: Path

    def cpu_seconds(self) -> float:
        """CPU of the controller's processes: the one serving and its planning process."""
        main = psutil.Process(self.proc.pid)
        total = 0.0
        for proc in [main, *main.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess):
                times = proc.cpu_times()
                total += times.user + times.system
        return total


def spawn(argv: list[str], log: Path, *, stdin: int | None = None) -> subprocess.Popen[bytes]:
    with log.open("ab") as sink:
        return subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, stdin=stdin)


def start_controller(root: Path) -> Controller:
    watch, state = root / "desired", root / "state"
    write_desired(watch)
    port = free_port()
    proc = spawn(
        [
            sys.executable,
            "-m",
            "gridctl",
            "controller",
            "--watch",
            str(watch),
            "--worktree",
            "--state",
            str(state),
            "--listen",
            f"127.0.0.1:{port}",
            "--no-context",
        ],
        root / "controller.log",
    )
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url + "/healthz", proc)
    return Controller(proc, url, state)


def credentials(state: Path, count: int, offset: int) -> list[dict[str, Any]]:
    """One host-scoped credential per simulated host, as ``gridctl up`` issues them."""
    from gridctl.credentials import issue_node_credential, load_or_create_signing_key

    key = load_or_create_signing_key(state)
    now = time.time()
    return [
        {
            "host_id": f"sim-{offset + i:05d}",
            "token": issue_node_credential(key, f"sim-{offset + i:05d}", now=now),
            "index": offset + i,
        }
        for i in range(count)
    ]


async def burst_loop(url: str, window: Phase, size: int, out: list[tuple[int, float]]) -> None:
    """``size`` concurrent chat requests for the unplaceable model every 5 s in ``window``."""
    limits = httpx.Limits(max_connections=size, max_keepalive_connections=size)
    async with httpx.AsyncClient(base_url=url, timeout=30.0, limits=limits) as client:

        async def one() -> None:
            started = time.perf_counter()
            try:
                response = await client.post(
                    "/v1/chat/completions",
                    json={"model": UNPLACEABLE, "messages": [{"role": "user", "content": "hi"}]},
                )
                status = response.status_code
            except httpx.HTTPError:
                status = 0
            out.append((status, (time.perf_counter() - started) * 1000))

        at = window.start + 0.5
        while at < window.end:
            await asyncio.sleep(max(0.0, at - time.time()))
            await asyncio.gather(*(one() for _ in range(size)))
            at += INTERVAL


async def converge(
    url: str, hosts: int, ramp_start: float, least: float, most: float
) -> Convergence:
    """Wait until every host registered, every replica the plan wants is ready and
    nothing is pending or proposed, seen on two polls in a row (a tick apart), and at
    least ``least`` seconds passed; give up after ``most`` seconds."""
    seen = 0
    progress = Progress()
    async with httpx.AsyncClient(base_url=url, timeout=60.0) as client:
        while True:
            await asyncio.sleep(2.0)
            elapsed = time.time() - ramp_start
            with contextlib.suppress(httpx.HTTPError, ValueError):
                progress = Progress.of((await client.get("/allocator/status")).json())
            seen = seen + 1 if progress.converged(hosts) else 0
            if seen >= 2 and elapsed >= least:
                return Convergence(True, elapsed, progress)
            if elapsed >= most:
                return Convergence(False, elapsed, progress)


def run_size(
    ctl: Controller, health_url: str, hosts: int, args: argparse.Namespace, root: Path, offset: int
) -> SizeResult:
    processes = args.processes or max(1, -(-hosts // 1000))
    creds = credentials(ctl.state, hosts, offset)
    ramp_start = time.time() + 2.0
    generators: list[tuple[subprocess.Popen[bytes], Path]] = []
    for n in range(processes):
        out = root / f"gen-{hosts}-{n}.json"
        spec = {
            "url": ctl.url,
            "health_url": health_url,
            "hosts": creds[n::processes],
            "ramp_start": ramp_start,
            "deadline": ramp_start + args.converge + 2 * args.duration + 60,
            "seed": hosts * 10 + n,
            "loop": args.loop,
            "out": str(out),
        }
        spec_path = root / f"gen-{hosts}-{n}.spec.json"
        spec_path.write_text(json.dumps(spec))
        argv = [sys.executable, __file__, "--generator", str(spec_path)]
        proc = spawn(argv, root / "generators.log", stdin=subprocess.PIPE)
        generators.append((proc, out))
    gen_procs = [psutil.Process(p.pid) for p, _ in generators]

    def gen_cpu() -> float:
        total = 0.0
        for proc in gen_procs:
            with contextlib.suppress(psutil.Error):
                times = proc.cpu_times()
                total += times.user + times.system
        return total

    samples: dict[str, tuple[float, float, float]] = {}
    loads: dict[str, tuple[float, float, float]] = {}
    phases: list[Phase] = []

    async def drive() -> tuple[Convergence, list[tuple[int, float]]]:
        reached = await converge(ctl.url, hosts, ramp_start, args.warmup, args.converge)
        # one full round of every host after convergence before the steady window
        steady_start = time.time() + INTERVAL
        phases.extend(
            [
                Phase("steady", steady_start, steady_start + args.duration),
                Phase("burst", steady_start + args.duration, steady_start + 2 * args.duration),
            ]
        )
        message = (json.dumps({"phases": [vars(p) for p in phases]}) + "\n").encode()
        for proc, _ in generators:
            assert proc.stdin is not None
            proc.stdin.write(message)
            proc.stdin.flush()
        burst: list[tuple[int, float]] = []
        task: asyncio.Task[None] | None = None
        for phase in phases:
            await asyncio.sleep(max(0.0, phase.start - time.time()))
            samples[phase.name + ".start"] = (time.monotonic(), ctl.cpu_seconds(), gen_cpu())
            if phase.name == "burst" and args.burst > 0:
                task = asyncio.create_task(burst_loop(ctl.url, phase, args.burst, burst))
            await asyncio.sleep(max(0.0, phase.end - time.time()))
            samples[phase.name + ".end"] = (time.monotonic(), ctl.cpu_seconds(), gen_cpu())
            loads[phase.name] = os.getloadavg()
        if task is not None:
            await task
        return reached, burst

    try:
        reached, burst = asyncio.run(drive())
    finally:
        for proc, _ in generators:
            if proc.stdin is not None:
                proc.stdin.close()  # EOF: a generator not yet told its windows stops
    results = []
    for proc, out in generators:
        proc.wait(timeout=args.duration + 120)
        results.append(json.loads(out.read_text()))
    windows: dict[str, Window] = {}
    for phase in phases:
        merged = merge(results, phase.name)
        t0, c0, g0 = samples[phase.name + ".start"]
        t1, c1, g1 = samples[phase.name + ".end"]
        windows[phase.name] = Window(
            **merged,
            ctl_cpu=(c1 - c0) / (t1 - t0),
            gen_cpu=(g1 - g0) / (t1 - t0),
            seconds=t1 - t0,
            load=loads[phase.name],
        )
    connects = sum(int(r["connects"]) for r in results)
    result = SizeResult(
        hosts=hosts,
        processes=processes,
        loop=args.loop,
        convergence=reached,
        warmup=merge(results, WARMUP),
        windows=windows,
        burst=burst,
        burst_model=UNPLACEABLE,
        connects=connects,
    )
    report(result)
    return result


def handling_cost(root: Path, hosts: int = 200, rounds: int = 10) -> tuple[float, float]:
    """CPU per heartbeat of the controller's own handling, in this process, for a full
    heartbeat and for a lease renewal (ms): the credential check, JSON parse, endpoint
    check, registry and controller intake, the answer and its encoding (no HTTP
    framework, no tick running)."""
    from gridctl.bodies import parse_json
    from gridctl.controller.endpoints import check_engine_endpoints
    from gridctl.controller.registry import is_lease
    from gridctl.controller.serving import ControllerService, ServiceOptions

    watch = root / "cost-desired"
    write_desired(watch)
    service = ControllerService(ServiceOptions(state_dir=root / "cost-state", watch_dir=watch))
    service.build_app()
    ctl = service.controller
    creds = credentials(root / "cost-state", hosts, 0)
    sims = [SimHost(c["host_id"], c["token"], "http://127.0.0.1:1/e", c["index"]) for c in creds]
    for sim in sims[: hosts // 2]:  # half the fleet serves a model
        for kind in ("load", "warm"):
            sim.execute({"action_id": f"{sim.host_id}-{kind}", "kind": kind, "model_id": "model-0"})
        sim.acknowledged(list(sim.receipts))
    for sim in sims:
        ctl.register(sim.host_id, json.loads(sim.registration()))
    ctl.tick()

    def per_heartbeat(bodies: list[list[bytes]]) -> float:
        started = time.process_time()
        for batch in bodies:
            for sim, body in zip(sims, batch, strict=True):
                claims = service.verify_node(sim.token, sim.host_id)
                payload = parse_json(body)
                check_engine_endpoints(payload, claims)
                if is_lease(payload):
                    _revision, current = ctl.renew_lease(sim.host_id, payload)
                else:
                    ctl.heartbeat(sim.host_id, payload)
                    current = True
                answer = ctl.delivery.heartbeat_response(sim.host_id, [])
                if not current:
                    answer["send_full_inventory"] = True
                answer.update(service._node_extras())
                json.dumps(answer)
        return (time.process_time() - started) / (hosts * rounds) * 1000

    full = [[sim.heartbeat(request_commands=False) for sim in sims] for _ in range(rounds)]
    full_ms = per_heartbeat(full)  # (no answer taken yet: each body carries the inventory)
    for sim in sims:
        sim.answered({})  # the controller took the registration: leases from now on
    leases = [[sim.heartbeat(request_commands=False) for sim in sims] for _ in range(rounds)]
    assert not any(sim.sent_full for sim in sims)
    lease_ms = per_heartbeat(leases)
    service.store.close()
    return full_ms, lease_ms


def print_handling_cost(root: Path) -> None:
    full_ms, lease_ms = handling_cost(root)
    print(
        f"heartbeat handling CPU in process: {full_ms:.3f} ms per full heartbeat, "
        f"{lease_ms:.3f} ms per lease renewal (target < 0.5; {full_ms / lease_ms:.1f}x)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", default="100", help="comma-separated fleet sizes (100)")
    parser.add_argument("--duration", type=float, default=15.0, help="seconds per window (15)")
    parser.add_argument(
        "--warmup", type=float, default=15.0, help="least seconds of warm-up before the windows"
    )
    parser.add_argument(
        "--converge",
        type=float,
        default=300.0,
        help="most seconds to wait for the fleet to converge (300)",
    )
    parser.add_argument("--burst", type=int, default=50, help="requests per burst (50; 0: none)")
    parser.add_argument(
        "--processes", type=int, default=0, help="generator processes (auto: one per 1000 hosts)"
    )
    try:
        import uvloop  # noqa: F401

        default_loop = "uvloop"
    except ImportError:
        default_loop = "asyncio"
    parser.add_argument(
        "--loop",
        choices=("uvloop", "asyncio"),
        default=default_loop,
        help=f"the generators' event loop ({default_loop})",
    )
    parser.add_argument("--keep", action="store_true", help="keep the run directory")
    parser.add_argument(
        "--cost-only", action="store_true", help="only the in-process per-heartbeat CPU"
    )
    parser.add_argument("--generator", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--engine", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.generator is not None:
        return run_generator(args.generator)
    if args.engine is not None:
        return run_engine(args.engine)
    sizes = [int(s) for s in args.hosts.split(",") if s.strip()]
    if args.cost_only:
        root = Path(tempfile.mkdtemp(prefix="gridctl-bench-"))
        print_handling_cost(root)
        return 0
    if not sizes or any(not 1 <= s <= 10_000 for s in sizes):
        parser.error("--hosts must list sizes between 1 and 10000")
    if args.duration < INTERVAL or args.warmup < 0:
        parser.error(f"--duration must be at least {INTERVAL:g} s and --warmup not negative")
    if args.converge < args.warmup:
        parser.error("--converge must be at least --warmup")
    root = Path(tempfile.mkdtemp(prefix="gridctl-bench-"))
    print(f"cores {os.cpu_count()}, load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print_handling_cost(root)
    engine_port = free_port()
    engine = spawn([sys.executable, __file__, "--engine", str(engine_port)], root / "engine.log")
    ctl: Controller | None = None
    results: list[SizeResult] = []
    try:
        health = f"http://127.0.0.1:{engine_port}/e"
        wait_healthy(f"{health}/ready/health", engine)
        offset = 0
        for size in sizes:
            ctl = start_controller(root / f"run-{size}")
            results.append(run_size(ctl, health, size, args, root, offset))
            ctl.proc.terminate()
            ctl.proc.wait(timeout=60)
            ctl = None
            offset += size
    finally:
        if ctl is not None:
            ctl.proc.terminate()
            ctl.proc.wait(timeout=60)
        engine.terminate()
        engine.wait(timeout=30)
        if args.keep:
            print(f"run directory kept: {root}")
        else:
            import shutil

            shutil.rmtree(root, ignore_errors=True)
    verdicts = targets(results)
    if verdicts:
        print("\ntargets (printed, not asserted; see the load averages above)")
        for line in verdicts:
            print(f"  {line}")
    print(f"\nload average at the end {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
