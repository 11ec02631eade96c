"""The load generator of the controller benchmark: simulated hosts over real HTTP.

Each simulated host keeps one persistent HTTP/1.1 connection, as the node agent's
client does, and runs the agent's round every 5 s: registration when the controller
does not know it, a lease heartbeat, then a control heartbeat whose commands it runs
at once, starting its next round as soon as an action ran. The client is a small
HTTP/1.1 keep-alive client on asyncio streams (``httptools`` parses responses), run
under uvloop when installed: the generator's own CPU per heartbeat stays a small
share of what the controller spends. A generator process learns its measurement
windows on stdin once the driver saw the fleet converge, and writes what each window
saw to a JSON file.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import httptools
from simhosts import SimHost

INTERVAL = 5.0  # the node agent's heartbeat period
NODE_TOKEN_HEADER = "X-Grid-Allocator-Node-Token"
REQUEST_TIMEOUT = 30.0  # the node agent's request timeout
KINDS = ("lease", "control")
LAG_PROBE_SECONDS = 0.05
# the node agent's pacing after a failed round (gridctl.node.agent)
TRANSIENT_RETRY_SECONDS = 2.0
FORGOTTEN_RETRY_SECONDS = 0.1
PERMANENT_RETRY_SECONDS = 30.0
MAX_BACKOFF_SECONDS = 30.0

# --- a lean HTTP/1.1 keep-alive client -----------------------------------------------------


class PeerClosed(ConnectionError):
    """The server closed the connection before its response ended."""


class HttpConnection:
    """One persistent HTTP/1.1 connection, as the node agent's client keeps one: requests
    go one at a time; a response that asks to close, or a server that closed the idle
    connection, means a new connection for the next request."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname is None or parts.port is None:
            raise ValueError(f"{url}: an http://host:port URL is required")
        self.host, self.port = parts.hostname, parts.port
        self._authority = f"{self.host}:{self.port}".encode()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._parser: Any = None
        self._body: list[bytes] = []
        self._complete = False
        self._status = 0
        self._keep_alive = False
        self.connects = 0

    # httptools callbacks
    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_headers_complete(self) -> None:
        self._status = int(self._parser.get_status_code())
        self._keep_alive = bool(self._parser.should_keep_alive())

    def on_message_complete(self) -> None:
        self._complete = True

    @property
    def reusable(self) -> bool:
        return (
            self._reader is not None
            and self._writer is not None
            and not self._reader.at_eof()
            and not self._writer.is_closing()
        )

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        self.close()
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        self._parser = httptools.HttpResponseParser(self)
        self.connects += 1
        return self._reader, self._writer

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def wait_closed_by_peer(self) -> None:
        """Return once the server has closed the idle connection."""
        if self._reader is not None and await self._reader.read(65536):
            raise AssertionError("the server sent bytes nobody asked for")

    async def request(
        self, method: bytes, path: bytes, headers: bytes, body: bytes
    ) -> tuple[int, bytes]:
        """``headers`` are complete ``Name: value\\r\\n`` lines; returns status and body."""
        if self.reusable:
            assert self._reader is not None and self._writer is not None
            reader, writer = self._reader, self._writer
        else:
            reader, writer = await self._connect()
        writer.write(
            b"%s %s HTTP/1.1\r\nHost: %s\r\n%sContent-Length: %d\r\n\r\n%s"
            % (method, path, self._authority, headers, len(body), body)
        )
        self._body, self._complete, self._keep_alive = [], False, False
        try:
            await writer.drain()
            while not self._complete:
                data = await reader.read(65536)
                if not data:
                    raise PeerClosed("the server closed the connection before answering")
                self._parser.feed_data(data)
        except BaseException:
            self.close()
            raise
        if not self._keep_alive:
            self.close()
        return self._status, b"".join(self._body)


CONNECTION_RESETS = (PeerClosed, ConnectionResetError, BrokenPipeError)


# --- a round of one host ---------------------------------------------------------------------


@dataclass
class Phase:
    name: str
    start: float
    end: float


