"""``gridctl chat``: a small OpenAI-compatible client for the router."""

from __future__ import annotations

import argparse
import json
import sys

import httpx

from gridctl.client import default_controller_url


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "chat",
        help="send one chat message through the router and print the answer",
        description="POST /v1/chat/completions to the controller's router. Exit 1 with the "
        "router's reason when the model has no ready replica.",
    )
    parser.add_argument("prompt", help="the message to send")
    parser.add_argument("-m", "--model", required=True, help="model id (see GET /v1/models)")
    parser.add_argument("--controller", metavar="URL", help="controller base URL")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--stream", action="store_true", help="print tokens as they arrive")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds (default 120)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    url = (args.controller or default_controller_url()).rstrip("/") + "/v1/chat/completions"
    body = {
        "model": args.model,
        "messages": [{"role": "user", "content": args.prompt}],
        "max_tokens": args.max_tokens,
        "stream": args.stream,
    }
    try:
        with httpx.Client(timeout=args.timeout) as client:
            if not args.stream:
                response = client.post(url, json=body)
                if response.status_code != 200:
                    return _fail(response.status_code, response.text)
                print(response.json()["choices"][0]["message"]["content"])
                return 0
            with client.stream("POST", url, json=body) as response:
                if response.status_code != 200:
                    return _fail(response.status_code, response.read().decode(errors="replace"))
                for line in response.iter_lines():
                    if not line.startswith("data:") or line.strip() == "data: [DONE]":
                        continue
                    chunk = json.loads(line[5:])
                    for choice in chunk.get("choices", []):
                        sys.stdout.write(choice.get("delta", {}).get("content") or "")
                        sys.stdout.flush()
                print()
                return 0
    except httpx.HTTPError as exc:
        print(f"error: cannot reach {url}: {exc}", file=sys.stderr)
        return 1


def _fail(status: int, text: str) -> int:
    try:
        message = json.loads(text)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = text
    print(f"error: HTTP {status}: {message}", file=sys.stderr)
    return 1
