"""``gridctl context ls|use|show|set|delete``: which fleet the other commands talk to.

``gridctl up`` and ``gridctl controller`` record a context and make it
current; ``set`` records one for a controller elsewhere (its URL, CA file and
operator token file). Flags and ``GRIDCTL_*`` variables still win over it.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
from pathlib import Path
from typing import Any

from gridctl import contexts


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ctx = sub.add_parser(
        "context",
        help="list, show and switch the fleets this machine knows (kubectl-style contexts)",
        description="A context names a controller URL, its CA file, the operator token file and "
        "(for fleets started here) each host's node state directory. Every command uses the "
        "current context unless --controller/--token-file/--ca-file or GRIDCTL_CONTROLLER/"
        "GRIDCTL_TOKEN_FILE/GRIDCTL_CA_FILE/GRIDCTL_CONTEXT say otherwise. Stored in "
        f"{contexts.contexts_path()}.",
    )
    csub = ctx.add_subparsers(dest="context_command", metavar="ACTION")
    ls = csub.add_parser("ls", help="every known context; * marks the current one")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=run_ls)
    use = csub.add_parser("use", help="make NAME the current context")
    use.add_argument("name")
    use.set_defaults(func=run_use)
    show = csub.add_parser(
        "show", help="the settings a command would use now, and the export lines for them"
    )
    show.add_argument("name", nargs="?", help="a context (default: what commands use now)")
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=run_show)
    put = csub.add_parser("set", help="record (or replace) a context for a controller")
    put.add_argument("name")
    put.add_argument("--controller", required=True, metavar="URL")
    put.add_argument("--token-file", type=Path, metavar="FILE")
    put.add_argument("--ca-file", type=Path, metavar="PEM")
    put.add_argument("--no-use", action="store_true", help="do not make it current")
    put.set_defaults(func=run_set)
    delete = csub.add_parser("delete", help="forget a context")
    delete.add_argument("name")
    delete.set_defaults(func=run_delete)

    def context_help(_args: argparse.Namespace) -> int:
        ctx.print_help()
        return 2

    ctx.set_defaults(func=context_help)


def run_ls(args: argparse.Namespace) -> int:
    file = contexts.load()
    if args.json:
        doc = {
            "file": str(file.path),
            "current": file.current,
            "contexts": [c.as_json() for _, c in sorted(file.contexts.items())],
        }
        print(json.dumps(doc, indent=2))
        return 0
    if not file.contexts:
        print(f"no contexts in {file.path}; `gridctl up` records one")
        return 0
    print(f"{'':2}{'NAME':<20} {'CONTROLLER':<32} TOKEN FILE")
    for name, c in sorted(file.contexts.items()):
        mark = "*" if name == file.current else " "
        print(f"{mark} {name:<20} {c.controller:<32} {c.token_file or '-'}")
    return 0


def run_use(args: argparse.Namespace) -> int:
    file = contexts.load()
    file.get(args.name)  # names the known ones when it does not exist
    file.current = args.name
    file.save()
    print(f"current context: {args.name} ({file.contexts[args.name].controller})")
    return 0


def export_lines(target: contexts.Target) -> list[str]:
    lines = [
        f"export GRIDCTL_CONTROLLER={shlex.quote(target.controller)}",
        f"export GRIDCTL_TOKEN_FILE={shlex.quote(str(target.token_file))}",
    ]
    if target.ca_file is not None:
        lines.append(f"export GRIDCTL_CA_FILE={shlex.quote(str(target.ca_file))}")
    return lines


def _show_doc(args: argparse.Namespace) -> dict[str, Any]:
    if args.name:
        c = contexts.load().get(args.name)
        return {**c.as_json(), "source": "named", "export": _exports_of(c)}
    target = contexts.resolve()
    context = contexts.current_context()
    return {
        "name": target.context,
        "controller": target.controller,
        "controller_from": target.controller_from,
        "token_file": str(target.token_file),
        "token_from": target.token_from,
        "ca_file": str(target.ca_file) if target.ca_file else None,
        "node_state_dirs": dict(context.node_state_dirs) if context else {},
        "environment": {
            k: os.environ[k]
            for k in ("GRIDCTL_CONTEXT", "GRIDCTL_CONTROLLER", "GRIDCTL_TOKEN_FILE")
            if k in os.environ
        },
        "export": export_lines(target),
    }


def _exports_of(c: contexts.Context) -> list[str]:
    target = contexts.Target(
        controller=c.controller,
        token_file=Path(c.token_file or "-"),
        ca_file=Path(c.ca_file) if c.ca_file else None,
        context=c.name,
        controller_from=f"context {c.name}",
        token_from=f"context {c.name}",
    )
    return export_lines(target)


def run_show(args: argparse.Namespace) -> int:
    doc = _show_doc(args)
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(f"context: {doc['name'] or '(none)'}")
    print(f"controller: {doc['controller']}" + _from(doc, "controller_from"))
    print(f"token file: {doc['token_file']}" + _from(doc, "token_from"))
    print(f"CA file: {doc['ca_file'] or '-'}")
    for host, path in sorted(doc["node_state_dirs"].items()):
        print(f"node {host}: {path}")
    print("\n".join(doc["export"]))
    return 0


def _from(doc: dict[str, Any], key: str) -> str:
    return f"  (from {doc[key]})" if doc.get(key) else ""


def run_set(args: argparse.Namespace) -> int:
    context = contexts.Context(
        name=args.name,
        controller=args.controller.rstrip("/"),
        token_file=str(args.token_file.absolute()) if args.token_file else None,
        ca_file=str(args.ca_file.absolute()) if args.ca_file else None,
    )
    contexts.record(context, make_current=not args.no_use)
    state = "recorded" if args.no_use else "recorded and current"
    print(f"context {args.name} {state}: {context.controller}")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    file = contexts.load()
    file.get(args.name)
    del file.contexts[args.name]
    if file.current == args.name:
        file.current = None
    file.save()
    print(f"context {args.name} deleted")
    return 0