@dataclass
class Tally:
    """What one window saw."""

    offered: int = 0
    served: int = 0
    latencies: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})
    errors: dict[str, int] = field(default_factory=dict)  # "kind: what" -> count
    resent: int = 0  # lease heartbeats sent again after a connection reset
    lags: list[float] = field(default_factory=list)  # the generator's event-loop lag, ms

    def error(self, kind: str, what: str) -> None:
        key = f"{kind}: {what}"
        self.errors[key] = self.errors.get(key, 0) + 1


class HostClient:
    """A simulated host speaking to the controller over its own connection."""

    def __init__(self, host: SimHost, url: str) -> None:
        self.host = host
        self.conn = HttpConnection(url)
        headers = f"{NODE_TOKEN_HEADER}: {host.token}\r\nContent-Type: application/json\r\n"
        self._headers = headers.encode()
        self._node_path = f"/nodes/{host.host_id}".encode()
        self._heartbeat_path = f"/nodes/{host.host_id}/heartbeat".encode()

    async def _send(
        self, method: bytes, path: bytes, body: bytes, *, resend: bool, tally: Tally | None
    ) -> tuple[int, bytes]:
        tries = 2 if resend else 1
        for attempt in range(1, tries + 1):
            try:
                async with asyncio.timeout(REQUEST_TIMEOUT):
                    return await self.conn.request(method, path, self._headers, body)
            except CONNECTION_RESETS:
                if attempt == tries:
                    raise
                if tally is not None:
                    tally.resent += 1
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    async def round(self, tally: Tally | None) -> Outcome:
        """Registration if needed, then a lease and a control heartbeat."""
        host = self.host
        acted = False
        kind = "registration"
        try:
            if not host.registered:
                status, answer = await self._send(
                    b"PUT", self._node_path, host.registration(), resend=False, tally=tally
                )
                if status != 200:
                    if tally is not None:
                        tally.error(kind, f"HTTP {status}")
                    return refused(status, answer)
                host.registered = True
                host.answered({})
            for kind in KINDS:
                control = kind == "control"
                sent = list(host.receipts)
                body = host.heartbeat(request_commands=control)
                started = time.perf_counter()
                status, answer = await self._send(
                    b"POST", self._heartbeat_path, body, resend=not control, tally=tally
                )
                took = (time.perf_counter() - started) * 1000
                if status != 200:
                    if tally is not None:
                        tally.error(kind, f"HTTP {status}")
                    if status in (404, 409) or (status == 400 and b"not registered" in answer):
                        host.registered = False
                        return Outcome(acted, FORGOTTEN_RETRY_SECONDS)
                    return refused(status)
                if tally is not None:
                    tally.served += 1
                    tally.latencies[kind].append(took)
                host.acknowledged(sent)
                payload = json.loads(answer)
                host.answered(payload)
                if control:
                    for command in payload["allocator"]["commands"]:
                        acted = host.execute(command) or acted
        except (OSError, TimeoutError, httptools.HttpParserError, ValueError, KeyError) as exc:
            if tally is not None:
                tally.error(kind, type(exc).__name__)
            return Outcome(acted, TRANSIENT_RETRY_SECONDS)
        return Outcome(acted)


class Outcome(NamedTuple):
    """How a round ended, and so when the agent starts the next one: at once after a
    command ran, after ``retry_after`` (with the agent's backoff) after a failure, else
    on its 5 s period."""

    acted: bool
    retry_after: float | None = None
    permanent: bool = False


def refused(status: int, answer: bytes = b"") -> Outcome:
    """A refusal's next round, as the agent takes it: a controller behind a large fleet
    names when to register again (503, ``retry_after_seconds``), as ``come_back_in``."""
    if status in (401, 403):
        return Outcome(False, PERMANENT_RETRY_SECONDS, permanent=True)
    if status == 503:
        try:
            named = json.loads(answer)["error"]["retry_after_seconds"]
        except (ValueError, KeyError, TypeError):
            named = None
        if isinstance(named, int | float):
            return Outcome(False, min(max(float(named), 0.5), 60.0))
    return Outcome(False, TRANSIENT_RETRY_SECONDS)


