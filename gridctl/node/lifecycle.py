"""The vocabulary of one lifecycle step on a node, shared by the executor and the actuator.

What a wire command asks of a step (:class:`LifecycleRequest`), what a step that
happened reports (:class:`Outcome`), how a step that did not happen fails
(:class:`ActionFailure`, with a stable reason for the receipt), and the host's
declared limits every warm is checked against. Plain data: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from gridctl.errors import PermanentError
from gridctl.node.runtimes.adapter import LaunchOptions
from gridctl.node.splitlinks import SplitLaunch


class ActionFailure(PermanentError):
    """A lifecycle step did not happen; ``reason`` is a stable code for the receipt."""

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        super().__init__(f"{reason}: {detail}" if detail else reason)


@dataclass(frozen=True)
class PortRange:
    first: int
    last: int

    @classmethod
    def parse(cls, text: str) -> PortRange:
        lo, _, hi = text.partition("-")
        first, last = int(lo), int(hi or lo)
        if not 1024 <= first <= last <= 65535:
            raise ValueError(f"bad port range {text!r}")
        return cls(first, last)


@dataclass(frozen=True)
class MemoryLimits:
    """The host's declared model capacity, checked again before each launch."""

    capacity_mb: int
    reserved_mb: int = 0


@dataclass(frozen=True)
class LifecycleRequest:
    """The parts of a wire command a lifecycle step needs."""

    kind: str
    model_id: str
    memory_mb: int = 0
    artifact_sha256: str | None = None
    artifact_source: str | None = None
    artifact_size_mb: int | None = None
    artifact_mirrors: tuple[str, ...] = ()  # fleet peers holding the exact digest, tried first
    prefetch: bool = False  # a cache-only predictive transfer: provenance "predictive"
    chat_template: str | None = None  # a llama-server built-in template name for the warm
    embeddings: bool = False  # the warmed engine serves /v1/embeddings
    force: bool = False
    runtime: str | None = None  # the engine kind to warm; None: the host's default runtime
    # a warm that coordinates a split (passed the load fence): its stages and identity
    split: SplitLaunch | None = None

    @property
    def split_term(self) -> int | None:
        return None if self.split is None else self.split.serve.coordinator_term

    @property
    def launch_options(self) -> LaunchOptions:
        return LaunchOptions(chat_template=self.chat_template, embeddings=self.embeddings)


@dataclass(frozen=True)
class Outcome:
    message: str
    artifact_fetched: bool = False
