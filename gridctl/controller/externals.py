"""Native readiness of external engines: the model listed and a one-token answer.

An external OpenAI-compatible engine (``gridctl join``) is not a child a node
vouches for, and a 200 from ``/health`` or ``/v1/models`` only proves that a
web server answers. Such a route becomes routable only when the engine's
``/v1/models`` lists the registered model id and a one-token request for that
model, on the API the registration says it serves (chat or completions),
answers 2xx. Anything else leaves the route unroutable with a reason the status
document shows.

Every probe is bounded by a timeout. The model list is read on every probe
pass (cheap); the one-token request, which costs the engine an inference, is
repeated at most every ``INFERENCE_RECHECK_SECONDS`` while the model stays
listed. A definitive refusal (the model not listed, a non-2xx answer) withdraws
the route at once; an engine that does not answer in time merely stops
renewing it, so one slow probe under load does not cut a working route.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from gridctl.routes import EngineRoute

SERVES = ("chat", "completions")  # the OpenAI APIs an external registration may declare
DEFAULT_SERVES = "chat"
LIST_TIMEOUT_SECONDS = 2.0
INFERENCE_TIMEOUT_SECONDS = 15.0
INFERENCE_RECHECK_SECONDS = 20.0  # well inside the 60 s route lease a success renews
MAX_LIST_BYTES = 1024 * 1024  # a model list larger than this is not read
PROBE_PROMPT = "ping"


@dataclass(frozen=True)
class Readiness:
    """One probe's verdict: ``ready``, or why not and whether that is ``definitive``."""

    ready: bool
    reason: str = ""
    definitive: bool = True  # False: the engine did not answer in time (no renewal only)


class RoutesOf(Protocol):
    """What the removal guard reads of the registry."""

    def routable(self, model_id: str, now: float) -> list[EngineRoute]: ...


def removal_refusal(registry: RoutesOf, name: str, models: list[str], now: float) -> str | None:
    """Why removing the external engine ``name`` (serving ``models``) without force would
    cut a model off: it is that model's only routable replica. None when it may go."""
    for model_id in sorted(models):
        if [r.host_id for r in registry.routable(model_id, now)] == [name]:
            return (
                f"external engine {name!r} is the only routable replica of {model_id!r}: "
                "removing it fails that model's requests; wait until a replacement is READY "
                "and routable (`gridctl status`), or force it"
            )
    return None


_KEY_HINT = "the engine wants an API key (`gridctl join ... --api-key-file FILE`) or refused it"


def listed_ids(document: Any) -> set[str] | None:
    """The model ids of an OpenAI model list (``{"data": [{"id": ...}]}``), None if not one."""
    data = document.get("data") if isinstance(document, dict) else None
    if not isinstance(data, list):
        return None
    return {str(item["id"]) for item in data if isinstance(item, dict) and "id" in item}


def one_token_request(serves: str, model_id: str) -> tuple[str, dict[str, Any]]:
    """The path and body of the smallest request that proves ``model_id`` answers."""
    if serves == "completions":
        return "/v1/completions", {"model": model_id, "prompt": PROBE_PROMPT, "max_tokens": 1}
    return "/v1/chat/completions", {
        "model": model_id,
        "messages": [{"role": "user", "content": PROBE_PROMPT}],
        "max_tokens": 1,
        "stream": False,
    }


def _unreachable(what: str, exc: httpx.HTTPError) -> Readiness:
    kind = "timed out" if isinstance(exc, httpx.TimeoutException) else type(exc).__name__
    return Readiness(False, f"{what}: {kind}", definitive=False)


def bearer(api_key: str | None) -> dict[str, str]:
    """The engine's own key as the OpenAI API expects it; no header without one."""
    return {"authorization": f"Bearer {api_key}"} if api_key else {}


