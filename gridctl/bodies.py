"""Request bodies from untrusted peers, bounded in size and in nesting.

Every HTTP surface gridctl serves (controller, router, membership) reads its
bodies here. A body is refused on its declared ``Content-Length`` before a byte
is read, and capped while it streams in, so a peer that lies about its length
(or sends it chunked) still cannot make the server buffer more than the limit.
JSON nested deeper than ``MAX_JSON_DEPTH`` is refused as a 400 naming the
limit, never a ``RecursionError``; ``NaN`` and ``Infinity`` are not JSON and are
refused too, so nothing stored can later fail to serialise.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from gridctl.errors import WireError

MAX_JSON_DEPTH = 64


class BodyTooLarge(WireError):
    """The body is (or declares itself) larger than the route accepts (HTTP 413)."""

    status = 413

    def __init__(self, limit: int):
        self.limit = limit
        super().__init__(f"body larger than {limit} bytes")


async def read_bounded(request: Request, limit: int) -> bytes:
    """The whole body, or ``BodyTooLarge`` as soon as it exceeds ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            length = int(declared)
        except ValueError:
            raise WireError("Content-Length is not an integer") from None
        if length > limit:
            raise BodyTooLarge(limit)
    chunks: list[bytes] = []
    total = 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _refuse_constant(name: str) -> Any:
    raise WireError(f"{name} is not a JSON number")


# One decoder for every body (``json.loads`` with options builds one per call).
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` has containers nested more than ``limit`` levels (no recursion)."""
    level = [value] if isinstance(value, (dict, list)) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        below = []
        for item in level:
            for child in item.values() if isinstance(item, dict) else item:
                if isinstance(child, (dict, list)):
                    below.append(child)
        level = below
    return False


def _brackets(body: bytes) -> int:
    """Opening brackets in the text: a bound on how deep its JSON can nest (a body
    with no more of them than the limit needs no walk after parsing)."""
    return body.count(b"[") + body.count(b"{")


def parse_json(body: bytes, *, empty: Any = None, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``body`` decoded as strict JSON (``empty`` when there is none), or ``WireError``."""
    if not body:
        return empty
    too_deep = f"body is nested deeper than {max_depth} levels"
    try:
        value = _DECODER.decode(body.decode(json.detect_encoding(body), "surrogatepass"))
    except RecursionError:
        raise WireError(too_deep) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise WireError(f"body is not valid JSON: {exc}") from None
    if _brackets(body) > max_depth and nested_deeper_than(value, max_depth):
        raise WireError(too_deep)
    return value
