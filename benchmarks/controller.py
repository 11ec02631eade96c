"""What one controller sustains: simulated hosts on the real wire protocol over real HTTP.

One run starts a real ``gridctl controller`` process on loopback (a watched directory
of model profiles, automatic mode, a state directory) and, for each fleet size, load
generator processes (asyncio + httpx) that each simulate a share of the hosts. Every
simulated host holds its own credential, issued with the controller's signing key as
``gridctl up`` issues them to its local nodes, and its own keep-alive connection. It
registers with the payload a real node sends (``gridctl.node.reports``), then every
5 s sends a lease heartbeat (``request_commands: false``, carrying its receipts) and a
control heartbeat (``request_commands: true``), executes the commands it receives at
once (load -> cached, warm -> ready with an endpoint, drain, unload, evict) and
acknowledges them in the next lease heartbeat. A tiny engine process answers the
controller's ``/health`` probes, so warmed replicas become routable as real ones do.

Each size runs a warm-up (registration and convergence), a steady window, and a burst
window of the same length in which 50 concurrent chat requests for a configured model
that has no ready replica (it requires a tag no host has) go through the router every
5 s. It prints, per window: offered and served heartbeats (a heartbeat is offered when
its 5 s slot falls in the window; a slot a late host could not send is offered and not
served), p50/p99 per heartbeat kind, errors, the controller's CPU (psutil, share of one
core), the generators' CPU and the load average, then the burst's effect on heartbeat
p99. The machine is shared: a loaded machine inflates every latency here, so the load
average is printed beside the numbers.

    python benchmarks/controller.py [--hosts 100,1000,2000] [--duration SECONDS]
                                    [--warmup SECONDS] [--burst N] [--processes P]

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
import random
import socket
import ssl
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

INTERVAL = 5.0  # the node agent's heartbeat period
MODELS = 8
REPLICAS = 2
MEMORY_MB = 640
UNPLACEABLE = "unplaceable"
SHA = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
NODE_TOKEN_HEADER = "X-Grid-Allocator-Node-Token"
REQUEST_TIMEOUT = 30.0  # the node agent's request timeout
KINDS = ("lease", "control")


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


def write_desired(directory: Path) -> None:
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
    for index in range(MODELS):
        docs.append(
            textwrap.dedent(f"""\
                apiVersion: gridctl/v1
                kind: ModelProfile
                metadata: {{name: model-{index}}}
                spec:
                  memory_mb: {MEMORY_MB}
                  artifact: {{sha256: {SHA}}}
                  min_replicas: {REPLICAS}
                  max_replicas: {REPLICAS}
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


# --- a simulated host --------------------------------------------------------------------


@dataclass
class Phase:
    name: str
    start: float
    end: float


@dataclass
class Tally:
    """What one window saw, per heartbeat kind."""

    offered: int = 0
    served: int = 0
    latencies: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})
    errors: dict[str, int] = field(default_factory=dict)

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