async def check_model_listed(
    client: httpx.AsyncClient, endpoint: str, model_id: str, api_key: str | None = None
) -> Readiness:
    """Whether the engine at ``endpoint`` lists ``model_id`` in ``GET /v1/models``."""
    try:
        response = await client.get(
            endpoint + "/v1/models", timeout=LIST_TIMEOUT_SECONDS, headers=bearer(api_key)
        )
    except httpx.HTTPError as exc:
        return _unreachable("GET /v1/models", exc)
    if response.status_code in (401, 403):
        return Readiness(False, f"GET /v1/models answered {response.status_code}: {_KEY_HINT}")
    if response.status_code != 200:
        return Readiness(False, f"GET /v1/models answered {response.status_code}")
    if len(response.content) > MAX_LIST_BYTES:
        return Readiness(False, f"GET /v1/models answered more than {MAX_LIST_BYTES} bytes")
    try:
        ids = listed_ids(response.json())
    except ValueError:
        ids = None
    if ids is None:
        return Readiness(False, "GET /v1/models did not answer an OpenAI model list")
    if model_id not in ids:
        return Readiness(False, f"model {model_id!r} not listed by the engine")
    return Readiness(True)


async def check_one_token(
    client: httpx.AsyncClient,
    endpoint: str,
    model_id: str,
    serves: str,
    api_key: str | None = None,
) -> Readiness:
    """Whether a one-token request for ``model_id`` answers 2xx."""
    path, body = one_token_request(serves, model_id)
    try:
        response = await client.post(
            endpoint + path, json=body, timeout=INFERENCE_TIMEOUT_SECONDS, headers=bearer(api_key)
        )
    except httpx.HTTPError as exc:
        return _unreachable(f"one-token probe POST {path}", exc)
    if not 200 <= response.status_code < 300:
        return Readiness(False, f"one-token probe POST {path} answered {response.status_code}")
    return Readiness(True)


class ExternalReadiness:
    """What the controller knows of its external engines' readiness between probe passes:
    the API each registration serves and when each route last answered a one-token probe."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._serves: dict[str, str] = {}  # engine name -> "chat" | "completions"
        self._answered: dict[tuple[str, str, str], float] = {}  # (name, model, endpoint) -> at

    def remember(self, name: str, serves: str) -> None:
        """A registration (new, changed or restored): its next probe runs the inference."""
        self._serves[name] = serves if serves in SERVES else DEFAULT_SERVES
        self._drop(name)

    def forget(self, name: str) -> None:
        self._serves.pop(name, None)
        self._drop(name)

    def serves(self, name: str) -> str:
        return self._serves.get(name, DEFAULT_SERVES)

    def _drop(self, name: str) -> None:
        for key in [k for k in self._answered if k[0] == name]:
            del self._answered[key]

    async def check(
        self,
        client: httpx.AsyncClient,
        name: str,
        model_id: str,
        endpoint: str,
        api_key: str | None = None,
    ) -> Readiness:
        """Probe one external route: the model list always, the inference when due."""
        base = endpoint.rstrip("/")
        listed = await check_model_listed(client, base, model_id, api_key)
        key = (name, model_id, endpoint)
        if not listed.ready:
            self._answered.pop(key, None)
            return listed
        last = self._answered.get(key)
        now = self._clock()
        if last is not None and 0 <= now - last < INFERENCE_RECHECK_SECONDS:
            return listed
        answered = await check_one_token(client, base, model_id, self.serves(name), api_key)
        if answered.ready:
            self._answered[key] = now
        else:
            self._answered.pop(key, None)
        return answered

    async def check_all(
        self,
        client: httpx.AsyncClient,
        targets: list[tuple[str, str, str]],
        keys: Callable[[str, str], str | None] | None = None,
    ) -> list[Readiness]:
        """Probe every (name, model, endpoint) at once: a slow engine delays no other.
        ``keys(name, model)`` is the engine's own key, if it has one."""
        return list(
            await asyncio.gather(
                *(self.check(client, *t, (keys or _no_key)(t[0], t[1])) for t in targets)
            )
        )


def _no_key(_name: str, _model: str) -> str | None:
    return None
