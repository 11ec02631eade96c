"""Request bodies from untrusted peers, bounded in size and in nesting.

Every HTTP surface gridctl serves (controller, router, membership) reads its
bodies here. A body is refused on its declared ``Content-Length`` before a byte
is read, and capped while it streams in, so a peer that lies about its length
(or sends it chunked) still cannot make the server buffer more than the limit.
JSON nested deeper than ``MAX_JSON_DEPTH`` is refused as a 400 naming the
limit, never a ``RecursionError``; ``NaN`` and ``Infinity`` are not JSON and are
refused too, so nothing stored can later fail to serialise. So are the numbers
that only look finite: an integer literal longer than ``MAX_INTEGER_DIGITS``
(past any field's documented range, and Python's own int limit raises on 4,300
digits) and a float literal that overflows to infinity (``1e400``); and a string
holding a lone surrogate (``"\\ud800"``), which no UTF-8 answer could repeat.
Each is a 400 naming what was refused. A body that has not all arrived
``BODY_SECONDS`` after its headers is a 408.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from typing import Any

import orjson
from starlette.requests import Request

from gridctl.errors import WireError

MAX_JSON_DEPTH = 64
BODY_SECONDS = 30.0  # from a request's headers to the last byte of its body
MAX_INTEGER_DIGITS = 20  # a signed 64-bit integer has at most 19 digits


class BodyTooLarge(WireError):
    """The body is (or declares itself) larger than the route accepts (HTTP 413)."""

    status = 413

    def __init__(self, limit: int):
        self.limit = limit
        super().__init__(f"body larger than {limit} bytes")


class BodyTooSlow(WireError):
    """The body did not arrive within ``BODY_SECONDS`` (HTTP 408)."""

    status = 408

    def __init__(self, seconds: float):
        super().__init__(f"body not received within {seconds:g} s")


async def read_bounded(request: Request, limit: int, *, seconds: float | None = None) -> bytes:
    """The whole body, or ``BodyTooLarge`` as soon as it exceeds ``limit`` bytes, or
    ``BodyTooSlow`` when it has not all arrived ``seconds`` (``BODY_SECONDS``) after
    the headers: half a body cannot hold a connection and its handler open."""
    deadline = BODY_SECONDS if seconds is None else seconds
    try:
        async with asyncio.timeout(deadline):
            return await _read_bounded(request, limit)
    except TimeoutError:
        raise BodyTooSlow(deadline) from None


async def _read_bounded(request: Request, limit: int) -> bytes:
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


def _bounded_int(literal: str) -> int:
    if len(literal.lstrip("-")) > MAX_INTEGER_DIGITS:
        raise WireError(
            f"integer literal of {len(literal)} characters: numbers have at most "
            f"{MAX_INTEGER_DIGITS} digits"
        )
    return int(literal)


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise WireError(f"number {literal[:40]} is out of range (not a finite double)")
    return value


# One decoder for every body (``json.loads`` with options builds one per call).
_DECODER = json.JSONDecoder(
    parse_constant=_refuse_constant, parse_int=_bounded_int, parse_float=_finite_float
)
# a lone surrogate can only come from a ``\\uD8xx``-``\\uDFxx`` escape (the text itself
# is decoded strictly): bodies without one skip the walk
_SURROGATE_ESCAPE = re.compile(rb"\\[uU][dD][89a-fA-F]")


def lone_surrogate_in(value: Any) -> bool:
    """Whether any string (key or value) in ``value`` holds an unpaired surrogate."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _has_surrogate(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


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


# 19 digits in a row: a number orjson might read otherwise than the standard library (past
# 64 bits it makes an integer a float) or one past MAX_INTEGER_DIGITS; such a body is
# decoded by ``_decode_strictly`` alone
_LONG_DIGITS = re.compile(rb"[0-9]{19}")


def parse_json(body: bytes, *, empty: Any = None, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``body`` decoded as strict JSON (``empty`` when there is none), or ``WireError``.

    orjson decodes it first (a node's heartbeat: about 0.6 us against 7 us). It refuses
    what the standard library's strict decoder here refuses (``NaN``, ``Infinity``, a
    number that overflows a double, a lone surrogate, text that is not UTF-8), and more
    (UTF-16 text, nesting past 1,024); a body it refuses, and one holding a run of 19
    digits, is decoded by ``_decode_strictly``, whose refusal is the answer."""
    if not body:
        return empty
    too_deep = f"body is nested deeper than {max_depth} levels"
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        value = _decode_strictly(body, too_deep)
    else:
        if _LONG_DIGITS.search(body):
            value = _decode_strictly(body, too_deep)
    if _brackets(body) > max_depth and nested_deeper_than(value, max_depth):
        raise WireError(too_deep)
    if _SURROGATE_ESCAPE.search(body) and lone_surrogate_in(value):
        raise WireError("a string holds a lone surrogate (\\ud800-\\udfff unpaired): not text")
    return value


def _decode_strictly(body: bytes, too_deep: str) -> Any:
    """The standard library's decoder with the checks of ``_DECODER`` (any encoding
    ``json`` detects), or the ``WireError`` naming what it refused."""
    try:
        return _DECODER.decode(body.decode(json.detect_encoding(body)))
    except RecursionError:
        raise WireError(too_deep) from None
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as exc:
        raise WireError(f"body is not valid JSON: {str(exc)[:200]}") from None
