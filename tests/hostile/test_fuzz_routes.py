"""Every HTTP route of the real controller app under generated hostile requests.

Requests come from ``schemathesis`` over an OpenAPI description built from the
project's own JSON Schemas (``tests/hostile/openapi.py``): schema-valid and
schema-violating bodies, path parameters and credentials, plus raw garbage and
nesting bombs. The app is the real Starlette app of a real ``ControllerService``
(SQLite store, membership, router) reached through ``httpx.ASGITransport``.

Each answer must be 2xx or 4xx (a 503 from the router for a model with no
ready replica is its documented answer); every 4xx carries a JSON error with a
message; and a 4xx leaves every durable table, the registry and the credentials
byte-identical.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.core import NotSet
from starlette.routing import Route

from gridctl.controller.serving import ControllerService, ServiceOptions
from gridctl.credentials import issue_node_credential, load_or_create_signing_key
from tests.controller.simnodes import Clock
from tests.hostile.openapi import HOSTS, NODE, OPERATOR, ROUTES, openapi_document

ROUTER_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
BODY_ROUTES = sorted((m, p) for (m, p), (_c, body) in ROUTES.items() if body is not None)
FUZZ_REQUESTS = int(os.environ.get("GRIDCTL_FUZZ_REQUESTS", "10000"))


@dataclass
class Fuzzed:
    """The controller under test and what the run saw."""

    service: ControllerService
    client: httpx.AsyncClient
    loop: asyncio.AbstractEventLoop
    state_dir: Path
    node_tokens: dict[str, str]
    statuses: dict[int, int] = field(default_factory=dict)
    sent: int = 0
    refusals_checked: int = 0
    refusals_during_a_tick: int = 0  # a background tick ran meanwhile: state not comparable
    ticks_started: int = 0
    ticks_finished: int = 0
    watchers: list[sqlite3.Connection] = field(default_factory=list)

    def watch_databases(self) -> None:
        for name in ("controller.sqlite3", "membership.sqlite3"):
            self.watchers.append(sqlite3.connect(self.state_dir / name, check_same_thread=False))

    def count_ticks(self) -> None:
        """Wrap the controller's tick so the run knows when one overlaps a request."""
        controller = self.service.controller
        tick = controller.tick

        def counted() -> Any:
            self.ticks_started += 1
            try:
                return tick()
            finally:
                self.ticks_finished += 1

        controller.tick = counted  # type: ignore[method-assign]

    def credential(self, name: str, value: str) -> str:
        if value == "OPERATOR":
            return self.service.operator_token
        if value.startswith("NODE:"):
            return self.node_tokens[value.removeprefix("NODE:")]
        return value

    def state(self) -> tuple[Any, ...]:
        """What a request could change: a write to either database (SQLite's
        ``data_version`` moves on every commit by another connection), the registry
        and the operator token. The authority lease is renewed by time, not requests."""
        versions = tuple(db.execute("PRAGMA data_version").fetchone()[0] for db in self.watchers)
        hosts = sorted(repr(r) for r in self.service.registry.hosts())
        return versions, hosts, (self.state_dir / "operator.token").read_bytes()

    def quiesce(self) -> None:
        """Wait until every tick a request asked for has run, so state is at rest."""
        controller = self.service.controller
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            controller.revisions.wait(controller.revisions["dirty"], 30.0)
            with controller.tick_lock:  # no tick in flight, and none asked for
                if not controller.wake.is_set() and self.ticks_started == self.ticks_finished:
                    return
            controller.revisions.wait(controller.revisions["dirty"] + 1, 0.01)

    def send(self, method: str, path: str, headers: dict[str, str], content: bytes | None) -> None:
        self.quiesce()
        ticks = self.ticks_started
        before = self.state() if ticks == self.ticks_finished else None
        response = self.loop.run_until_complete(
            self.client.request(method, path, headers=headers, content=content)
        )
        self.sent += 1
        status = response.status_code
        self.statuses[status] = self.statuses.get(status, 0) + 1
        where = f"{method} {path} -> {status}: {response.text[:300]}"
        router_unavailable = status == 503 and path in ROUTER_PATHS
        assert status < 500 or router_unavailable, where
        if status >= 400:
            error = response.json().get("error")
            assert isinstance(error, dict) and isinstance(error.get("message"), str), where
            if router_unavailable:  # a request for a model with no replica is demand
                pass
            elif before is None or self.ticks_started != ticks:
                self.refusals_during_a_tick += 1
            else:
                assert self.state() == before, f"state changed on a refusal: {where}"
                self.refusals_checked += 1


@pytest.fixture
def fuzzed(tmp_path: Path) -> Iterator[Fuzzed]:
    state_dir = tmp_path / "state"
    clock = Clock(2_000_000.0)
    options = ServiceOptions(state_dir=state_dir, watch_dir=None, clock=clock, tick_interval=3600)
    service = ControllerService(options)
    app = service.build_app()
    key = load_or_create_signing_key(state_dir)
    tokens = {h: issue_node_credential(key, h, now=clock()) for h in HOSTS}
    loop = asyncio.new_event_loop()
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://ctl")
    fuzzed = Fuzzed(service, client, loop, state_dir, tokens)
    fuzzed.count_ticks()
    fuzzed.watch_databases()
    service.start_ticking()
    try:
        yield fuzzed
    finally:
        service.stop_ticking()
        loop.run_until_complete(client.aclose())
        loop.close()
        for db in fuzzed.watchers:
            db.close()


