"""The answers the router writes itself: OpenAI-shaped errors and an engine's whole answer.

Kept apart from the proxy's admission and forwarding (the bound and the unbound
paths answer through them) so ``proxy.py`` stays about choosing and sending.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.responses import JSONResponse, Response


def openai_error(status: int, message: str, kind: str, code: str | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return JSONResponse(body, status_code=status)


class WholeAnswer(Response):
    """An engine's whole answer, relayed as is; ``after`` (what the router learns from
    it, and its observation) runs on the loop once the body is handed to the server. A
    ``Response`` with a ``BackgroundTask`` did the same with more work per request (its
    headers built from a mapping, the task's callable inspected)."""

    def __init__(
        self, content: bytes, status: int, media_type: str, after: Callable[[], None]
    ) -> None:
        if media_type.startswith("text/") and "charset=" not in media_type.lower():
            media_type += "; charset=utf-8"
        self.body = content
        self.status_code = status
        self.media_type = media_type
        self.background = None
        self.raw_headers = [(b"content-type", media_type.encode("latin-1"))]
        if status >= 200 and status not in (204, 304):
            self.raw_headers.append((b"content-length", str(len(content)).encode("latin-1")))
        self._after = after

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": self.status_code,
                    "headers": self.raw_headers,
                }
            )
            await send({"type": "http.response.body", "body": self.body})
        finally:
            self._after()  # learnt and observed even when the caller left