@dataclass
class SimHost:
    host_id: str
    token: str
    health_url: str
    index: int
    cached: dict[str, str] = field(default_factory=dict)
    ready: dict[str, float] = field(default_factory=dict)  # model -> loaded_at
    draining: set[str] = field(default_factory=set)
    receipts: list[dict[str, Any]] = field(default_factory=list)
    executed: set[str] = field(default_factory=set)

    def _parts(self) -> tuple[Any, Any, dict[str, object]]:
        from gridctl.domain.states import HostState, ResidencyState
        from gridctl.node import reports
        from gridctl.node.records import CachedArtifact, ResidencyRecord

        now = time.time()
        facts = reports.HostFacts(
            host_id=self.host_id,
            capacity_mb=4096,
            failure_domain=f"zone-{self.index % 16}",
            tags=("bench",),
            external_mb=0,
        )
        sample = reports.ResourceSample(
            total_mb=8192,
            available_mb=6144,
            managed_rss_mb=0,
            disk_free_mb=100_000,
            disk_total_mb=200_000,
        )
        records = [
            ResidencyRecord(
                model_id=model,
                state=ResidencyState.DRAINING if model in self.draining else ResidencyState.READY,
                memory_mb=MEMORY_MB,
                artifact_sha256=self.cached.get(model, SHA),
                port=20000 + n,
                pid=100_000 + n,
                loaded_at=loaded_at,
            )
            for n, (model, loaded_at) in enumerate(sorted(self.ready.items()))
        ]
        cached = [
            CachedArtifact(model, sha, f"/cache/{sha}", 300_000_000, cached_at=now - 60)
            for model, sha in sorted(self.cached.items())
        ]
        envelope = reports.allocator_envelope(
            HostState.ACCEPTING,
            records,
            cached,
            now,
            endpoint_of=lambda r: f"{self.health_url}/{self.host_id}/{r.model_id}",
            engine_api_key=f"engine-key-{self.host_id}",
            max_concurrency=2,
        )
        return facts, sample, envelope

    def registration(self) -> bytes:
        from gridctl.node import reports

        facts, sample, envelope = self._parts()
        return json.dumps(
            reports.registration(facts, sample, envelope, sorted(self.ready))
        ).encode()

    def heartbeat(self, *, request_commands: bool, receipts: list[dict[str, Any]]) -> bytes:
        from gridctl.node import reports

        facts, sample, envelope = self._parts()
        body = {
            "node_id": self.host_id,
            "load": {"active_tasks": 0, "queue_depth": 0},
            "resources": reports.resources(facts, sample),
            "allocator": envelope,
            "request_commands": request_commands,
            "acknowledgements": receipts,
        }
        return json.dumps(body).encode()

    def execute(self, command: dict[str, Any]) -> None:
        """Commands finish at once; each is acknowledged in the next lease heartbeat."""
        action_id = str(command["action_id"])
        if action_id in self.executed:
            return  # a re-delivered command is harmless
        self.executed.add(action_id)
        kind, model = command["kind"], command["model_id"]
        if kind == "load":
            self.cached[model] = str(command.get("artifact_sha256") or SHA)
        elif kind == "warm":
            self.ready[model] = time.time()
            self.draining.discard(model)
        elif kind == "drain":
            self.draining.add(model)
        elif kind == "unload":
            self.ready.pop(model, None)
            self.draining.discard(model)
        elif kind == "evict":
            self.cached.pop(model, None)
        self.receipts.append(
            {
                "action_id": action_id,
                "status": "succeeded",
                "message": kind,
                "duration_seconds": 0.01,
                "artifact_fetched": kind == "load",
            }
        )


async def post(
    client: httpx.AsyncClient, method: str, path: str, body: bytes, token: str
) -> httpx.Response:
    return await client.request(
        method,
        path,
        content=body,
        headers={NODE_TOKEN_HEADER: token, "content-type": "application/json"},
    )


def window_of(phases: list[Phase], at: float) -> Tally | None:
    for phase in phases:
        if phase.start <= at < phase.end:
            return TALLIES[phase.name]
    return None


TALLIES: dict[str, Tally] = {}


async def host_loop(
    host: SimHost,
    url: str,
    verify: ssl.SSLContext,
    first_slot: float,
    phases: list[Phase],
    end: float,
) -> None:
    """Register, then a lease and a control heartbeat every 5 s until ``end``."""
    async with httpx.AsyncClient(
        base_url=url, timeout=REQUEST_TIMEOUT, verify=verify, trust_env=False
    ) as client:
        registered = False
        slot = first_slot
        while slot < end:
            delay = slot - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tally = window_of(phases, slot)
            if tally is not None:
                tally.offered += 2
            try:
                if not registered:
                    answer = await post(
                        client, "PUT", f"/nodes/{host.host_id}", host.registration(), host.token
                    )
                    if answer.status_code != 200:
                        raise RuntimeError(f"registration HTTP {answer.status_code}")
                    registered = True
                sent = list(host.receipts)
                for kind in KINDS:
                    control = kind == "control"
                    body = host.heartbeat(
                        request_commands=control, receipts=[] if control else sent
                    )
                    started = time.perf_counter()
                    response = await post(
                        client, "POST", f"/nodes/{host.host_id}/heartbeat", body, host.token
                    )
                    took = (time.perf_counter() - started) * 1000
                    if response.status_code != 200:
                        if tally is not None:
                            tally.error(f"{kind} HTTP {response.status_code}")
                        if response.status_code in (400, 404, 409):
                            registered = False
                        break
                    if tally is not None:
                        tally.served += 1
                        tally.latencies[kind].append(took)
                    if not control:
                        done = {r["action_id"] for r in sent}
                        host.receipts = [r for r in host.receipts if r["action_id"] not in done]
                        continue
                    for command in response.json()["allocator"]["commands"]:
                        host.execute(command)
            except (httpx.HTTPError, RuntimeError, ValueError, KeyError) as exc:
                if tally is not None:
                    tally.error(type(exc).__name__)
            slot += INTERVAL
            while slot + INTERVAL < time.time():  # a host this late skips a slot
                missed = window_of(phases, slot)
                if missed is not None:
                    missed.offered += 2
                slot += INTERVAL


