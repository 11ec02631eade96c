"""Reading a GGUF file's header: the few metadata keys an operator needs to see.

Why it exists: the node serves files it never looked inside. After the digest is
proven, the header says what the weights are (architecture, block count, context
and embedding length) and whether they carry a chat template; without one,
llama-server falls back to ChatML and a model trained on another format answers
with template tokens, so status warns unless the profile names a built-in
template. Only the key/value section is read; tensor data is never touched.

The reader follows the GGUF v2/v3 layout (little-endian): magic ``GGUF``,
``uint32`` version, ``uint64`` tensor count, ``uint64`` key/value count, then
each key as a length-prefixed string, a ``uint32`` type and the value. Every
length is bounded, so a hostile header cannot make the reader allocate or seek
without limit; a file that breaks a bound is reported unreadable, not trusted.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

MAGIC = b"GGUF"
MAX_KEYS = 65_536
MAX_STRING_BYTES = 1 << 24  # a chat template is kilobytes; 16 MiB is generous
MAX_ARRAY_ITEMS = 1 << 24
_FIXED = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q"}
_FIXED.update({11: "<q", 12: "<d"})
_STRING, _ARRAY = 8, 9


class GgufError(ValueError):
    """The file is not a readable GGUF header."""


@dataclass(frozen=True)
class GgufInfo:
    architecture: str | None
    block_count: int | None
    context_length: int | None
    embedding_length: int | None
    has_chat_template: bool
    name: str | None = None
    version: int = 3

    def as_json(self) -> dict[str, object]:
        return {
            "architecture": self.architecture,
            "block_count": self.block_count,
            "context_length": self.context_length,
            "embedding_length": self.embedding_length,
            "chat_template": self.has_chat_template,
            "name": self.name,
        }


def _read(handle: BinaryIO, size: int) -> bytes:
    data = handle.read(size)
    if len(data) != size:
        raise GgufError("truncated header")
    return data


def _unpack(handle: BinaryIO, fmt: str) -> int | float | bool:
    value: int | float | bool = struct.unpack(fmt, _read(handle, struct.calcsize(fmt)))[0]
    return value


def _string(handle: BinaryIO) -> str:
    length = int(_unpack(handle, "<Q"))
    if length > MAX_STRING_BYTES:
        raise GgufError(f"string of {length} bytes")
    return _read(handle, length).decode("utf-8", errors="replace")


def _skip_string(handle: BinaryIO) -> None:
    length = int(_unpack(handle, "<Q"))
    if length > MAX_STRING_BYTES:
        raise GgufError(f"string of {length} bytes")
    handle.seek(length, 1)


def _value(handle: BinaryIO, kind: int, *, keep: bool) -> object:
    if kind in _FIXED:
        return _unpack(handle, _FIXED[kind])
    if kind == _STRING:
        if keep:
            return _string(handle)
        _skip_string(handle)
        return None
    if kind == _ARRAY:
        item_kind, count = int(_unpack(handle, "<I")), int(_unpack(handle, "<Q"))
        if count > MAX_ARRAY_ITEMS:
            raise GgufError(f"array of {count} items")
        if item_kind in _FIXED:
            handle.seek(count * struct.calcsize(_FIXED[item_kind]), 1)
        elif item_kind == _STRING:
            for _ in range(count):
                _skip_string(handle)
        else:
            raise GgufError(f"array of type {item_kind}")
        return None  # arrays (the vocabulary) are skipped, never kept
    raise GgufError(f"unknown value type {kind}")


def read_metadata(handle: BinaryIO) -> dict[str, object]:
    """Every scalar key/value of the header (arrays are skipped)."""
    if _read(handle, 4) != MAGIC:
        raise GgufError("not a GGUF file (bad magic)")
    version = int(_unpack(handle, "<I"))
    if version not in (2, 3):
        raise GgufError(f"GGUF version {version} is not supported")
    _tensors, count = int(_unpack(handle, "<Q")), int(_unpack(handle, "<Q"))
    if count > MAX_KEYS:
        raise GgufError(f"{count} metadata keys")
    found: dict[str, object] = {"__version__": version}
    for _ in range(count):
        key = _string(handle)
        kind = int(_unpack(handle, "<I"))
        # Keep short strings and every number; the chat template is kept only as presence.
        value = _value(handle, kind, keep=kind == _STRING and key != "tokenizer.chat_template")
        found[key] = True if key == "tokenizer.chat_template" else value
    return found


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def read_gguf(path: Path) -> GgufInfo:
    """The header summary of the GGUF at ``path`` (raises :class:`GgufError`)."""
    try:
        with open(path, "rb", buffering=1 << 20) as handle:
            meta = read_metadata(handle)
    except OSError as exc:
        raise GgufError(f"{path}: {exc.strerror}") from exc
    arch = meta.get("general.architecture")
    arch = arch if isinstance(arch, str) else None
    name = meta.get("general.name")

    def per_arch(suffix: str) -> int | None:
        return _int(meta.get(f"{arch}.{suffix}")) if arch else None

    return GgufInfo(
        architecture=arch,
        block_count=per_arch("block_count"),
        context_length=per_arch("context_length"),
        embedding_length=per_arch("embedding_length"),
        has_chat_template="tokenizer.chat_template" in meta,
        name=name if isinstance(name, str) else None,
        version=int(meta["__version__"]),  # type: ignore[call-overload]
    )
