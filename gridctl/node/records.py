"""What a node remembers across restarts, as plain frozen values.

The SQLite store (``statestore``) reads and writes these; everything else in the
node passes them around. Keeping them free of I/O lets the heartbeat builder and
the override rules stay pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gridctl.domain.states import ResidencyState
from gridctl.printable import lines, one_line


@dataclass(frozen=True)
class ProcessIdentity:
    """The proof that a PID is still the child gridctl started.

    A PID alone can be reused by an unrelated process; together with the kernel's
    process birth time, the resolved executable and the exact argv it cannot.
    """

    pid: int
    create_time: float
    executable: str
    cmdline: tuple[str, ...]


@dataclass(frozen=True)
class ResidencyRecord:
    """One model's lifecycle on this host, with its child process when it has one."""

    model_id: str
    state: ResidencyState
    memory_mb: int = 0
    artifact_sha256: str | None = None
    runtime: str = "llama.cpp"
    model_path: str | None = None
    port: int | None = None
    pid: int | None = None
    identity: ProcessIdentity | None = None
    fenced: bool = False  # alive but unproven: never signalled, port never reused
    loaded_at: float | None = None  # wall clock of this node
    last_used_at: float | None = None  # wall clock of this node, from /slots activity
    active_requests: int = 0
    message: str = ""
    # the child is a split's coordinator engine (``llama-server --rpc``) under this
    # coordinator term; None = a whole replica
    split_term: int | None = None

    @property
    def has_process(self) -> bool:
        return self.pid is not None


@dataclass(frozen=True)
class CachedArtifact:
    """A verified artifact in the cache, known under a model id."""

    model_id: str
    sha256: str
    path: str
    size_bytes: int
    cached_at: float
    provenance: str = "demand"  # "demand" | "predictive" | "operator" (found already present)
    last_used_at: float | None = None  # wall clock of the last launch from this entry
    gguf: dict[str, object] | None = None  # header summary (gridctl.artifacts.gguf), if readable


@dataclass(frozen=True)
class Transfer:
    """One running artifact transfer, as the heartbeat reports it."""

    model_id: str
    sha256: str
    source: str
    bytes_done: int = 0
    bytes_total: int | None = None
    rate_bytes_per_second: float = 0.0


@dataclass(frozen=True)
class Receipt:
    """The node's durable record of one command and its outcome."""

    action_id: str
    kind: str
    model_id: str
    status: str  # a gridctl.domain.ReceiptStatus value
    message: str = ""
    reason: str = ""
    duration_seconds: float | None = None
    artifact_fetched: bool = False
    command: dict[str, object] = field(default_factory=dict)
    received_at: float = 0.0
    finished_at: float | None = None
    acked: bool = False

    def acknowledgement(self) -> dict[str, object]:
        """This receipt as a wire acknowledgement (``acknowledgement.schema.json``)."""
        ack: dict[str, object] = {
            "action_id": self.action_id,
            "status": self.status,
            "message": lines(self.message, 4096),  # an engine's error may hold escapes
            "duration_seconds": self.duration_seconds,
            "artifact_fetched": self.artifact_fetched,
            "observed_at": self.finished_at,
        }
        if self.reason:
            ack["reason"] = one_line(self.reason, 128)
        return ack


@dataclass(frozen=True)
class Override:
    """A local operator override: drain, pause or quarantine, optionally expiring."""

    kind: str  # "drain" | "pause" | "quarantine"
    reason: str = ""
    set_at: float = 0.0
    expires_at: float | None = None  # wall clock; None = until `gridctl node resume`


@dataclass(frozen=True)
class FenceMemory:
    """The durable part of command fencing: the highest authority seen so far."""

    highest_term: int = 0
    controller_id: str | None = None  # the one identity accepted in ``highest_term``
    fenced_seen: bool = False  # once a term > 0 arrived, term-zero commands are refused
    latest_plan_generation: str | None = None