async def lag_probe(end: float, out: list[float]) -> None:
    """How late this generator's own event loop runs (it inflates every latency)."""
    while time.time() < end:
        started = time.perf_counter()
        await asyncio.sleep(0.05)
        out.append((time.perf_counter() - started - 0.05) * 1000)


async def generate(spec: dict[str, Any]) -> dict[str, Any]:
    phases = [Phase(**p) for p in spec["phases"]]
    for phase in phases:
        TALLIES[phase.name] = Tally()
    verify = ssl.create_default_context()  # one context for every client (plain HTTP)
    ramp_start, end = float(spec["ramp_start"]), float(spec["end"])
    lags: list[float] = []
    tasks = [asyncio.create_task(lag_probe(end, lags))]
    rng = random.Random(spec["seed"])
    for entry in spec["hosts"]:
        host = SimHost(entry["host_id"], entry["token"], spec["health_url"], entry["index"])
        first = ramp_start + rng.uniform(0, INTERVAL)
        tasks.append(asyncio.create_task(host_loop(host, spec["url"], verify, first, phases, end)))
    await asyncio.gather(*tasks)
    return {
        "tallies": {
            name: {
                "offered": t.offered,
                "served": t.served,
                "latencies": t.latencies,
                "errors": t.errors,
            }
            for name, t in TALLIES.items()
        },
        "lag_p99_ms": percentile(lags, 99),
    }


def run_generator(spec_path: Path) -> int:
    spec = json.loads(spec_path.read_text())
    result = asyncio.run(generate(spec))
    Path(spec["out"]).write_text(json.dumps(result))
    return 0


# --- the engine answering the controller's probes -------------------------------------


def run_engine(port: int) -> int:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def health(_request: Any) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    app = Starlette(routes=[Route("/e/{rest:path}", health, methods=["GET"])])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
    return 0


# --- the driver -------------------------------------------------------------------------


