"""Validators follow no ``$ref`` at run time: each schema is validated with its references
inlined, and that finds exactly the errors the schema as written finds."""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from gridctl.config.schemas import _registry, inlined, load_schema, schema_dir, validator

SHA = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
RESOURCES = {
    "capacity_mb": 4096,
    "reserved_mb": 0,
    "external_mb": 0,
    "runtimes": ["llama.cpp"],
    "backends": ["cpu"],
    "failure_domain": "zone-1",
    "tags": ["bench"],
    "disk_free_mb": 1000,
    "disk_total_mb": 2000,
    "throttle_fraction": 1.0,
    "gpu_count": None,
    "gpu_memory_mb": None,
}
ENVELOPE = {
    "schema_version": 1,
    "state": "accepting",
    "cached_models": [{"model_id": "m", "artifact_sha256": SHA, "cached_age_seconds": 3.0}],
    "residencies": [
        {
            "model_id": "m",
            "memory_mb": 640,
            "state": "ready",
            "artifact_sha256": SHA,
            "runtime": "llama.cpp",
            "loaded_age_seconds": 30.0,
            "managed": True,
            "ownership": "managed",
            "active_requests": 0,
            "endpoint": "http://127.0.0.1:20000",
            "max_concurrency": 2,
        }
    ],
    "actuator_capabilities": ["load", "warm", "drain", "unload", "evict"],
    "engine_api_key": "engine-key",
}
DOCUMENTS = {
    "wire/heartbeat.schema.json": {
        "node_id": "h",
        "load": {"active_tasks": 0, "queue_depth": 0},
        "resources": RESOURCES,
        "allocator": ENVELOPE,
        "request_commands": True,
        "acknowledgements": [
            {"action_id": "a", "status": "succeeded", "message": "ok", "duration_seconds": 0.5}
        ],
    },
    "wire/registration.schema.json": {
        "role": "allocator",
        "host_id": "h",
        "models": ["m"],
        "resources": RESOURCES,
        "allocator": ENVELOPE,
    },
}


def paths(document: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    items = (
        document.items()
        if isinstance(document, dict)
        else enumerate(document)
        if isinstance(document, list)
        else ()
    )
    for key, value in items:
        yield (*prefix, key)
        yield from paths(value, (*prefix, key))


def mutated(document: Any, rng: random.Random) -> Any:
    result = copy.deepcopy(document)
    where = list(paths(result))
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(where)
        parent = result
        try:
            for key in path[:-1]:
                parent = parent[key]
            choice = rng.random()
            if choice < 0.35:
                del parent[path[-1]]
            elif choice < 0.8:
                parent[path[-1]] = rng.choice([None, -1, "x", 1.5, [], {}, True, 10**12])
            elif isinstance(parent, dict):
                parent["unexpected"] = 1
        except (KeyError, IndexError, TypeError):
            continue
    return result


def errors(check: Draft202012Validator, document: Any) -> list[tuple[str, str, str]]:
    return sorted(
        (repr(list(e.absolute_path)), str(e.validator), e.message)
        for e in check.iter_errors(document)
    )


def test_every_schema_but_a_recursive_one_is_inlined() -> None:
    found = {
        str(p.relative_to(schema_dir())): inlined(load_schema(str(p.relative_to(schema_dir()))))
        for p in schema_dir().rglob("*.schema.json")
    }
    assert "$ref" not in repr(found["wire/heartbeat.schema.json"])
    assert found["wire/heartbeat.schema.json"] is not None
    assert found["wire/registration.schema.json"] is not None


@pytest.mark.parametrize("relative", sorted(DOCUMENTS))
def test_inlined_validation_finds_the_same_errors(relative: str) -> None:
    written = Draft202012Validator(load_schema(relative), registry=_registry())
    document = DOCUMENTS[relative]
    assert errors(written, document) == [] == errors(validator(relative), document)
    rng = random.Random(15)
    invalid = 0
    for _ in range(400):
        candidate = mutated(document, rng)
        expected = errors(written, candidate)
        assert errors(validator(relative), candidate) == expected
        invalid += bool(expected)
    assert invalid > 200  # the mutants mostly break the schema, so errors were compared
