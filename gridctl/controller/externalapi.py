"""The allocator API's external-engine routes: register (PUT) and retire (DELETE).

``PUT /allocator/external/{name}`` makes routable inventory of an engine gridctl
does not manage (it becomes routable once native readiness passes:
``gridctl.controller.externals``); ``DELETE`` retires it. Bad input is a
``WireError`` naming the field and changes nothing; a refusal is a status and a
message the HTTP layer turns into its error body.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gridctl.controller.control import Controller
from gridctl.controller.externals import DEFAULT_SERVES, SERVES, removal_refusal
from gridctl.errors import WireError
from gridctl.transport import is_plain_off_loopback

EXTERNAL_KINDS = ("llama.cpp", "vllm", "ollama", "openai")
# the wire schema's engine key: printable ASCII, no whitespace, at most 512 characters
API_KEY = re.compile(r"[!-~]{1,512}")


@dataclass(frozen=True)
class Refusal:
    status: int
    message: str


def register_external(
    ctl: Controller,
    name: str,
    body: Any,
    save: Callable[[str, dict[str, Any]], None] | None,
) -> dict[str, Any]:
    """Check a registration, then register, persist and announce it (the answer body)."""
    if not isinstance(body, dict):
        raise WireError("body must be an object")
    endpoint, model, kind = body.get("endpoint"), body.get("model_id"), body.get("kind")
    if not isinstance(endpoint, str) or not endpoint.startswith(("http://", "https://")):
        raise WireError("endpoint must be an http(s) URL", "/endpoint")
    if is_plain_off_loopback(endpoint):
        raise WireError(
            "endpoint must be https:// off loopback: prompts and keys never cross plain HTTP",
            "/endpoint",
        )
    existing = ctl.registry.host(name)
    if existing is not None and existing.role != "external":
        raise WireError(f"{name!r} is a managed host; pick another --name", "/name")
    if not isinstance(model, str) or not model:
        raise WireError("model_id is required", "/model_id")
    if kind not in EXTERNAL_KINDS:
        raise WireError(f"kind must be one of {', '.join(EXTERNAL_KINDS)}", "/kind")
    concurrency = body.get("max_concurrency", 1)
    if not isinstance(concurrency, int) or concurrency < 1:
        raise WireError("max_concurrency must be a positive integer", "/max_concurrency")
    serves = body.get("serves", DEFAULT_SERVES)
    if serves not in SERVES:
        raise WireError(
            f"serves must be one of {', '.join(SERVES)}: the API the readiness probe asks "
            "for one token",
            "/serves",
        )
    api_key = body.get("api_key")
    if api_key is not None and not (
        isinstance(api_key, str) and API_KEY.fullmatch(api_key) is not None
    ):
        raise WireError(
            "api_key must be 1-512 printable ASCII characters without spaces (the engine's "
            "own key, sent as a Bearer token)",
            "/api_key",
        )
    # a re-registration that names no key keeps the one already registered
    kept = (
        None
        if existing is None
        else next((r.api_key for r in existing.routes.values() if r.api_key), None)
    )
    key = api_key if api_key is not None else kept
    ctl.registry.register_external(
        name,
        endpoint.rstrip("/"),
        model,
        kind,
        ctl.clock(),
        max_concurrency=concurrency,
        api_key=key,
    )
    if save is not None:
        record = {
            "endpoint": endpoint.rstrip("/"),
            "model_id": model,
            "kind": kind,
            "max_concurrency": concurrency,
            "serves": serves,
        }
        if key is not None:
            record["api_key"] = key  # the controller's own state; never in status
        save(name, record)
    ctl.event("external_joined", host_id=name, model_id=model, message=kind)
    ctl.mark_dirty(safety=True)
    answer: dict[str, Any] = {"host_id": name, "model_id": model, "kind": kind}
    answer["serves"] = serves
    answer["api_key"] = "set" if api_key is not None else "kept" if key is not None else "none"
    return answer


def retire_external(
    ctl: Controller,
    name: str,
    force: str,
    remove_persisted: Callable[[str], bool] | None,
) -> dict[str, Any] | Refusal:
    """Retire an external engine: its route, its persisted record and its inventory go.
    Requests already sent to it finish; new ones go to the other replicas. Without
    ``force`` ("true") the last routable replica of a model is not removed (migrate
    first: a managed replacement READY, then remove)."""
    if force not in ("true", "false"):
        raise WireError("force must be true or false", "/force")
    record = ctl.registry.host(name)
    if record is not None and record.role != "external":
        return Refusal(
            409,
            f"{name!r} is a managed host, not an external engine; a managed host leaves "
            f"the fleet with `gridctl token revoke {name}`",
        )
    if record is not None and force == "false":
        refusal = removal_refusal(ctl.registry, name, list(record.routes), ctl.clock())
        if refusal is not None:
            return Refusal(409, refusal)
    persisted = remove_persisted(name) if remove_persisted is not None else False
    if record is None and not persisted:
        return Refusal(404, f"no external engine named {name!r} (`gridctl status` lists them)")
    ctl.registry.forget(name)
    models = sorted(record.routes) if record is not None else []
    ctl.event("external_removed", host_id=name, model_id=models[0] if models else None)
    ctl.mark_dirty(safety=True)
    return {"removed": name, "model_ids": models}
