"""Which adapter serves a runtime name, on this host and in this build.

Profiles and wire commands name runtimes as strings ("llama.cpp"); the actuator
resolves each name here, once, and an unknown name is a refusal that names it
and the runtimes this host does have — never a silent fall back to another
engine. ``ADAPTER_KINDS`` lists every adapter this build ships; a registry
refuses an adapter that does not implement the whole contract, so a half-built
adapter fails when the node is assembled, not in the middle of a warm.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from gridctl.node.runtimes.adapter import RuntimeAdapter, RuntimeFailure, contract_gaps
from gridctl.node.runtimes.llamacpp import LlamaCppRuntime
from gridctl.node.runtimes.llamacpp_router import LlamaCppRouterRuntime
from gridctl.node.runtimes.vllm import VllmRuntime

# Every adapter kind this build ships, by the runtime name profiles declare.
# The annotation makes mypy check each class against the contract structurally.
ADAPTER_KINDS: Mapping[str, type[RuntimeAdapter]] = {
    LlamaCppRuntime.name: LlamaCppRuntime,
    LlamaCppRouterRuntime.name: LlamaCppRouterRuntime,
    VllmRuntime.name: VllmRuntime,
}


class UnknownRuntime(RuntimeFailure):
    """A runtime name no adapter answers to."""

    def __init__(self, runtime: str, known: Iterable[str]) -> None:
        self.runtime = runtime
        names = ", ".join(sorted(known)) or "none"
        super().__init__(
            "unknown_runtime", f"runtime {runtime!r} has no adapter here (adapters: {names})"
        )


def adapter_kind(runtime: str) -> type[RuntimeAdapter]:
    """The adapter class this build ships for ``runtime``; UnknownRuntime otherwise."""
    try:
        return ADAPTER_KINDS[runtime]
    except KeyError:
        raise UnknownRuntime(runtime, ADAPTER_KINDS) from None


class RuntimeRegistry:
    """The adapters one node runs, by runtime name; the first is the host's default."""

    def __init__(self, adapters: Iterable[RuntimeAdapter]) -> None:
        self._adapters: dict[str, RuntimeAdapter] = {}
        for adapter in adapters:
            name = getattr(adapter, "name", None)
            if not isinstance(name, str) or not name:
                raise ValueError(f"adapter {type(adapter).__name__}: 'name' must be a string")
            gaps = contract_gaps(type(adapter))
            if gaps:
                raise ValueError(
                    f"adapter {name!r} ({type(adapter).__name__}) does not implement the "
                    f"runtime contract: {'; '.join(gaps)}"
                )
            if name in self._adapters:
                raise ValueError(f"runtime {name!r} is registered twice")
            self._adapters[name] = adapter
        if not self._adapters:
            raise ValueError("a node needs at least one runtime adapter")

    @property
    def default(self) -> RuntimeAdapter:
        """The adapter for commands and records that name no runtime (written before runtimes
        were named, or by a controller that leaves the field empty)."""
        return next(iter(self._adapters.values()))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._adapters)

    def adapter_for(self, runtime: str | None) -> RuntimeAdapter:
        """The adapter serving ``runtime``; ``None`` means the default. UnknownRuntime else."""
        if runtime is None:
            return self.default
        adapter = self._adapters.get(runtime)
        if adapter is None:
            raise UnknownRuntime(runtime, self._adapters)
        return adapter

    def __iter__(self) -> Iterator[RuntimeAdapter]:
        return iter(tuple(self._adapters.values()))

    def __contains__(self, runtime: object) -> bool:
        return runtime in self._adapters