def next_round(outcome: Outcome, slot: float, now: float, backoff: float) -> tuple[float, float]:
    """When the agent starts its next round, and its backoff (``NodeAgent.run``)."""
    if outcome.retry_after is None:
        return (now if outcome.acted else slot + INTERVAL), 0.0
    if outcome.permanent:
        return now + outcome.retry_after, backoff
    backoff = min(max(outcome.retry_after, backoff * 2 or 0.5), MAX_BACKOFF_SECONDS)
    return now + backoff, backoff


# --- a generator process ---------------------------------------------------------------------


WARMUP = "warm-up"  # everything before the first window: registration and convergence


class Run:
    """The windows a generator tallies; the driver sends them once the fleet converged.
    Until the first window starts, rounds count in the warm-up."""

    def __init__(self, deadline: float) -> None:
        self.phases: list[Phase] = []
        self.tallies: dict[str, Tally] = {WARMUP: Tally()}
        self.end = deadline

    def start(self, phases: list[Phase]) -> None:
        self.phases = phases
        self.tallies.update({p.name: Tally() for p in phases})
        self.end = phases[-1].end

    def window(self, at: float) -> Tally | None:
        if not self.phases or at < self.phases[0].start:
            return self.tallies[WARMUP]
        for phase in self.phases:
            if phase.start <= at < phase.end:
                return self.tallies[phase.name]
        return None


async def host_loop(client: HostClient, first_slot: float, run: Run) -> None:
    """The agent's rounds until the run ends. A round is offered in the window its start
    falls in; a 5 s slot a late or backing-off host could not send is offered there too."""
    slot, backoff = first_slot, 0.0
    while slot < run.end:
        delay = slot - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        if slot >= run.end:
            break
        tally = run.window(slot)
        if tally is not None:
            tally.offered += 2
        outcome = await client.round(tally)
        now = time.time()
        upcoming, backoff = next_round(outcome, slot, now, backoff)
        regular = outcome.retry_after is None and not outcome.acted
        # every 5 s slot before the next round but the last is one this host missed
        cutoff = now if regular else upcoming
        missed = slot + INTERVAL
        while missed + INTERVAL <= cutoff:
            window = run.window(missed)
            if window is not None:
                window.offered += 2
            missed += INTERVAL
        # a late host keeps its 5 s grid: its next round is the first slot not missed
        slot = missed if regular else upcoming
    client.conn.close()


async def lag_probe(run: Run) -> None:
    """How late this generator's own event loop runs (it inflates every latency)."""
    while time.time() < run.end:
        started = time.perf_counter()
        await asyncio.sleep(LAG_PROBE_SECONDS)
        tally = run.window(time.time())
        if tally is not None:
            tally.lags.append((time.perf_counter() - started - LAG_PROBE_SECONDS) * 1000)


async def listen(run: Run) -> None:
    """The driver writes the windows on stdin once the fleet converged; EOF ends the run."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    line = await reader.readline()
    if not line:
        run.end = time.time()
        return
    run.start([Phase(**p) for p in json.loads(line)["phases"]])


async def generate(spec: dict[str, Any]) -> dict[str, Any]:
    run = Run(float(spec["deadline"]))
    listener = asyncio.create_task(listen(run))
    rng = random.Random(spec["seed"])
    clients = [
        HostClient(SimHost(e["host_id"], e["token"], spec["health_url"], e["index"]), spec["url"])
        for e in spec["hosts"]
    ]
    ramp_start = float(spec["ramp_start"])
    tasks = [lag_probe(run)]
    tasks += [host_loop(c, ramp_start + rng.uniform(0, INTERVAL), run) for c in clients]
    await asyncio.gather(*tasks)
    listener.cancel()
    return {
        "tallies": {
            name: {
                "offered": t.offered,
                "served": t.served,
                "latencies": t.latencies,
                "errors": t.errors,
                "resent": t.resent,
                "lags": t.lags,
            }
            for name, t in run.tallies.items()
        },
        "connects": sum(c.conn.connects for c in clients),
        "hosts": len(clients),
    }


def event_loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return asyncio.new_event_loop


def run_generator(spec_path: Path) -> int:
    spec = json.loads(spec_path.read_text())
    with asyncio.Runner(loop_factory=event_loop_factory(spec["loop"])) as runner:
        result = runner.run(generate(spec))
    Path(spec["out"]).write_text(json.dumps(result))
    return 0
