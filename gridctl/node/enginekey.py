"""The per-host engine API key that fences llama.cpp children from direct clients.

Every managed child requires this key, so nobody on the LAN can start inference
on a child port and race the final idle check of a drain. The key is generated
once, kept in the node's owner-only state database, and written beside it as
llama.cpp's one-key-per-line ``--api-key-file`` (mode 0600). It never appears in
argv, a child's environment, logs or status; it leaves the node only inside the
authenticated allocator envelope so the controller's router can forward.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from gridctl.credentials import write_secret_file
from gridctl.node.statestore import NodeStateStore

KEY_META = "engine_api_key"
KEY_FILE = Path("engine") / "api-keys"


def ensure_engine_key(store: NodeStateStore, state_dir: Path) -> tuple[str, Path]:
    """The durable engine key and the 0600 key file llama-server reads it from."""
    key = store.get_meta(KEY_META)
    if key is None:
        key = secrets.token_urlsafe(32)
        store.set_meta(KEY_META, key)
    path = Path(state_dir) / KEY_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    current = path.read_text(encoding="utf-8").strip() if path.exists() else None
    if current != key or (path.stat().st_mode & 0o077):
        write_secret_file(path, key + "\n")
    return key, path
