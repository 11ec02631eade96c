"""``gridctl chat``: a small OpenAI-compatible client for the router.

It talks to the current context's controller (or ``--controller``), verifies an
https one with the context's CA, and suggests the nearest model id when the
router does not know the one given.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx

from gridctl import contexts
from gridctl.client import add_ca_file_argument
from gridctl.errors import GridctlError
from gridctl.transport import verify_setting

KEY_ENV = "GRIDCTL_ROUTER_KEY"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "chat",
        help="send one chat message through the router and print the answer",
        description="POST /v1/chat/completions to the controller's router. Exit 1 with the "
        "router's reason when the model has no ready replica.",
    )
    parser.add_argument("prompt", help="the message to send")
    parser.add_argument(
        "-m",
        "--model",
        default="auto",
        help="model id (see GET /v1/models); default auto: the model that serves the "
        "message's workload",
    )
    parser.add_argument(
        "--controller", metavar="URL", help="controller base URL (default: the current context)"
    )
    add_ca_file_argument(parser)
    parser.add_argument(
        "--api-key-file",
        type=Path,
        metavar="FILE",
        help=f"a router API key (`gridctl token router create`) for a fleet that requires "
        f"one (default ${KEY_ENV}, else none)",
    )
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--stream", action="store_true", help="print tokens as they arrive")
    parser.add_argument("--json", action="store_true", help="print the whole completion")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds (default 120)")
    parser.set_defaults(func=run)


def router_key(path: Path | None) -> str | None:
    """The router API key from ``--api-key-file``, else ``$GRIDCTL_ROUTER_KEY``, else None."""
    if path is None:
        return os.environ.get(KEY_ENV) or None
    try:
        key = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise GridctlError(f"--api-key-file {path}: cannot read the router key: {exc}") from None
    if not key:
        raise GridctlError(f"--api-key-file {path}: the file is empty")
    return key


def run(args: argparse.Namespace) -> int:
    target = contexts.resolve(args.controller, None, args.ca_file)
    url = target.controller + "/v1/chat/completions"
    key = router_key(args.api_key_file)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {
        "model": args.model,
        "messages": [{"role": "user", "content": args.prompt}],
        "max_tokens": args.max_tokens,
        "stream": args.stream and not args.json,
    }
    try:
        verify = verify_setting(target.controller, target.ca_file)
        with httpx.Client(timeout=args.timeout, verify=verify, headers=headers) as client:
            if not body["stream"]:
                response = client.post(url, json=body)
                if response.status_code != 200:
                    return _fail(client, target, args.model, response.status_code, response.text)
                answer = response.json()
                if args.json:
                    print(json.dumps(answer, indent=2))
                else:
                    print(answer["choices"][0]["message"]["content"])
                return 0
            with client.stream("POST", url, json=body) as response:
                if response.status_code != 200:
                    text = response.read().decode(errors="replace")
                    return _fail(client, target, args.model, response.status_code, text)
                for line in response.iter_lines():
                    if not line.startswith("data:") or line.strip() == "data: [DONE]":
                        continue
                    chunk = json.loads(line[5:])
                    for choice in chunk.get("choices", []):
                        sys.stdout.write(choice.get("delta", {}).get("content") or "")
                        sys.stdout.flush()
                print()
                return 0
    except (httpx.HTTPError, OSError) as exc:
        print(
            f"error: cannot reach {url}: {type(exc).__name__}: {exc}; is it running? "
            f"({target.describe()})",
            file=sys.stderr,
        )
        return 2


def _models(client: httpx.Client, base: str) -> list[str]:
    try:
        data: Any = client.get(base + "/v1/models").json()
        return sorted(str(m["id"]) for m in data.get("data", []))
    except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError):
        return []


def _fail(client: httpx.Client, target: contexts.Target, model: str, status: int, text: str) -> int:
    try:
        message = json.loads(text)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = text.strip()
    hint = ""
    if status == 404:
        known = _models(client, target.controller)
        near = difflib.get_close_matches(model, known, n=1, cutoff=0.5)
        if near:
            hint = f"; did you mean {near[0]}?"
        elif known:
            hint = f"; known models: {', '.join(known)}"
    print(
        f"error: HTTP {status}: {message}{hint} (controller {target.controller})", file=sys.stderr
    )
    return 1
