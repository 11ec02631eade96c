"""The artifact server's Range handling, on the real Starlette app in-process."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from gridctl.artifacts.serving import build_app, byte_range

DATA = bytes(range(256)) * 40  # 10,240 bytes


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, None),
        ("bytes=0-", (0, 10239)),
        ("bytes=100-199", (100, 199)),
        ("bytes=10000-99999", (10000, 10239)),
        ("bytes=-240", (10000, 10239)),
        ("bytes=10240-", "unsatisfiable"),
        ("bytes=5-4", "unsatisfiable"),
        ("bytes=-0", "unsatisfiable"),
        ("bytes=0-1,5-6", None),  # multi-range: the whole file
        ("items=0-1", None),
    ],
)
def test_byte_range(header: str | None, expected: object) -> None:
    assert byte_range(header, len(DATA)) == expected


def serve(tmp_path: Path, **kwargs: object) -> httpx.AsyncClient:
    target = tmp_path / "hub" / "acme" / "tiny" / "w" / "m.gguf"
    target.parent.mkdir(parents=True)
    target.write_bytes(DATA)
    objects = tmp_path / "objects"
    objects.mkdir()
    (objects / f"{'a' * 64}.gguf").write_bytes(DATA)
    app = build_app(tmp_path / "hub", objects=objects, **kwargs)  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")


def test_hf_layout_any_revision_with_ranges(tmp_path: Path) -> None:
    async def run() -> None:
        async with serve(tmp_path) as client:
            whole = await client.get("/acme/tiny/resolve/main/w/m.gguf")
            assert whole.status_code == 200 and whole.content == DATA
            assert whole.headers["accept-ranges"] == "bytes"
            part = await client.get(
                "/acme/tiny/resolve/deadbeef/w/m.gguf", headers={"Range": "bytes=1000-"}
            )
            assert part.status_code == 206 and part.content == DATA[1000:]
            assert part.headers["content-range"] == f"bytes 1000-{len(DATA) - 1}/{len(DATA)}"
            past = await client.get(
                "/acme/tiny/resolve/main/w/m.gguf", headers={"Range": "bytes=99999-"}
            )
            assert past.status_code == 416 and past.headers["content-range"] == "bytes */10240"
            head = await client.head("/acme/tiny/resolve/main/w/m.gguf")
            assert head.status_code == 200 and head.headers["content-length"] == "10240"
            assert (await client.get("/acme/tiny/resolve/main/w/nope.gguf")).status_code == 404
            escape = await client.get("/acme/tiny/resolve/main/..%2F..%2Fobjects")
            assert escape.status_code == 404
            mirror = await client.get(f"/sha256/{'a' * 64}", headers={"Range": "bytes=-10"})
            assert mirror.status_code == 206 and mirror.content == DATA[-10:]
            assert (await client.get("/sha256/not-a-digest")).status_code == 404

    asyncio.run(run())


def test_a_token_guards_every_route(tmp_path: Path) -> None:
    async def run() -> None:
        async with serve(tmp_path, token="t0k") as client:
            denied = await client.get("/acme/tiny/resolve/main/w/m.gguf")
            assert denied.status_code == 401 and denied.headers["www-authenticate"] == "Bearer"
            assert (await client.get(f"/sha256/{'a' * 64}")).status_code == 401
            ok = await client.get(
                "/acme/tiny/resolve/main/w/m.gguf", headers={"Authorization": "Bearer t0k"}
            )
            assert ok.status_code == 200 and ok.content == DATA

    asyncio.run(run())


def test_symlinks_are_followed_only_while_they_stay_inside_the_root(tmp_path: Path) -> None:
    """A Hugging Face cache links snapshots to ``blobs/`` (inside the root): served. A link
    to a file or directory outside the root (``/etc``, a sibling directory): 404."""
    hub = tmp_path / "hub"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_bytes(b"not for peers")
    repo = hub / "acme" / "cached"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "0123abcd").write_bytes(DATA)
    (repo / "snapshots" / "main").mkdir(parents=True)
    (repo / "snapshots" / "main" / "m.gguf").symlink_to(Path("../../blobs/0123abcd"))
    (repo / "etc").symlink_to(outside)  # a directory link out of the root
    (repo / "secret.txt").symlink_to(outside / "secret.txt")  # a file link out
    (repo / "passwd").symlink_to(Path("/etc/passwd"))
    (repo / "loop").symlink_to(repo / "loop")

    async def run() -> None:
        app = build_app(hub)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://t"
        ) as client:
            linked = await client.get("/acme/cached/resolve/main/snapshots/main/m.gguf")
            assert linked.status_code == 200 and linked.content == DATA
            for path in ("etc/secret.txt", "secret.txt", "passwd", "loop"):
                answer = await client.get(f"/acme/cached/resolve/main/{path}")
                assert answer.status_code == 404, path
                assert b"not for peers" not in answer.content and b"root:" not in answer.content

    asyncio.run(run())
