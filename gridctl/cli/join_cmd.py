"""``gridctl join``: register an engine gridctl does not manage (inventory and routing only)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from gridctl.client import ControllerClient, ControllerError, add_ca_file_argument

KINDS = ("llama.cpp", "vllm", "ollama", "openai")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "join",
        help="register an external engine: routable inventory, never actuated",
        description="Register an OpenAI-compatible engine that gridctl does not manage. Once "
        "the controller's probe sees it answer, the router may send requests for "
        "MODEL there and placement counts it as capacity evidence; gridctl never "
        "starts, drains or stops it.",
    )
    parser.add_argument("--at", required=True, metavar="URL", help="the engine's base URL")
    parser.add_argument("-m", "--model", required=True, help="model id the engine serves")
    parser.add_argument("--kind", required=True, choices=KINDS, help="engine runtime")
    parser.add_argument("--name", help="inventory id (default derived from the URL)")
    parser.add_argument("--max-concurrency", type=int, default=1)
    parser.add_argument("--controller", metavar="URL")
    parser.add_argument("--token-file", type=Path, metavar="FILE")
    add_ca_file_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    name = (
        args.name
        or "external-" + re.sub(r"[^A-Za-z0-9]+", "-", args.at.split("://", 1)[-1]).strip("-")[:100]
    )
    body = {
        "endpoint": args.at,
        "model_id": args.model,
        "kind": args.kind,
        "max_concurrency": args.max_concurrency,
    }
    try:
        with ControllerClient(
            args.controller, token_file=args.token_file, ca_file=getattr(args, "ca_file", None)
        ) as client:
            client.call_admin("PUT", f"/allocator/external/{name}", json=body)
    except ControllerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(f"registered {args.model} at {args.at} as external inventory {name} (never actuated)")
    return 0
