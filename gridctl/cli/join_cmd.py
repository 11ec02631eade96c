"""``gridctl join``: register an engine gridctl does not manage (inventory and routing only),
or retire one with ``--remove`` once a managed replacement serves its model."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from gridctl.client import ControllerClient, ControllerError, add_ca_file_argument
from gridctl.controller.externals import DEFAULT_SERVES, SERVES

KINDS = ("llama.cpp", "vllm", "ollama", "openai")
USAGE_ERROR = 2  # argparse's code for a command line that cannot be run


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "join",
        help="register (or --remove) an external engine: routable inventory, never actuated",
        description="Register an OpenAI-compatible engine that gridctl does not manage. It "
        "becomes routable once the controller's readiness probe sees MODEL in the engine's "
        "/v1/models and a one-token request for it answer; the router may then send requests "
        "for MODEL there and placement counts it as capacity evidence; gridctl never starts, "
        "drains or stops it. `gridctl join --remove NAME` retires it once a replacement "
        "is READY.",
    )
    parser.add_argument("--at", metavar="URL", help="the engine's base URL")
    parser.add_argument("-m", "--model", help="model id the engine serves")
    parser.add_argument("--kind", choices=KINDS, help="engine runtime")
    parser.add_argument(
        "--serves",
        choices=SERVES,
        default=DEFAULT_SERVES,
        help="the API the readiness probe asks one token of (default %(default)s)",
    )
    parser.add_argument(
        "--api-key-file",
        type=Path,
        metavar="FILE",
        help="a file holding the engine's own API key (vLLM --api-key, a gateway's key): "
        "the readiness probes and the router send it as a Bearer token; it is never shown "
        "in status or logs (omitted on a re-join: the registered key is kept)",
    )
    parser.add_argument("--name", help="inventory id (default derived from the URL)")
    parser.add_argument("--max-concurrency", type=int, default=1)
    parser.add_argument(
        "--remove",
        metavar="NAME",
        help="retire the external engine NAME: its route, record and inventory go; "
        "requests in flight finish",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="with --remove: remove it even while it is a model's only routable replica",
    )
    parser.add_argument("--json", action="store_true", help="print the controller's answer")
    parser.add_argument("--controller", metavar="URL")
    parser.add_argument("--token-file", type=Path, metavar="FILE")
    add_ca_file_argument(parser)
    parser.set_defaults(func=run)


def _usage_problem(args: argparse.Namespace) -> str | None:
    if args.remove is not None:
        given = [flag for flag, value in (("--at", args.at), ("-m", args.model)) if value]
        given += ["--kind"] if args.kind else []
        given += ["--api-key-file"] if args.api_key_file else []
        if given:
            return f"--remove takes only the engine's name; drop {', '.join(given)}"
        return None
    if args.force:
        return "--force only applies to --remove NAME"
    missing = [
        flag
        for flag, value in (("--at URL", args.at), ("-m MODEL", args.model), ("--kind", args.kind))
        if not value
    ]
    if missing:
        return f"joining an engine needs {', '.join(missing)} (or --remove NAME to retire one)"
    return None


def _call(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> Any:
    with ControllerClient(
        args.controller, token_file=args.token_file, ca_file=getattr(args, "ca_file", None)
    ) as client:
        return client.call_admin(method, path, **kwargs)


def run(args: argparse.Namespace) -> int:
    problem = _usage_problem(args)
    if problem is not None:
        print(f"error: gridctl join: {problem}", file=sys.stderr)
        return USAGE_ERROR
    if args.remove is not None:
        return _remove(args)
    name = (
        args.name
        or "external-" + re.sub(r"[^A-Za-z0-9]+", "-", args.at.split("://", 1)[-1]).strip("-")[:100]
    )
    body = {
        "endpoint": args.at,
        "model_id": args.model,
        "kind": args.kind,
        "max_concurrency": args.max_concurrency,
        "serves": args.serves,
    }
    if args.api_key_file is not None:
        try:
            key = args.api_key_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            print(f"error: --api-key-file {args.api_key_file}: {exc}", file=sys.stderr)
            return USAGE_ERROR
        if not key:
            print(f"error: --api-key-file {args.api_key_file} is empty", file=sys.stderr)
            return USAGE_ERROR
        body["api_key"] = key
    try:
        answer = _call(args, "PUT", f"/allocator/external/{name}", json=body)
    except ControllerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    if args.json:
        print(json.dumps(answer, indent=2, sort_keys=True))
        return 0
    print(
        f"registered {args.model} at {args.at} as external inventory {name} (never actuated); "
        "routable once its /v1/models lists the model and a one-token request answers"
    )
    return 0


def _remove(args: argparse.Namespace) -> int:
    params = {"force": "true"} if args.force else None
    try:
        answer = _call(args, "DELETE", f"/allocator/external/{args.remove}", params=params)
    except ControllerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    if args.json:
        print(json.dumps(answer, indent=2, sort_keys=True))
        return 0
    models = ", ".join(answer.get("model_ids") or []) if isinstance(answer, dict) else ""
    print(
        f"removed external engine {args.remove}"
        + (f" (served {models})" if models else "")
        + "; requests already sent to it finish there"
    )
    return 0
