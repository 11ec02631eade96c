"""A Range-capable artifact server: the Hugging Face layout for a directory, and a node's cache.

Why it exists: an air-gapped fleet needs an origin it controls, the tests need a
real one, and a node that holds a verified artifact serves it to its peers so N
hosts cost the origin one download. Two layouts:

* ``/{owner}/{repo}/resolve/{rev}/{path}`` → ``ROOT/owner/repo/path`` (any ``rev``),
  only when its real path (symlinks resolved) stays inside ``ROOT``;
* ``/sha256/{digest}`` → a cache's ``objects/<digest>.gguf`` (a node's peer mirror).

Every response honours one ``Range: bytes=a-b`` (206 with ``Content-Range``; 416
past the end) and ``HEAD``. One log line per finished response names the path,
the range asked for, the status and the bytes actually sent, so an operator (or a
test) can see a resume and count full downloads.
"""

from __future__ import annotations

import hmac
import logging
import re
from pathlib import Path

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

log = logging.getLogger("gridctl.artifacts.serve")
CHUNK_BYTES = 256 * 1024
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)\Z")
_DIGEST = re.compile(r"^[0-9a-f]{64}\Z")


def byte_range(header: str | None, size: int) -> tuple[int, int] | str | None:
    """``(first, last)`` inclusive for one range; None = the whole file; "unsatisfiable"."""
    if not header:
        return None
    match = _RANGE.match(header.strip())
    if match is None or match.group(1) == match.group(2) == "":
        return None  # malformed or multi-range: answer with the whole file (RFC 9110 allows it)
    first_text, last_text = match.groups()
    if first_text == "":
        suffix = int(last_text)
        if suffix == 0:
            return "unsatisfiable"
        return max(0, size - suffix), size - 1
    first = int(first_text)
    last = min(int(last_text), size - 1) if last_text else size - 1
    if first >= size or last < first:
        return "unsatisfiable"
    return first, last


class FileBody(Response):
    """Bytes ``first .. first+length-1`` of a file, stopped as soon as the client leaves.

    ``sent`` in the log counts bytes handed to the server, checked against a
    disconnect listener between chunks, so an abandoned transfer logs ``aborted``.
    ``bytes_per_second`` paces the body (an origin that must not fill its uplink).
    """

    def __init__(
        self,
        path: Path,
        first: int,
        length: int,
        *,
        status_code: int,
        headers: dict[str, str],
        label: str,
        bytes_per_second: int | None = None,
    ) -> None:
        super().__init__(status_code=status_code, headers=headers)
        self.path, self.first, self.length, self.label = path, first, length, label
        self.bytes_per_second = bytes_per_second

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gone = anyio.Event()

        async def listen() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        sent = 0
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(listen)
                await send(
                    {"type": "http.response.start", "status": self.status_code,
                     "headers": self.raw_headers}
                )  # fmt: skip
                with open(self.path, "rb") as handle:
                    handle.seek(self.first)
                    while sent < self.length and not gone.is_set():
                        chunk = handle.read(min(CHUNK_BYTES, self.length - sent))
                        if not chunk:
                            break
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                        sent += len(chunk)
                        pause = len(chunk) / self.bytes_per_second if self.bytes_per_second else 0
                        await anyio.sleep(pause)  # also lets the disconnect listener run
                if not gone.is_set():
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                group.cancel_scope.cancel()
        finally:
            verdict = "complete" if sent == self.length else "aborted"
            log.info("%s sent=%d of=%d %s", self.label, sent, self.length, verdict)


def file_response(
    request: Request, path: Path, display: str, bytes_per_second: int | None = None
) -> Response:
    try:
        if not path.is_file():
            raise FileNotFoundError(path)
        size = path.stat().st_size
    except OSError:
        log.info("%s %s status=404", request.method, display)
        return PlainTextResponse("not found\n", 404)
    asked = request.headers.get("range")
    chosen = byte_range(asked, size)
    headers = {"Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
    if chosen == "unsatisfiable":
        log.info("%s %s range=%s status=416", request.method, display, asked)
        return Response(status_code=416, headers={**headers, "Content-Range": f"bytes */{size}"})
    first, last = chosen if isinstance(chosen, tuple) else (0, size - 1)
    length = last - first + 1
    status = 206 if isinstance(chosen, tuple) else 200
    headers["Content-Length"] = str(length)
    if status == 206:
        headers["Content-Range"] = f"bytes {first}-{last}/{size}"
    label = f"{request.method} {display} range={asked or '-'} status={status}"
    if request.method == "HEAD":
        log.info("%s sent=0 of=0 head", label)
        return Response(status_code=status, headers=headers)
    return FileBody(
        path,
        first,
        length,
        status_code=status,
        headers=headers,
        label=label,
        bytes_per_second=bytes_per_second,
    )


def _inside(root: Path, *parts: str) -> Path | None:
    """``root/parts`` when it stays inside ``root`` (already resolved), else None.

    Lexically no empty, dot or dot-dot segment may climb out; then every symlink on
    the way is resolved and the real path must still lie under ``root``. Links that
    stay inside are followed on purpose (a Hugging Face cache links snapshots to
    ``blobs/``); a link to ``/etc`` or to a sibling directory is not found.
    """
    if any(p in ("", ".", "..") or "\\" in p or "\0" in p for p in parts):
        return None
    target = root.joinpath(*parts)
    try:
        real = target.resolve(strict=False)
    except (OSError, RuntimeError):  # a symlink loop
        return None
    return target if real.is_relative_to(root) else None


def _authorized(request: Request, token: str | None) -> bool:
    if token is None:
        return True
    presented = request.headers.get("authorization", "")
    return hmac.compare_digest(presented.encode(), f"Bearer {token}".encode())


def build_app(
    root: Path | None = None,
    *,
    objects: Path | None = None,
    token: str | None = None,
    bytes_per_second: int | None = None,
) -> Starlette:
    """The server app: ``root`` in the HF layout, ``objects`` by digest (either may be None).

    With ``token``, every request needs ``Authorization: Bearer <token>`` (else 401).
    """
    hub = root.resolve() if root is not None else None
    cache = objects.resolve() if objects is not None else None

    def refused(request: Request) -> Response:
        log.info("%s %s status=401", request.method, request.url.path)
        return PlainTextResponse("unauthorized\n", 401, headers={"WWW-Authenticate": "Bearer"})

    async def resolve(request: Request) -> Response:
        if not _authorized(request, token):
            return refused(request)
        p = request.path_params
        target = None if hub is None else _inside(hub, p["owner"], p["repo"], *p["path"].split("/"))
        if target is None:
            log.info("%s %s status=404", request.method, request.url.path)
            return PlainTextResponse("not found\n", 404)
        return file_response(request, target, request.url.path, bytes_per_second)

    async def by_digest(request: Request) -> Response:
        if not _authorized(request, token):
            return refused(request)
        digest = str(request.path_params["digest"]).lower()
        if cache is None or not _DIGEST.match(digest):
            log.info("%s %s status=404", request.method, request.url.path)
            return PlainTextResponse("not found\n", 404)
        path = cache / f"{digest}.gguf"
        return file_response(request, path, request.url.path, bytes_per_second)

    routes = [
        Route("/{owner}/{repo}/resolve/{rev}/{path:path}", resolve, methods=["GET", "HEAD"]),
        Route("/sha256/{digest}", by_digest, methods=["GET", "HEAD"]),
    ]
    return Starlette(routes=routes)
