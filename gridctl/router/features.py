"""Request features for the demand tracker, read from a request's shape, never its content.

Modality comes from the endpoint and the *types* of content parts; the workload
class from structural markers (tools, response formats, embeddings). Text is
never read, stored or hashed. Walks are bounded so a huge body costs little.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_MESSAGES = 256
MAX_PARTS = 64


@dataclass(frozen=True)
class RequestFeatures:
    modality: str
    workload: str
    input_units: int


def _part_types(payload: dict[str, object]) -> set[str]:
    types: set[str] = set()
    messages = payload.get("messages")
    if not isinstance(messages, list):
        return types
    for message in messages[:MAX_MESSAGES]:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            for part in content[:MAX_PARTS]:
                kind = part.get("type") if isinstance(part, dict) else None
                if isinstance(kind, str):
                    types.add(kind)
    return types


def request_features(endpoint: str, payload: dict[str, object], body_bytes: int) -> RequestFeatures:
    units = body_bytes // 4  # about four bytes per token; approximate by design
    if endpoint == "embeddings":
        return RequestFeatures("embedding", "embedding", units)
    parts = _part_types(payload)
    if parts & {"image_url", "input_image", "image"}:
        modality = "image"
    elif parts & {"input_audio", "audio"}:
        modality = "audio"
    else:
        modality = "text"
    if payload.get("tools") or payload.get("functions"):
        workload = "agentic"
    elif isinstance(payload.get("response_format"), dict):
        workload = "structured"
    elif modality != "text":
        workload = modality
    else:
        workload = "general"
    return RequestFeatures(modality, workload, units)
