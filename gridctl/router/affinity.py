"""X-Grid-Affinity-Key: keep one session's requests on the same near-equivalent engine.

The raw key is validated (printable, at most 256 UTF-8 bytes) and hashed at
once; only the digest travels further and it is never forwarded upstream or
retained. Rendezvous (highest-random-weight) hashing picks among equivalent
routes, so adding or removing one engine remaps only the sessions that engine
gains or loses — no central session map.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

HEADER = "x-grid-affinity-key"
MAX_KEY_BYTES = 256


def hash_key(raw: str | None, max_bytes: int = MAX_KEY_BYTES) -> bytes | None:
    """The digest of a valid key, or None (absent, longer than ``max_bytes`` — the
    policy's ``affinity_key_max_bytes`` — or not printable)."""
    if not raw:
        return None
    encoded = raw.encode("utf-8", errors="strict")
    if len(encoded) > max_bytes or not raw.isprintable():
        return None
    return hashlib.sha256(b"gridctl-affinity\0" + encoded).digest()


def session_token(digest: bytes | None) -> str | None:
    """A second hash for demand telemetry: sequences per session, never the key."""
    if digest is None:
        return None
    return hashlib.sha256(b"gridctl-session\0" + digest).hexdigest()[:32]


def rendezvous_weight(digest: bytes, engine_id: str) -> int:
    mixed = hashlib.blake2b(digest + b"\0" + engine_id.encode(), digest_size=8).digest()
    return int.from_bytes(mixed, "big")


def rendezvous_pick(digest: bytes, engine_ids: Sequence[str]) -> str | None:
    """The engine with the highest weight for this key (ties broken by id)."""
    best: tuple[int, str] | None = None
    for engine in engine_ids:
        key = (rendezvous_weight(digest, engine), engine)
        if best is None or key > best:
            best = key
    return None if best is None else best[1]
