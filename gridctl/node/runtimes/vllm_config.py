"""Whether this node runs vLLM, and how: the operator's environment, read once at start.

vLLM is an optional engine in its own virtualenv. The node daemon builds the
``vllm`` adapter only when ``GRIDCTL_VLLM_PYTHON`` names that interpreter; with
it unset the runtime is not in the node's inventory and the planner never
places a vLLM profile here. A value that is set but wrong stops the node at
start with the variable's name, rather than failing the first warm minutes
later.

``GRIDCTL_VLLM_READY_TIMEOUT`` (seconds, default 600) bounds launch to native
readiness: vLLM starts three Python processes that import torch, 77 to 270 s on
a shared 2-core machine. ``GRIDCTL_VLLM_NICE`` (0 to 19) lowers the CPU
priority of vLLM and of its GGUF conversions on a machine shared with its owner.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from gridctl.errors import PermanentError
from gridctl.node.runtimes.launching import EngineNetwork, EngineSettings
from gridctl.node.runtimes.vllm import DEFAULT_READY_TIMEOUT, VllmRuntime

PYTHON_ENV = "GRIDCTL_VLLM_PYTHON"  # the vLLM virtualenv's interpreter
READY_TIMEOUT_ENV = "GRIDCTL_VLLM_READY_TIMEOUT"  # seconds from launch to native readiness
NICE_ENV = "GRIDCTL_VLLM_NICE"  # niceness of vLLM children and conversions (a shared machine)
MODELS_DIR = "vllm-models"  # under the state directory: converted models by artifact digest


def configured_python(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The vLLM interpreter the operator named in ``GRIDCTL_VLLM_PYTHON``; None when unset.

    A named interpreter that is not an executable file is a configuration error.
    """
    value = environ.get(PYTHON_ENV, "").strip()
    if not value:
        return None
    path = Path(value)
    if not path.is_file() or not os.access(path, os.X_OK):
        raise PermanentError(f"{PYTHON_ENV}={value}: not an executable file")
    return path


def configured_ready_timeout(environ: Mapping[str, str] = os.environ) -> float:
    return _positive(environ, READY_TIMEOUT_ENV, DEFAULT_READY_TIMEOUT)


def configured_niceness(environ: Mapping[str, str] = os.environ) -> int:
    niceness = int(_positive(environ, NICE_ENV, 0.0, allow_zero=True))
    if niceness > 19:
        raise PermanentError(f"{NICE_ENV}={niceness}: at most 19")
    return niceness


def _positive(
    environ: Mapping[str, str], name: str, default: float, *, allow_zero: bool = False
) -> float:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise PermanentError(f"{name}={raw!r}: not a number") from None
    if not (value > 0 or (allow_zero and value == 0)) or value != value:
        raise PermanentError(f"{name}={raw!r}: must be {'>= 0' if allow_zero else '> 0'}")
    return value


def vllm_settings(settings: EngineSettings, ready_timeout: float) -> EngineSettings:
    """The node's engine settings with vLLM's own (minutes-long) readiness timeout."""
    return replace(settings, ready_timeout=ready_timeout)


def configured_runtime(
    state_dir: Path,
    settings: EngineSettings,
    *,
    key_file: Path,
    api_key: str,
    network: EngineNetwork,
    python: Path | None = None,
    log_dir: Path | None = None,
    ready_timeout: float | None = None,
    environ: Mapping[str, str] = os.environ,
) -> VllmRuntime | None:
    """The node's vLLM adapter when an interpreter is named (``python``, else
    ``GRIDCTL_VLLM_PYTHON``); None when vLLM is not configured on this host.
    ``ready_timeout`` defaults to ``GRIDCTL_VLLM_READY_TIMEOUT``."""
    python = python or configured_python(environ)
    if python is None:
        return None
    if ready_timeout is None:
        ready_timeout = configured_ready_timeout(environ)
    return VllmRuntime(
        python=python,
        key_file=key_file,
        api_key=api_key,
        log_dir=log_dir or Path(state_dir) / "logs",
        models_dir=Path(state_dir) / MODELS_DIR,
        settings=vllm_settings(settings, ready_timeout),
        network=network,
        niceness=configured_niceness(environ),
    )
