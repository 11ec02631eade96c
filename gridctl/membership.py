"""Fleet membership: bootstrap secrets, issued node credentials, router keys, external engines.

A small SQLite database (``<state>/membership.sqlite3``, WAL) beside the
controller's store, shared by the running controller and the offline CLI
(``gridctl join-token create``, ``gridctl token revoke``), so both see each
other's writes at once. Only digests of secrets are kept: a bootstrap secret or
router key is shown once, when it is made.

A bootstrap secret is ``<id>.<secret>``; it is used at most once, before its
expiry, and optionally only by the host id it was made for. Every node
credential the controller signs is recorded by its ``jti`` so that
``gridctl token revoke HOST`` refuses the host's credentials from the next
request on.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gridctl.errors import PermanentError

DATABASE = "membership.sqlite3"
ROUTER_KEY_PREFIX = "gridctl-rk"
# names are printed in operators' terminals and logs: no spaces or control characters
ROUTER_KEY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS bootstrap_secrets (
    id TEXT PRIMARY KEY, digest TEXT NOT NULL, host_id TEXT, created_at REAL NOT NULL,
    expires_at REAL NOT NULL, used_at REAL, used_by TEXT);
CREATE TABLE IF NOT EXISTS credentials (
    jti TEXT PRIMARY KEY, host_id TEXT NOT NULL, issued_at REAL NOT NULL,
    expires_at REAL NOT NULL, revoked_at REAL);
CREATE INDEX IF NOT EXISTS credentials_host ON credentials(host_id);
CREATE TABLE IF NOT EXISTS revoked_hosts (host_id TEXT PRIMARY KEY, not_before REAL NOT NULL);
CREATE TABLE IF NOT EXISTS router_keys (
    id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, digest TEXT NOT NULL,
    created_at REAL NOT NULL, revoked_at REAL);
CREATE TABLE IF NOT EXISTS external_engines (
    name TEXT PRIMARY KEY, body TEXT NOT NULL, updated_at REAL NOT NULL);
"""


class BootstrapRefused(PermanentError):
    """A bootstrap secret that is unknown, used, expired or for another host (HTTP 401/403)."""

    def __init__(self, message: str, status: int = 401) -> None:
        self.http_status = status
        super().__init__(message)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class RouterKeyCheck:
    key_id: str | None
    reason: str = ""


