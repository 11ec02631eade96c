"""The ``gridctl`` command: argument parsing and dispatch to one module per command."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from gridctl.errors import GridctlError

# Each module exposes ``register(subparsers)``; the parser it adds sets ``func``.
COMMAND_MODULES = (
    "gridctl.cli.validate_cmd",
    "gridctl.cli.controller_cmd",
    "gridctl.cli.status_cmd",
    "gridctl.cli.up_cmd",
    "gridctl.cli.chat_cmd",
    "gridctl.cli.join_cmd",
    "gridctl.cli.plan_cmd",
    "gridctl.cli.forecast_cmd",
    "gridctl.cli.apply_cmd",
    "gridctl.cli.diff_cmd",
    "gridctl.cli.split_cmd",
    "gridctl.cli.node_cmd",
    "gridctl.cli.token_cmd",
    "gridctl.cli.ca_cmd",
    "gridctl.cli.dash_cmd",
    "gridctl.cli.artifacts_cmd",
    "gridctl.cli.state_cmd",
    "gridctl.cli.lab_cmd",
    "gridctl.cli.context_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gridctl",
        description=(
            "Declarative placement of AI models on a mixed fleet. Model profiles, modes and "
            "policies live as YAML in a watched directory; gridctl plans and converges."
        ),
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue  # command not built yet
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except GridctlError as exc:  # one line with the fix, never a traceback
        print(f"error: {error_text(exc)}", file=sys.stderr)
        return int(getattr(exc, "exit_code", 1))
    except OSError as exc:
        where = f" {exc.filename}" if exc.filename else ""
        print(f"error:{where}: {exc.strerror or exc}", file=sys.stderr)
        return 1


def error_text(exc: BaseException) -> str:
    return str(exc).strip() or type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
