"""``gridctl state migrate``: move a controller's SQLite state into shared PostgreSQL."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    state = sub.add_parser("state", help="the controller's durable state")
    state_sub = state.add_subparsers(dest="state_command", metavar="SUBCOMMAND")
    migrate = state_sub.add_parser(
        "migrate",
        help="copy a controller's SQLite state into a PostgreSQL database",
        description=(
            "Copy every pending, delivered and finished action, receipt, learned timing, "
            "watermark, outcome evidence key, withdrawn batch, tombstone, the mode override, "
            "the plan-generation epoch and sequence and the authority term from a controller's "
            "SQLite state into an empty PostgreSQL database, in one transaction. Stop the "
            "controller first; then start controllers with --store URL."
        ),
    )
    migrate.add_argument(
        "--from",
        dest="source",
        type=Path,
        required=True,
        metavar="SQLITE_PATH",
        help="controller.sqlite3, a controller --state dir, or a `gridctl up` state dir",
    )
    migrate.add_argument(
        "--to", required=True, metavar="URL", help="postgresql://USER@HOST:PORT/DB (no password)"
    )
    migrate.add_argument(
        "--to-password-file",
        type=Path,
        default=None,
        metavar="FILE",
        help="file holding the PostgreSQL password (or use PGPASSFILE / PGPASSWORD)",
    )
    migrate.add_argument("--json", action="store_true", help="print the result as JSON")
    migrate.set_defaults(func=run_migrate)

    def state_help(_args: argparse.Namespace) -> int:
        state.print_help()
        return 1

    state.set_defaults(func=state_help)


def run_migrate(args: argparse.Namespace) -> int:
    try:
        from gridctl.controller.stores.migrating import migrate_sqlite_to_postgres
        from gridctl.controller.stores.postgres import PostgresLocation
    except ImportError as exc:
        print(
            f"error: needs the PostgreSQL driver: pip install 'gridctl[ha]' ({exc})",
            file=sys.stderr,
        )
        return 1
    from gridctl.errors import PermanentError, TransientError

    try:
        location = PostgresLocation(args.to, args.to_password_file)
        copied = migrate_sqlite_to_postgres(args.source, location)
    except (PermanentError, TransientError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(copied.to_json(), indent=2, sort_keys=True))
        return 0
    print(f"copied {copied.source} -> {copied.target} (authority term {copied.term})")
    for table, count in copied.rows.items():
        print(f"  {table:<11} {count:>7}")
    return 0
