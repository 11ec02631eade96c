"""The ``gridctl`` command: argument parsing and dispatch to one module per command."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from gridctl.errors import GridctlError

# httpx's package imports its own command line whenever click, rich and pygments are
# installed (they are, for textual): about 30 ms of every node, controller and CLI
# process, for a command gridctl never runs. A None entry makes that import fail, and
# httpx then leaves ``httpx.main`` as a stub; nothing else of httpx changes. (Set here,
# in the command's entry point, never on import of the package: the pure core imports
# nothing of httpx, not even this entry.)
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]

# Each module exposes ``register(subparsers)``; the parser it adds sets ``func``.
# Every command, by the module that registers it: a command line naming one builds only
# that module's parser, so a node or controller process does not import every other
# command (``--help``, no command or an unknown one build them all).
COMMAND_OWNERS = {
    "validate": "gridctl.cli.validate_cmd",
    "controller": "gridctl.cli.controller_cmd",
    "status": "gridctl.cli.status_cmd",
    "mode": "gridctl.cli.status_cmd",
    "tick": "gridctl.cli.status_cmd",
    "up": "gridctl.cli.up_cmd",
    "fleet": "gridctl.cli.up_cmd",
    "chat": "gridctl.cli.chat_cmd",
    "join": "gridctl.cli.join_cmd",
    "plan": "gridctl.cli.plan_cmd",
    "forecast": "gridctl.cli.forecast_cmd",
    "apply": "gridctl.cli.apply_cmd",
    "diff": "gridctl.cli.diff_cmd",
    "split": "gridctl.cli.split_cmd",
    "node": "gridctl.cli.node_cmd",
    "token": "gridctl.cli.token_cmd",
    "ca": "gridctl.cli.ca_cmd",
    "join-token": "gridctl.cli.ca_cmd",
    "dash": "gridctl.cli.dash_cmd",
    "artifacts": "gridctl.cli.artifacts_cmd",
    "state": "gridctl.cli.state_cmd",
    "lab": "gridctl.cli.lab_cmd",
    "context": "gridctl.cli.context_cmd",
}
COMMAND_MODULES = tuple(dict.fromkeys(COMMAND_OWNERS.values()))


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or (``command``, one of ``COMMAND_OWNERS``) only that command's."""
    parser = argparse.ArgumentParser(
        prog="gridctl",
        description=(
            "Declarative placement of AI models on a mixed fleet. Model profiles, modes and "
            "policies live as YAML in a watched directory; gridctl plans and converges."
        ),
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    names = COMMAND_MODULES if command is None else (COMMAND_OWNERS[command],)
    for name in names:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue  # command not built yet
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    named = words[0] if words and words[0] in COMMAND_OWNERS else None
    parser = build_parser(named)
    args = parser.parse_args(words)
    if not getattr(args, "func", None):
        build_parser().print_help()
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
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 1


def error_text(exc: BaseException) -> str:
    return str(exc).strip() or type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