def percentile(values: list[float], pct: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(pct / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


@dataclass
class Controller:
    proc: subprocess.Popen[bytes]
    url: str
    state: Path

    def cpu_seconds(self) -> float:
        times = psutil.Process(self.proc.pid).cpu_times()
        return float(times.user + times.system)


def spawn(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as sink:
        return subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT)


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


@dataclass
class Window:
    offered: int
    served: int
    latencies: dict[str, list[float]]
    errors: dict[str, int]
    ctl_cpu: float  # share of one core
    gen_cpu: float
    load: tuple[float, float, float]


Merged = tuple[int, int, dict[str, list[float]], dict[str, int]]


def merge(results: list[dict[str, Any]], name: str) -> Merged:
    offered = served = 0
    latencies: dict[str, list[float]] = {k: [] for k in KINDS}
    errors: dict[str, int] = {}
    for result in results:
        tally = result["tallies"][name]
        offered += tally["offered"]
        served += tally["served"]
        for kind in KINDS:
            latencies[kind].extend(tally["latencies"][kind])
        for what, count in tally["errors"].items():
            errors[what] = errors.get(what, 0) + count
    return offered, served, latencies, errors


def run_size(
    ctl: Controller, health_url: str, hosts: int, args: argparse.Namespace, root: Path, offset: int
) -> dict[str, Window]:
    processes = args.processes or max(1, min(4, -(-hosts // 500)))
    creds = credentials(ctl.state, hosts, offset)
    now = time.time()
    ramp_start = now + 2.0
    steady_start = ramp_start + args.warmup
    phases = [
        Phase("steady", steady_start, steady_start + args.duration),
        Phase("burst", steady_start + args.duration, steady_start + 2 * args.duration),
    ]
    end = phases[-1].end
    generators: list[tuple[subprocess.Popen[bytes], Path]] = []
    for n in range(processes):
        out = root / f"gen-{hosts}-{n}.json"
        spec = {
            "url": ctl.url,
            "health_url": health_url,
            "hosts": creds[n::processes],
            "phases": [vars(p) for p in phases],
            "ramp_start": ramp_start,
            "end": end,
            "seed": hosts * 10 + n,
            "out": str(out),
        }
        spec_path = root / f"gen-{hosts}-{n}.spec.json"
        spec_path.write_text(json.dumps(spec))
        proc = spawn(
            [sys.executable, __file__, "--generator", str(spec_path)], root / "generators.log"
        )
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

    async def drive() -> list[tuple[int, float]]:
        burst: list[tuple[int, float]] = []
        for phase in phases:
            await asyncio.sleep(max(0.0, phase.start - time.time()))
            samples[phase.name + ".start"] = (time.monotonic(), ctl.cpu_seconds(), gen_cpu())
            if phase.name == "burst" and args.burst > 0:
                task = asyncio.create_task(burst_loop(ctl.url, phase, args.burst, burst))
            await asyncio.sleep(max(0.0, phase.end - time.time()))
            samples[phase.name + ".end"] = (time.monotonic(), ctl.cpu_seconds(), gen_cpu())
            samples[phase.name + ".load"] = os.getloadavg()
        if args.burst > 0:
            await task
        return burst

    burst = asyncio.run(drive())
    results = []
    for proc, out in generators:
        proc.wait(timeout=args.duration + 120)
        results.append(json.loads(out.read_text()))
    windows: dict[str, Window] = {}
    for phase in phases:
        offered, served, latencies, errors = merge(results, phase.name)
        t0, c0, g0 = samples[phase.name + ".start"]
        t1, c1, g1 = samples[phase.name + ".end"]
        windows[phase.name] = Window(
            offered,
            served,
            latencies,
            errors,
            (c1 - c0) / (t1 - t0),
            (g1 - g0) / (t1 - t0),
            samples[phase.name + ".load"],
        )
    lag = max(r["lag_p99_ms"] for r in results)
    report(hosts, processes, windows, burst, lag, args)
    return windows


def handling_cost(root: Path, hosts: int = 200, rounds: int = 10) -> float:
    """CPU per lease heartbeat of the controller's own handling, in this process: the
    credential check, JSON parse, endpoint check, registry and controller intake, the
    answer and its encoding (no HTTP framework, no tick running)."""
    from gridctl.bodies import parse_json
    from gridctl.controller.endpoints import check_engine_endpoints
    from gridctl.controller.serving import ControllerService, ServiceOptions

    watch = root / "cost-desired"
    write_desired(watch)
    service = ControllerService(ServiceOptions(state_dir=root / "cost-state", watch_dir=watch))
    service.build_app()
    ctl = service.controller
    creds = credentials(root / "cost-state", hosts, 0)
    sims = [SimHost(c["host_id"], c["token"], "http://127.0.0.1:1/e", c["index"]) for c in creds]
    for sim in sims[: hosts // 2]:  # half the fleet serves a model
        sim.cached["model-0"] = SHA
        sim.ready["model-0"] = time.time() - 60
    for sim in sims:
        ctl.register(sim.host_id, json.loads(sim.registration()))
    ctl.tick()
    bodies = [
        [sim.heartbeat(request_commands=False, receipts=[]) for sim in sims] for _ in range(rounds)
    ]
    started = time.process_time()
    for batch in bodies:
        for sim, body in zip(sims, batch, strict=True):
            claims = service.verify_node(sim.token, sim.host_id)
            payload = parse_json(body)
            check_engine_endpoints(payload, claims)
            ctl.heartbeat(sim.host_id, payload)
            answer = ctl.heartbeat_response(sim.host_id, [])
            answer.update(service._node_extras())
            json.dumps(answer)
    per = (time.process_time() - started) / (hosts * rounds)
    service.store.close()
    return per * 1000


def ms(value: float) -> str:
    return f"{value:.0f} ms" if value >= 10 else f"{value:.1f} ms"


def report(
    hosts: int,
    processes: int,
    windows: dict[str, Window],
    burst: list[tuple[int, float]],
    lag: float,
    args: argparse.Namespace,
) -> None:
    print(f"\n{hosts} hosts ({processes} generator process(es), {args.duration:g} s windows)")
    for name, w in windows.items():
        rate = w.offered / args.duration
        errors = sum(w.errors.values())
        detail = f" {w.errors}" if w.errors else ""
        print(
            f"  {name:<7} served/offered {w.served}/{w.offered} ({rate:.0f} req/s offered), "
            f"errors {errors}{detail}"
        )
        for kind in KINDS:
            values = w.latencies[kind]
            print(
                f"          {kind:<7} p50 {ms(percentile(values, 50)):>8}  "
                f"p99 {ms(percentile(values, 99)):>8}  max {ms(max(values, default=0)):>8}"
            )
        per = w.ctl_cpu * args.duration / w.served * 1000 if w.served else float("nan")
        print(
            f"          controller CPU {w.ctl_cpu * 100:.0f}% of a core ({per:.2f} ms per "
            f"served heartbeat, ticks and probes included), generators "
            f"{w.gen_cpu * 100:.0f}%, load average {w.load[0]:.2f} {w.load[1]:.2f} {w.load[2]:.2f}"
        )
    if burst:
        codes: dict[int, int] = {}
        for status, _ in burst:
            codes[status] = codes.get(status, 0) + 1
        took = [t for _, t in burst]
        print(
            f"  burst: {len(burst)} requests for {UNPLACEABLE!r} (statuses {codes}), "
            f"p50 {ms(percentile(took, 50))}, p99 {ms(percentile(took, 99))}"
        )
        for kind in KINDS:
            before = percentile(windows["steady"].latencies[kind], 99)
            during = percentile(windows["burst"].latencies[kind], 99)
            print(
                f"  {kind} heartbeat p99 without the burst {ms(before)}, with it {ms(during)} "
                f"(moved {during - before:+.1f} ms)"
            )
    print(f"  generator event-loop lag p99 {ms(lag)} (included in every latency above)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", default="100", help="comma-separated fleet sizes (100)")
    parser.add_argument("--duration", type=float, default=15.0, help="seconds per window (15)")
    parser.add_argument("--warmup", type=float, default=15.0, help="seconds to converge (15)")
    parser.add_argument("--burst", type=int, default=50, help="requests per burst (50; 0: none)")
    parser.add_argument("--processes", type=int, default=0, help="generator processes (auto)")
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
        print(f"heartbeat handling CPU in process: {handling_cost(root):.3f} ms (target < 0.5)")
        return 0
    if not sizes or any(not 1 <= s <= 5000 for s in sizes):
        parser.error("--hosts must list sizes between 1 and 5000")
    if args.duration < INTERVAL or args.warmup < INTERVAL:
        parser.error(f"--duration and --warmup must be at least {INTERVAL:g} s")
    root = Path(tempfile.mkdtemp(prefix="gridctl-bench-"))
    print(f"cores {os.cpu_count()}, load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    cost = handling_cost(root)
    print(f"heartbeat handling CPU in process: {cost:.3f} ms per lease heartbeat (target < 0.5)")
    engine_port = free_port()
    engine = spawn([sys.executable, __file__, "--engine", str(engine_port)], root / "engine.log")
    ctl: Controller | None = None
    try:
        health = f"http://127.0.0.1:{engine_port}/e"
        wait_healthy(f"{health}/ready/health", engine)
        offset = 0
        for size in sizes:
            ctl = start_controller(root / f"run-{size}")
            run_size(ctl, health, size, args, root, offset)
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
    print(f"\nload average at the end {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
