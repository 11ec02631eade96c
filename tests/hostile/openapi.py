"""An OpenAPI description of the controller's HTTP routes, built from ``schemas/``.

Request bodies with a wire schema (registration, heartbeat, model profile) use
that schema, with every ``$ref`` inlined through the same registry the
controller validates with; the others accept any JSON, so generation probes
them with arbitrary values. Credentials are placeholders (``OPERATOR``,
``NODE:h1``) that the caller swaps for real ones at send time, so a rotation
or revocation made by one generated request is seen by the next.
"""

from __future__ import annotations

from typing import Any

from gridctl.config.schemas import _registry, load_schema

OPERATOR = "X-Grid-Allocator-Token"
NODE = "X-Grid-Allocator-Node-Token"
HOSTS = ("h1", "h2")

# (method, path as the app spells it): (credential header, body schema file or None)
ROUTES: dict[tuple[str, str], tuple[str | None, str | None]] = {
    ("GET", "/healthz"): (None, None),
    ("PUT", "/nodes/{node_id}"): (NODE, "wire/registration.schema.json"),
    ("POST", "/nodes/{node_id}/heartbeat"): (NODE, "wire/heartbeat.schema.json"),
    ("GET", "/allocator/status"): (None, None),
    ("GET", "/allocator/snapshot"): (OPERATOR, None),
    ("PUT", "/allocator/mode"): (OPERATOR, ""),
    ("POST", "/allocator/tick"): (OPERATOR, None),
    ("POST", "/allocator/apply"): (OPERATOR, ""),
    ("POST", "/allocator/dry-run"): (OPERATOR, ""),
    ("POST", "/allocator/evaluations"): (OPERATOR, ""),
    ("GET", "/metrics"): (None, None),
    ("PUT", "/allocator/external/{name}"): (OPERATOR, ""),
    ("DELETE", "/allocator/external/{name}"): (OPERATOR, None),
    ("PUT", "/allocator/models/{model_id:path}"): (OPERATOR, "model-profile.schema.json"),
    ("DELETE", "/allocator/models/{model_id:path}"): (OPERATOR, None),
    ("GET", "/pki/ca"): (None, None),
    ("POST", "/join"): (None, ""),
    ("POST", "/nodes/{node_id}/renew"): (NODE, ""),
    ("POST", "/allocator/join-tokens"): (OPERATOR, ""),
    ("POST", "/allocator/credentials/{host_id}/revoke"): (OPERATOR, ""),
    ("POST", "/allocator/router-keys"): (OPERATOR, ""),
    ("POST", "/allocator/operator-token/rotate"): (OPERATOR, ""),
    ("GET", "/v1/models"): (None, None),
    ("POST", "/v1/chat/completions"): ("Authorization", ""),
    ("POST", "/v1/completions"): ("Authorization", ""),
    ("POST", "/v1/embeddings"): ("Authorization", ""),
}

_ID = {"anyOf": [{"enum": list(HOSTS)}, {"type": "string", "pattern": "^[a-z0-9._-]{1,40}$"}]}
_CREDENTIALS = {
    OPERATOR: ["OPERATOR", "not-the-token"],
    NODE: [*(f"NODE:{h}" for h in HOSTS), "not-a-credential"],
    "Authorization": ["Bearer not-a-router-key"],
}


def inline(schema: Any, base_uri: str, depth: int = 0) -> Any:
    """``schema`` with every ``$ref`` replaced by what it names (the schemas are not recursive)."""
    if depth > 32:
        raise ValueError(f"$ref chain too deep under {base_uri}")
    if isinstance(schema, list):
        return [inline(item, base_uri, depth) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {
        key: inline(value, base_uri, depth)
        for key, value in schema.items()
        if key not in ("$ref", "$id", "$schema", "$defs")
    }
    if "$ref" in schema:
        resolved = _registry().resolver(base_uri=base_uri).lookup(schema["$ref"])
        target = inline(resolved.contents, resolved.resolver._base_uri, depth + 1)
        return {"allOf": [target, out]} if out else target
    return out


def body_schema(relative: str) -> dict[str, Any]:
    if not relative:
        return {}
    schema = load_schema(relative)
    inlined: dict[str, Any] = inline(schema, schema["$id"])
    return inlined


def openapi_document() -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for (method, path), (credential, body) in sorted(ROUTES.items()):
        spelled = path.replace(":path}", "}")
        parameters: list[dict[str, Any]] = [
            {"name": name[1:-1].split(":")[0], "in": "path", "required": True, "schema": _ID}
            for name in spelled.split("/")
            if name.startswith("{")
        ]
        if credential is not None:
            parameters.append(
                {
                    "name": credential,
                    "in": "header",
                    "required": True,  # negative generation still drops or garbles it
                    "schema": {"enum": _CREDENTIALS[credential]},
                }
            )
        operation: dict[str, Any] = {
            "operationId": f"{method} {path}",
            "parameters": parameters,
            "responses": {"default": {"description": "any"}},
        }
        if body is not None:
            operation["requestBody"] = {
                "required": False,
                "content": {"application/json": {"schema": body_schema(body)}},
            }
        paths.setdefault(spelled, {})[method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": "gridctl controller", "version": "1"},
        "paths": paths,
    }
