"""The controller's tables in PostgreSQL, as versioned migrations applied at start.

Version 1 is the SQLite schema (``store_schema.DDL``) with PostgreSQL's types
(``DOUBLE PRECISION`` for times, ``BIGINT`` for counters, ``BIGSERIAL`` for
receipt order) plus the authority lease: one row, its expiry kept in the
database server's clock. Version 2 adds the demand learners' rows
(``store_schema.DEMAND_DDL``). Each migration runs once, in a transaction holding the
schema lock, and records its number in ``meta.schema_version``; a database
newer than this gridctl is refused rather than written.
"""

from __future__ import annotations

import re

from gridctl.controller.store_schema import DDL, DEMAND_DDL

LEASE_DDL = """
CREATE TABLE IF NOT EXISTS authority_lease (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    controller_id TEXT NOT NULL, term BIGINT NOT NULL, address TEXT,
    expires_at TIMESTAMPTZ NOT NULL, acquired_at TIMESTAMPTZ NOT NULL,
    renewed_at TIMESTAMPTZ NOT NULL);
INSERT INTO authority_lease (id, controller_id, term, expires_at, acquired_at, renewed_at)
    VALUES (1, '', 0, now(), now(), now()) ON CONFLICT DO NOTHING;
"""


def postgres_ddl(sqlite_ddl: str) -> str:
    """The SQLite DDL in PostgreSQL's types (column names and keys unchanged)."""
    text = sqlite_ddl.replace("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY")
    text = re.sub(r"\bREAL\b", "DOUBLE PRECISION", text)
    text = re.sub(r"\bINTEGER NOT NULL\b", "BIGINT NOT NULL", text)
    return re.sub(r"\b(queued|attempt) INTEGER\b", r"\1 BIGINT", text)


# (version, what it does, statements); append only, never edit a released one
MIGRATIONS: tuple[tuple[int, str, str], ...] = (
    (1, "controller tables and the authority lease", postgres_ddl(DDL) + LEASE_DDL),
    (2, "demand buckets and affinity sequences", postgres_ddl(DEMAND_DDL)),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]
