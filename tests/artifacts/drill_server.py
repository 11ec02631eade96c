"""The real artifact server with faults a drill needs, run as its own process.

``python -m tests.artifacts.drill_server ROOT --port N [--drop-at F] [--bytes-per-second B]
[--no-length] [--token-file FILE]`` serves ``build_app(ROOT)`` on loopback. The faults
wrap the real app at the ASGI boundary: ``--drop-at 0.3`` closes the connection
of the first whole-file response after 30% of its body; ``--bytes-per-second``
paces bodies so a transfer is observably in flight; ``--no-length`` drops
``Content-Length`` so the body streams chunked and only the received bytes can
reveal its size. Log lines go to stderr (the tests read them).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

import uvicorn

from gridctl.artifacts.serving import build_app
from gridctl.artifacts.sources import read_token_file

log = logging.getLogger("gridctl.artifacts.serve")


class Drill:
    def __init__(self, app: Any, *, drop_at: float | None, no_length: bool) -> None:
        self.app, self.drop_at, self.no_length = app, drop_at, no_length
        self.dropped = False

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        ranged = any(name == b"range" for name, _ in scope.get("headers", []))
        state: dict[str, int | None] = {"total": None, "sent": 0}

        async def drilled(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                state["status"] = int(message["status"])
                headers = list(message.get("headers", []))
                for name, value in headers:
                    if name.lower() == b"content-length":
                        state["total"] = int(value)
                if self.no_length:
                    headers = [(n, v) for n, v in headers if n.lower() != b"content-length"]
                message = {**message, "headers": headers}
            elif message["type"] == "http.response.body":
                body: bytes = message.get("body", b"")
                sent, total = int(state["sent"] or 0), state["total"]
                whole = state.get("status") == 200 and not ranged
                if self.drop_at is not None and not self.dropped and whole and total:
                    limit = int(total * self.drop_at)
                    if sent + len(body) >= limit:
                        await send({**message, "body": body[: limit - sent], "more_body": True})
                        self.dropped = True
                        log.info("drill: dropped the connection at %d of %d bytes", limit, total)
                        raise ConnectionAbortedError("drill: connection dropped")
                state["sent"] = sent + len(body)
            await send(message)

        await self.app(scope, receive, drilled)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("root", type=Path)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--drop-at", type=float, default=None)
    parser.add_argument("--bytes-per-second", type=int, default=None)
    parser.add_argument("--no-length", action="store_true")
    parser.add_argument("--token-file", type=Path, default=None)
    parser.add_argument("--objects", type=Path, default=None, help="serve /sha256/<digest> too")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
    token = read_token_file(args.token_file) if args.token_file else None
    app = Drill(
        build_app(
            args.root, objects=args.objects, token=token, bytes_per_second=args.bytes_per_second
        ),
        drop_at=args.drop_at,
        no_length=args.no_length,
    )
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
