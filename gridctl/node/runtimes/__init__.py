"""Runtime adapters: how one engine kind is prepared, started, probed, drained and stopped.

The actuator drives every engine through one contract
(:class:`~gridctl.node.runtimes.adapter.RuntimeAdapter`) and finds an engine's
adapter by runtime name in a :class:`~gridctl.node.runtimes.registry.RuntimeRegistry`.
llama.cpp's ``llama-server`` is the first managed runtime.
"""

from gridctl.node.runtimes.adapter import (
    ChildFailed,
    EngineActivity,
    LaunchOptions,
    RuntimeAdapter,
    RuntimeFailure,
    SharedEngineAdapter,
    SpawnJournal,
)
from gridctl.node.runtimes.launching import EngineNetwork, EngineSettings
from gridctl.node.runtimes.llamacpp import LlamaCppRuntime, SlotActivity
from gridctl.node.runtimes.llamacpp_router import LlamaCppRouterRuntime
from gridctl.node.runtimes.registry import ADAPTER_KINDS, RuntimeRegistry, UnknownRuntime

__all__ = [
    "ADAPTER_KINDS",
    "ChildFailed",
    "EngineActivity",
    "EngineNetwork",
    "EngineSettings",
    "LaunchOptions",
    "LlamaCppRouterRuntime",
    "LlamaCppRuntime",
    "RuntimeAdapter",
    "RuntimeFailure",
    "RuntimeRegistry",
    "SharedEngineAdapter",
    "SlotActivity",
    "SpawnJournal",
    "UnknownRuntime",
]
