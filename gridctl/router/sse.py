"""A bounded, fragmentation-safe Server-Sent Events reader that finds only final usage.

The proxy relays upstream bytes untouched and feeds a copy here. Events may be
split at any byte; lines are reassembled with a hard bound, and an oversized or
malformed event is skipped without error. Only ``usage.completion_tokens`` is
extracted — nothing of the content is kept.
"""

from __future__ import annotations

import json

MAX_EVENT_BYTES = 64 * 1024


class UsageParser:
    """Feed raw stream bytes; ``completion_tokens`` holds the last usage seen (or None)."""

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self.max_event_bytes = max_event_bytes
        self.completion_tokens: int | None = None
        self._line = bytearray()
        self._data: list[bytes] = []
        self._size = 0
        self._skipping = False  # the current event overflowed: ignore it until its end
        self.ignored = 0

    def feed(self, chunk: bytes) -> None:
        start = 0
        while True:
            newline = chunk.find(b"\n", start)
            if newline < 0:
                self._partial(chunk[start:])
                return
            self._partial(chunk[start:newline])
            line = bytes(self._line)
            self._line.clear()
            self._on_line(line[:-1] if line.endswith(b"\r") else line)
            start = newline + 1

    def close(self) -> None:
        """End of stream: a final event without its blank line still counts."""
        if self._line:
            line = bytes(self._line)
            self._line.clear()
            self._on_line(line)
        self._dispatch()

    def _partial(self, piece: bytes) -> None:
        if not piece:
            return
        if self._skipping or len(self._line) + len(piece) + self._size > self.max_event_bytes:
            self._skip()
            return
        self._line.extend(piece)

    def _skip(self) -> None:
        if not self._skipping:
            self.ignored += 1
        self._skipping = True
        self._line.clear()
        self._data.clear()
        self._size = 0

    def _on_line(self, line: bytes) -> None:
        if not line:
            self._dispatch()
            return
        if self._skipping:
            return
        if line.startswith(b"data:"):
            value = line[5:]
            value = value[1:] if value.startswith(b" ") else value
            self._size += len(value) + 1
            if self._size > self.max_event_bytes:
                self._skip()
                return
            self._data.append(value)

    def _dispatch(self) -> None:
        data, skipping = self._data, self._skipping
        self._data, self._size, self._skipping = [], 0, False
        if skipping or not data:
            return
        payload = b"\n".join(data)
        if payload.strip() == b"[DONE]":
            return
        try:
            event = json.loads(payload)
        except (ValueError, UnicodeDecodeError):
            self.ignored += 1
            return
        tokens = completion_tokens(event)
        if tokens is not None:
            self.completion_tokens = tokens


def completion_tokens(payload: object) -> int | None:
    """``usage.completion_tokens`` of an OpenAI response or event, when it is sane."""
    if not isinstance(payload, dict):
        return None
    usage = payload.get("usage")
    if not isinstance(usage, dict):
        return None
    value = usage.get("completion_tokens")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10_000_000:
        return None
    return value