def app_routes(service: ControllerService) -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for route in service.build_app().routes:
        assert isinstance(route, Route)
        found |= {(m, route.path) for m in route.methods or () if m != "HEAD"}
    return found


def test_the_fuzzed_routes_are_exactly_the_apps_routes(tmp_path: Path) -> None:
    service = ControllerService(ServiceOptions(state_dir=tmp_path / "s", watch_dir=None))
    assert app_routes(service) == set(ROUTES)


# fields the routes read, and values no field accepts: literals the JSON reader must
# refuse (an integer past Python's int-string limit, one that overflows a double, a lone
# surrogate) and wrong types
FIELDS = (
    "model", "messages", "max_tokens", "stream", "tools", "name", "mode", "reason", "clear",
    "host_id", "node_id", "bootstrap_secret", "advertise", "csr", "ttl_seconds", "controller",
    "quality", "model_id", "endpoint", "kind", "max_concurrency", "capacity_mb", "resources",
    "allocator", "acknowledgements", "queued_requests", "desired", "actions", "boot_id",
    "sequence", "role",
)  # fmt: skip
POISONS = (
    b"1" + b"0" * 400, b"-" + b"9" * 4301, b"1e400", b"-1e400", b'"\\ud800"', b'"a\\udfff"',
    b'"\\u001b[2J"', b"[]", b"{}", b"true", b"null", b'"x"', b"-1", b"1.5",
    b'"' + b"x" * 5000 + b'"', b"[" + b"1," * 2000 + b"1]",
)  # fmt: skip


def poisoned_body(field: str, poison: bytes, extra: str) -> bytes:
    """A JSON object whose ``field`` holds ``poison`` (and a plausible second field)."""
    return b'{"' + extra.encode() + b'": "x", "' + field.encode() + b'": ' + poison + b"}"


def hostile_bodies() -> st.SearchStrategy[bytes]:
    deep = st.integers(min_value=65, max_value=200_000).map(
        lambda n: b'{"a":' * n + b"1" + b"}" * n
    )
    constants = st.sampled_from([b'{"x": NaN}', b"[Infinity]", b'{"node_id": -Infinity}'])
    poisoned = st.builds(
        poisoned_body, st.sampled_from(FIELDS), st.sampled_from(POISONS), st.sampled_from(FIELDS)
    )
    return st.one_of(st.binary(max_size=256), deep, constants, poisoned)


def test_every_route_refuses_every_poison_without_a_500(fuzzed: Fuzzed) -> None:
    """Each body route, each field it reads, each poison: a 4xx (or the router's 503 for
    a model with no replica), never a 500, and a refusal changes nothing."""
    for method, path in BODY_ROUTES:
        concrete = path.replace("{node_id}", "h1").replace("{model_id:path}", "m")
        concrete = concrete.replace("{name}", "e").replace("{host_id}", "h1")
        headers = {
            OPERATOR: fuzzed.service.operator_token,
            NODE: fuzzed.node_tokens["h1"],
            "Content-Type": "application/json",
        }
        for field_name in FIELDS:
            for poison in POISONS:
                fuzzed.send(method, concrete, headers, poisoned_body(field_name, poison, "model"))
    assert fuzzed.sent == len(BODY_ROUTES) * len(FIELDS) * len(POISONS)
    assert not any(code >= 500 and code != 503 for code in fuzzed.statuses)


def schema_cases() -> st.SearchStrategy[Any]:
    schema = schemathesis.openapi.from_dict(openapi_document())
    return st.one_of(
        schema.as_strategy(schemathesis.GenerationMode.POSITIVE),
        schema.as_strategy(schemathesis.GenerationMode.NEGATIVE),
    )


@pytest.mark.slow
def test_generated_requests_never_500_and_refusals_change_nothing(fuzzed: Fuzzed) -> None:
    raw = st.tuples(st.sampled_from(BODY_ROUTES), hostile_bodies(), st.sampled_from(HOSTS))

    @settings(
        max_examples=FUZZ_REQUESTS,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.one_of(schema_cases(), raw))
    def one_request(drawn: Any) -> None:
        if isinstance(drawn, tuple):
            (method, path), content, host = drawn
            path = path.replace("{node_id}", host).replace("{model_id:path}", "m")
            path = path.replace("{name}", "e").replace("{host_id}", host)
            headers = {OPERATOR: fuzzed.service.operator_token, NODE: fuzzed.node_tokens[host]}
            fuzzed.send(method, path, headers, content)
            return
        headers = {k: fuzzed.credential(k, str(v)) for k, v in (drawn.headers or {}).items()}
        content = None
        if isinstance(drawn.body, bytes):  # negative generation sends non-JSON too
            content = drawn.body
        elif not isinstance(drawn.body, NotSet):
            content = json.dumps(drawn.body).encode()
            headers["Content-Type"] = "application/json"
        fuzzed.send(drawn.method.upper(), drawn.formatted_path, headers, content)

    one_request()
    print(
        f"\nfuzzed {fuzzed.sent} requests: statuses {dict(sorted(fuzzed.statuses.items()))}; "
        f"{fuzzed.refusals_checked} refusals checked for no state change, "
        f"{fuzzed.refusals_during_a_tick} overlapped a background tick"
    )
    assert fuzzed.sent >= FUZZ_REQUESTS
    assert not any(code >= 500 and code != 503 for code in fuzzed.statuses)
    assert fuzzed.refusals_during_a_tick * 20 <= fuzzed.refusals_checked