class Membership:
    """The membership database of one controller state directory."""

    def __init__(self, state_dir: Path) -> None:
        state_dir = Path(state_dir)
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / DATABASE
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self.path.chmod(0o600)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.executescript(_SCHEMA)
        self._version = -1
        self._revoked: set[str] = set()
        self._not_before: dict[str, float] = {}
        self._router_keys: dict[str, str] = {}  # digest -> key id
        self._recorded: dict[str, str] = {}

    def close(self) -> None:
        self._db.close()

    def _write(self, sql: str, args: tuple[Any, ...]) -> sqlite3.Cursor:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                cursor = self._db.execute(sql, args)
                self._db.execute("COMMIT")
                self._version = -1  # data_version does not move for our own writes
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            return cursor

    # --- bootstrap secrets ------------------------------------------------------------

    def create_bootstrap(self, *, now: float, ttl_seconds: float, host_id: str | None) -> str:
        """A new one-time secret; only its digest is stored."""
        if ttl_seconds <= 0:
            raise PermanentError("the join token's lifetime must be positive")
        token_id = secrets.token_hex(4)
        secret = secrets.token_urlsafe(24)
        self._write(
            "INSERT INTO bootstrap_secrets(id, digest, host_id, created_at, expires_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (token_id, _digest(secret), host_id, now, now + ttl_seconds),
        )
        return f"{token_id}.{secret}"

    def consume_bootstrap(
        self, presented: str, *, host_id: str, now: float, taken: bool = False
    ) -> None:
        """Mark the secret used by ``host_id`` or raise :class:`BootstrapRefused`.

        A secret made for a host (``--host-id``) joins exactly that host, existing or
        not: that is how an operator re-issues a host's identity. An unbound secret
        only creates a new host: a ``host_id`` that has ever held a credential or
        joined before, or that the caller says is ``taken`` (the controller knows it
        from its registry), is refused with 409 and the secret stays unused.
        """
        token_id, _, secret = presented.partition(".")
        if not token_id or not secret or len(presented) > 256:
            raise BootstrapRefused("malformed bootstrap secret")
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                row = self._db.execute(
                    "SELECT digest, host_id, expires_at, used_at FROM bootstrap_secrets "
                    "WHERE id = ?",
                    (token_id,),
                ).fetchone()
                if row is None or not hmac.compare_digest(row[0], _digest(secret)):
                    raise BootstrapRefused("unknown bootstrap secret")
                if row[3] is not None:
                    raise BootstrapRefused(
                        "bootstrap secret already used; create a new one with "
                        "`gridctl join-token create`"
                    )
                if now >= row[2]:
                    raise BootstrapRefused(
                        "bootstrap secret expired; create a new one with "
                        "`gridctl join-token create`"
                    )
                if row[1] is not None and row[1] != host_id:
                    raise BootstrapRefused(
                        f"bootstrap secret was made for host {row[1]}, not {host_id}", 403
                    )
                if row[1] is None and (taken or self._host_known(host_id)):
                    raise BootstrapRefused(
                        f"host {host_id} is already in the fleet; an unbound join bundle only "
                        f"creates a new host (ask for one made with --host-id {host_id})",
                        409,
                    )
                self._db.execute(
                    "UPDATE bootstrap_secrets SET used_at = ?, used_by = ? WHERE id = ?",
                    (now, host_id, token_id),
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def _host_known(self, host_id: str) -> bool:
        """Whether ``host_id`` ever held a credential or joined (inside the transaction)."""
        issued = self._db.execute(
            "SELECT 1 FROM credentials WHERE host_id = ? LIMIT 1", (host_id,)
        ).fetchone()
        joined = self._db.execute(
            "SELECT 1 FROM bootstrap_secrets WHERE used_by = ? LIMIT 1", (host_id,)
        ).fetchone()
        return issued is not None or joined is not None

    def bootstrap_rows(self) -> list[dict[str, Any]]:
        rows = self._db.execute(
            "SELECT id, host_id, created_at, expires_at, used_at, used_by FROM bootstrap_secrets "
            "ORDER BY created_at"
        ).fetchall()
        keys = ("id", "host_id", "created_at", "expires_at", "used_at", "used_by")
        return [dict(zip(keys, row, strict=True)) for row in rows]

    # --- node credentials ---------------------------------------------------------------

    def record_credential(self, claims: dict[str, object]) -> None:
        self._write(
            "INSERT OR REPLACE INTO credentials(jti, host_id, issued_at, expires_at) "
            "VALUES (?, ?, ?, ?)",
            (str(claims["jti"]), str(claims["host_id"]), claims["iat"], claims["exp"]),
        )

    def revoke_host(self, host_id: str, *, now: float) -> int:
        """Revoke every credential of ``host_id``; returns how many recorded ones it hit."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                cursor = self._db.execute(
                    "UPDATE credentials SET revoked_at = ? "
                    "WHERE host_id = ? AND revoked_at IS NULL",
                    (now, host_id),
                )
                # credentials nobody recorded (older `token write`) issued up to now go too
                self._db.execute(
                    "INSERT OR REPLACE INTO revoked_hosts(host_id, not_before) VALUES (?, ?)",
                    (host_id, now),
                )
                self._db.execute("COMMIT")
                self._version = -1
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return cursor.rowcount

    def _refresh(self) -> None:
        """Reload the revocation and key caches when another connection wrote."""
        version = self._db.execute("PRAGMA data_version").fetchone()[0]
        if version == self._version and self._version >= 0:
            return
        with self._lock:
            revoked = {
                r[0]
                for r in self._db.execute(
                    "SELECT jti FROM credentials WHERE revoked_at IS NOT NULL"
                )
            }
            recorded_ok = {
                r[0]: r[1]
                for r in self._db.execute(
                    "SELECT jti, host_id FROM credentials WHERE revoked_at IS NULL"
                )
            }
            not_before = dict(self._db.execute("SELECT host_id, not_before FROM revoked_hosts"))
            keys = {
                r[1]: r[0]
                for r in self._db.execute(
                    "SELECT id, digest FROM router_keys WHERE revoked_at IS NULL"
                )
            }
        self._revoked, self._recorded, self._not_before = revoked, recorded_ok, not_before
        self._router_keys = keys
        self._version = version

    def credential_revoked(self, claims: dict[str, object]) -> bool:
        """Whether verified ``claims`` belong to a revoked credential."""
        self._refresh()
        jti = str(claims.get("jti", ""))
        if jti in self._revoked:
            return True
        if jti in self._recorded:
            return False
        cutoff = self._not_before.get(str(claims.get("host_id", "")))
        iat = claims.get("iat")
        return cutoff is not None and isinstance(iat, int | float) and iat <= cutoff

    # --- router keys ------------------------------------------------------------------

    def create_router_key(self, name: str, *, now: float) -> tuple[str, str]:
        """A new router API key named ``name``: (key id, the key shown once)."""
        if not ROUTER_KEY_NAME.fullmatch(name):
            raise PermanentError(
                "a router key name must be 1-64 letters, digits or . _ : @ - "
                "(starting with a letter or digit)"
            )
        key_id = "rk-" + secrets.token_hex(4)
        key = f"{ROUTER_KEY_PREFIX}.{key_id}.{secrets.token_urlsafe(24)}"
        try:
            self._write(
                "INSERT INTO router_keys(id, name, digest, created_at) VALUES (?, ?, ?, ?)",
                (key_id, name, _digest(key), now),
            )
        except sqlite3.IntegrityError:
            raise PermanentError(f"a router key named {name!r} exists already") from None
        return key_id, key

    def revoke_router_key(self, name: str, *, now: float) -> bool:
        cursor = self._write(
            "UPDATE router_keys SET revoked_at = ? WHERE name = ? AND revoked_at IS NULL",
            (now, name),
        )
        return cursor.rowcount > 0

    def router_key_rows(self) -> list[dict[str, Any]]:
        rows = self._db.execute(
            "SELECT id, name, created_at, revoked_at FROM router_keys ORDER BY created_at"
        ).fetchall()
        return [dict(zip(("id", "name", "created_at", "revoked_at"), r, strict=True)) for r in rows]

    def has_router_keys(self) -> bool:
        self._refresh()
        return bool(self._router_keys)

    def check_router_key(self, presented: str | None) -> RouterKeyCheck:
        """The key id a presented router key belongs to, or why it is refused."""
        if not presented:
            return RouterKeyCheck(None, "router API key required (Authorization: Bearer KEY)")
        self._refresh()
        key_id = self._router_keys.get(_digest(presented.strip()))
        if key_id is None:
            return RouterKeyCheck(None, "router API key rejected")
        return RouterKeyCheck(key_id)

    # --- external engines -------------------------------------------------------------

    def save_external(self, name: str, body: dict[str, Any], *, now: float) -> None:
        self._write(
            "INSERT OR REPLACE INTO external_engines(name, body, updated_at) VALUES (?, ?, ?)",
            (name, json.dumps(body, sort_keys=True), now),
        )

    def remove_external(self, name: str) -> bool:
        """Delete an external engine's record (a restart no longer restores it); returns
        whether one existed."""
        cursor = self._write("DELETE FROM external_engines WHERE name = ?", (name,))
        return cursor.rowcount > 0

    def externals(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for name, body in self._db.execute("SELECT name, body FROM external_engines"):
            try:
                value = json.loads(body)
            except ValueError:
                continue
            if isinstance(value, dict):
                out[str(name)] = value
        return out
