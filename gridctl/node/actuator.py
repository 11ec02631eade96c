"""The managed host actuator: LOAD → WARM → READY → DRAIN → UNLOAD on this host.

It joins the durable store, the artifact cache and the runtime adapters (one per
engine kind, found by runtime name in a registry; see
:mod:`gridctl.node.runtimes.adapter` for what an adapter promises), and holds
the node-side safety rules of the lifecycle, the same for every engine: a warm
is refused before launch if memory no longer fits or its runtime has no adapter
here; the artifact is hashed before every launch; a drain only stops
admissions; an unload stops a child only when it is provably ours and idle per
the adapter's authenticated activity probe (unless forced); a child whose
identity cannot be proven is fenced (failed, never signalled, port never
reused). ``recover`` runs once at start and adopts surviving children only with
that proof.

A warm that coordinates a split (``LifecycleRequest.split``, admitted by the load
fence in ``splitserve``) first opens one TLS forwarder per stage
(``splitlinks.CoordinatorLinks``), then starts ``llama-server --rpc`` over them; the
residency records its ``split_term``. The forwarders are closed whenever that
residency's child ends or is given up: unload, a failed warm, a child that exits,
fails its health probe or cannot be proven, and the node stopping (a drain keeps
them: the engine still serves what it admitted). After a node restart a recorded
coordinator child is NOT adopted: its forwarders died with the old node process,
so it is stopped with proof (``stop_proven``, never an unproven PID) and its
residency ends.

Each method performs one side effect and raises :class:`ActionFailure` with a
stable reason; the executor turns that into a receipt.
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

import psutil

from gridctl.domain.states import ResidencyState
from gridctl.errors import GridctlError
from gridctl.node.artifacts import ArtifactCache
from gridctl.node.lifecycle import (
    ActionFailure,
    LifecycleRequest,
    MemoryLimits,
    Outcome,
    PortRange,
)
from gridctl.node.processes import Liveness
from gridctl.node.records import ProcessIdentity, ResidencyRecord
from gridctl.node.runtimes.adapter import (
    LaunchOptions,
    RuntimeAdapter,
    RuntimeFailure,
    SharedEngineAdapter,
    residency_activity,
    residency_healthy,
    residency_wait_idle,
    stop_residency,
)
from gridctl.node.runtimes.llamacpp import RUNTIME_NAME as LLAMA_CPP
from gridctl.node.runtimes.registry import RuntimeRegistry, UnknownRuntime
from gridctl.node.splitlinks import CoordinatorLinks
from gridctl.node.statestore import NodeStateStore
from gridctl.transport import socket_family

log = logging.getLogger("gridctl.node")

__all__ = [  # the lifecycle's vocabulary stays importable from here
    "ActionFailure",
    "HostActuator",
    "LifecycleRequest",
    "MemoryLimits",
    "Outcome",
    "PortRange",
    "available_memory_mb",
]

MIB = 1024 * 1024
HEALTH_FAILURES_BEFORE_FAILED = 3
_PROCESS_STATES = (ResidencyState.READY, ResidencyState.DRAINING)


def _load_failure_reason(exc: Exception) -> str:
    if isinstance(exc, OSError):
        return "insufficient_disk" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "local_io"
    return str(getattr(exc, "reason", "load_failed"))


def available_memory_mb() -> int:
    return int(psutil.virtual_memory().available // MIB)


def _port_is_free(port: int, address: str = "127.0.0.1") -> bool:
    """Whether ``port`` can be bound on ``address`` (the children's address family)."""
    with socket.socket(socket_family(address), socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError:
            return False
    return True


class _Journal:
    """Publishes a child's handle into the store the moment it exists."""

    def __init__(self, store: NodeStateStore, record: ResidencyRecord) -> None:
        self.store, self.record = store, record

    def spawned(self, model_id: str, pid: int, port: int) -> None:
        self.record = replace(self.record, pid=pid, port=port)
        self.store.put_residency(self.record)

    def proven(self, model_id: str, identity: ProcessIdentity) -> None:
        self.record = replace(self.record, identity=identity)
        self.store.put_residency(self.record)


class HostActuator:
    """Runs lifecycle steps for one host; safe to call from the executor and heartbeat threads."""

    def __init__(
        self,
        *,
        store: NodeStateStore,
        cache: ArtifactCache,
        runtime: RuntimeAdapter,
        ports: PortRange,
        limits: MemoryLimits,
        unload_idle_timeout: float = 30.0,
        stop_grace: float = 10.0,
        free_memory_mb: Callable[[], int] = available_memory_mb,
        clock: Callable[[], float] = time.time,
        other_runtimes: Iterable[RuntimeAdapter] = (),
    ) -> None:
        self.store, self.cache = store, cache
        self.runtimes = RuntimeRegistry((runtime, *other_runtimes))
        self.runtime = runtime  # the default: commands and records that name no runtime
        self.ports, self.limits = ports, limits
        self.unload_idle_timeout, self.stop_grace = unload_idle_timeout, stop_grace
        self.free_memory_mb, self.clock = free_memory_mb, clock
        self._lock = threading.RLock()
        self._health_failures: dict[str, int] = {}
        self.disk: tuple[int, int] = cache.disk()
        self.queued: dict[str, int] = {}  # model -> requests waiting for a slot (last probe)
        self.links = CoordinatorLinks()  # split coordinator engines' forwarders, by model

    # --- small record helpers -----------------------------------------------------------

    def _set(self, record: ResidencyRecord, **changes: object) -> ResidencyRecord:
        updated = replace(record, **changes)  # type: ignore[arg-type]
        self.store.put_residency(updated)
        return updated

    def _released(self, record: ResidencyRecord, state: ResidencyState, message: str) -> None:
        """The child is gone: drop its handle and port, keep the model's lifecycle row."""
        self.links.close(record.model_id)  # a coordinator engine's forwarders go with it
        if state is ResidencyState.CACHED and self.store.cached_artifact(record.model_id) is None:
            self.store.delete_residency(record.model_id)
            return
        self._set(
            record,
            state=state,
            pid=None,
            port=None,
            identity=None,
            fenced=False,
            active_requests=0,
            message=message,
            split_term=None,
        )

    def _fence(self, record: ResidencyRecord, message: str) -> None:
        self.links.close(record.model_id)
        self._set(record, state=ResidencyState.FAILED, fenced=True, message=message)

    def _adapter_of(self, record: ResidencyRecord) -> RuntimeAdapter | None:
        """The adapter that started this child; ``None`` if this node no longer has it."""
        try:
            return self.runtimes.adapter_for(record.runtime)
        except UnknownRuntime:
            return None

    def shares_engine(self, record: ResidencyRecord) -> bool:
        """Whether this residency's engine serves several models (its slots are node-wide)."""
        return isinstance(self._adapter_of(record), SharedEngineAdapter)

    def _adapter_for(self, req: LifecycleRequest) -> RuntimeAdapter:
        try:
            return self.runtimes.adapter_for(req.runtime)
        except UnknownRuntime as exc:
            raise ActionFailure(exc.reason, str(exc).partition(": ")[2]) from exc

    def _liveness(self, record: ResidencyRecord) -> Liveness:
        adapter = self._adapter_of(record)
        if record.identity is None or adapter is None:
            # Spawned but the proof was never published, or started by an engine kind this
            # node cannot probe any more: a live PID is unprovable.
            alive = record.pid is not None and psutil.pid_exists(record.pid)
            return Liveness.UNPROVEN if alive else Liveness.DEAD
        return adapter.prove_identity(record.identity)

    def _allocate_port(self, adapter: RuntimeAdapter | None = None) -> int:
        """A managed port no record holds, free on ``adapter``'s address (default runtime's)."""
        address = (adapter or self.runtime).probe_address
        used = {r.port for r in self.store.residencies() if r.port is not None}
        for port in range(self.ports.first, self.ports.last + 1):
            if port not in used and _port_is_free(port, address):
                return port
        raise ActionFailure("no_free_port", f"managed range {self.ports.first}-{self.ports.last}")

    # --- restart ----------------------------------------------------------------------

    def recover(self) -> list[str]:
        """Adopt surviving children with proof, fence the unprovable, fail the interrupted."""
        notes: list[str] = []
        with self._lock:
            for record in self.store.residencies():
                notes.append(f"{record.model_id}: {self._recover_one(record)}")
        return notes

    def _recover_one(self, record: ResidencyRecord) -> str:
        if record.pid is None:
            if record.state in (
                ResidencyState.LOADING,
                ResidencyState.WARMING,
                ResidencyState.UNLOADING,
            ):
                self._released(record, ResidencyState.FAILED, "interrupted_by_restart")
                return "interrupted step marked failed"
            return f"{record.state.value}, no process"
        if record.split_term is not None:
            # a coordinator engine's forwarders died with the old node: never adopted
            self._stop_and_release(record, "split coordinator not adopted after restart")
            after = self.store.residency(record.model_id)
            if after is not None and after.fenced:
                return f"split coordinator {record.pid} unproven; fenced, never signalled"
            return f"split coordinator {record.pid} stopped, not adopted (its forwarders died)"
        adapter = self._adapter_of(record)
        if adapter is not None and record.identity is not None and record.port is not None:
            liveness = adapter.adopt(record.model_id, record.identity, record.port)
        else:
            liveness = self._liveness(record)
        if liveness is Liveness.DEAD:
            unloading = record.state is ResidencyState.UNLOADING
            gone = ResidencyState.CACHED if unloading else ResidencyState.FAILED
            self._released(record, gone, "child_exited")
            return f"child {record.pid} gone; {gone.value}"
        if liveness is Liveness.UNPROVEN:
            self._fence(record, "identity_unproven")
            return f"pid {record.pid} alive but unproven; fenced, never signalled"
        assert adapter is not None and record.identity is not None and record.port is not None
        if record.state is ResidencyState.UNLOADING:
            self._stop_and_release(record, "interrupted unload finished")
            return f"child {record.pid} stopped (interrupted unload)"
        if record.state is ResidencyState.WARMING:
            if adapter.model_ready(record.model_id, record.port):
                self._set(
                    record,
                    state=ResidencyState.READY,
                    loaded_at=self.clock(),
                    message="adopted after restart",
                )
                return f"adopted ready child {record.pid} (interrupted warm)"
            self._stop_and_release(record, "interrupted_by_restart", ResidencyState.FAILED)
            return f"stopped unready child {record.pid} (interrupted warm)"
        self._set(record, fenced=False, message="adopted after restart")
        return f"adopted child {record.pid} on port {record.port} ({record.state.value})"

    # --- LOAD -------------------------------------------------------------------------

    def load(self, req: LifecycleRequest) -> Outcome:
        self.disk = self.cache.disk()  # refreshed before every load
        free_bytes = self.disk[0]
        if req.artifact_size_mb is not None and free_bytes < req.artifact_size_mb * MIB:
            raise ActionFailure("insufficient_disk", f"{free_bytes // MIB} MB free")
        with self._lock:
            existing = self.store.residency(req.model_id)
            placeholder = existing is None or (
                not existing.has_process and existing.state is not ResidencyState.CACHED
            )
            if placeholder:
                loading = ResidencyRecord(
                    req.model_id, ResidencyState.LOADING, artifact_sha256=req.artifact_sha256
                )
                self.store.put_residency(loading)
        try:
            acquired = self.cache.acquire(
                req.model_id,
                sha256=req.artifact_sha256,
                source=req.artifact_source,
                size_ceiling_mb=req.artifact_size_mb,
                now=self.clock(),
                mirrors=req.artifact_mirrors,
                provenance="predictive" if req.prefetch else "demand",
            )
        except (GridctlError, OSError) as exc:
            # a local I/O error (the artifact disk filled up mid-transfer) fails the load
            # like any other: the placeholder row must not stay ``loading`` for ever
            if placeholder:
                with self._lock:
                    row = self.store.residency(req.model_id)
                    if row is not None and not row.has_process:
                        self._set(row, state=ResidencyState.FAILED, message=str(exc)[:512])
            raise ActionFailure(_load_failure_reason(exc), str(exc)) from exc
        finally:
            self.disk = self.cache.disk()
        with self._lock:
            row = self.store.residency(req.model_id)
            if row is not None and not row.has_process:
                self._set(
                    row,
                    state=ResidencyState.CACHED,
                    memory_mb=0,
                    artifact_sha256=acquired.entry.sha256,
                    message="cached",
                )
        verb = "fetched" if acquired.fetched else "verified"
        return Outcome(f"{verb} {acquired.entry.sha256[:12]}", artifact_fetched=acquired.fetched)

    # --- WARM -------------------------------------------------------------------------

    def warm(
        self, req: LifecycleRequest, *, cancelled: Callable[[], bool] = lambda: False
    ) -> Outcome:
        adapter = self._adapter_for(req)  # an unknown runtime is refused before anything
        if req.split is not None and (
            adapter.name != LLAMA_CPP or isinstance(adapter, SharedEngineAdapter)
        ):
            raise ActionFailure(
                "split_unsupported_runtime", f"{adapter.name} cannot coordinate a split here"
            )
        with self._lock:
            existing = self.store.residency(req.model_id)
            if existing is not None and existing.has_process:
                return self._warm_existing(existing, req)
            self._check_memory(req)
        entry = self.cache.verified(req.model_id, req.artifact_sha256)  # hashes the exact file
        if entry is None:
            raise ActionFailure("artifact_not_cached", f"{req.model_id} has no verified artifact")
        try:
            artifact = adapter.prepare_artifact(req.model_id, Path(entry.path))
        except RuntimeFailure as exc:
            raise ActionFailure(exc.reason, str(exc)) from exc
        with self._lock:
            self._check_memory(req)
            port = self._allocate_port(adapter)
            options = self._split_options(req)  # the forwarders listen before the engine starts
            record = ResidencyRecord(
                req.model_id,
                ResidencyState.WARMING,
                memory_mb=req.memory_mb,
                artifact_sha256=entry.sha256,
                runtime=adapter.name,
                model_path=entry.path,
                port=port,
                message="warming",
                split_term=req.split_term,
            )
            journal = _Journal(self.store, record)
            try:
                self.store.put_residency(record)
                identity = adapter.start(req.model_id, artifact, port, journal, options)
            except BaseException as exc:
                self._released(journal.record, ResidencyState.FAILED, f"spawn failed: {exc}"[:512])
                if isinstance(exc, RuntimeFailure):
                    raise ActionFailure(exc.reason, str(exc)) from exc
                raise
            # the port the adapter journalled: a shared engine serves on its own
            port = journal.record.port if journal.record.port is not None else port
        # a mark in the node's log between the verified artifact and the engine's readiness
        log.info("engine for %s started: pid %d, port %d", req.model_id, identity.pid, port)
        try:
            waited = adapter.wait_ready(req.model_id, identity, port, cancelled=cancelled)
        except RuntimeFailure as exc:
            with self._lock:
                row = self.store.residency(req.model_id) or journal.record
                self._stop_and_release(row, exc.reason, ResidencyState.FAILED)
            raise ActionFailure(exc.reason, str(exc)) from exc
        with self._lock:
            row = self.store.residency(req.model_id) or journal.record
            self._set(row, state=ResidencyState.READY, loaded_at=self.clock(), message="ready")
        self.cache.mark_used(req.model_id, self.clock())  # a used entry is never evicted
        split = "" if req.split is None else f" (split of {len(req.split.serve.stages)} stages)"
        return Outcome(f"ready on port {port} after {waited:.1f}s{split}")

    def _split_options(self, req: LifecycleRequest) -> LaunchOptions:
        """The warm's launch options; a split's forwarders are opened for its engine."""
        options = req.launch_options
        if req.split is None:
            return options
        try:
            rpc_servers = self.links.open(req.model_id, req.split)
        except (OSError, RuntimeError, TimeoutError) as exc:
            raise ActionFailure("forwarder_failed", f"split forwarders: {exc}") from exc
        return replace(options, rpc_servers=rpc_servers, tensor_split=req.split.tensor_split)

    def _warm_existing(self, existing: ResidencyRecord, req: LifecycleRequest) -> Outcome:
        if existing.fenced:
            raise ActionFailure("identity_unproven", f"pid {existing.pid} cannot be proven")
        if existing.split_term != req.split_term:
            serves = "a whole replica" if existing.split_term is None else "another split term"
            raise ActionFailure("residency_busy", f"{req.model_id} runs {serves}")
        same_artifact = req.artifact_sha256 in (None, existing.artifact_sha256)
        ready = existing.state is ResidencyState.READY and same_artifact
        if ready and self._liveness(existing) is Liveness.PROVEN:
            return Outcome(f"already ready on port {existing.port}")
        raise ActionFailure("residency_busy", f"{req.model_id} is {existing.state.value}")

    def _check_memory(self, req: LifecycleRequest) -> None:
        free = self.free_memory_mb()
        if req.memory_mb > free:
            raise ActionFailure("insufficient_free_memory", f"{req.memory_mb} MB > {free} MB free")
        held = sum(
            r.memory_mb
            for r in self.store.residencies()
            if r.has_process and r.model_id != req.model_id
        )
        usable = self.limits.capacity_mb - self.limits.reserved_mb
        if held + req.memory_mb > usable:
            raise ActionFailure(
                "capacity_exceeded", f"{held} + {req.memory_mb} MB > {usable} MB usable"
            )

    # --- DRAIN ------------------------------------------------------------------------

    def drain(self, req: LifecycleRequest) -> Outcome:
        with self._lock:
            record = self.store.residency(req.model_id)
            if record is None or not record.has_process:
                raise ActionFailure("not_resident", f"{req.model_id} has no child")
            if record.state is ResidencyState.DRAINING:
                return Outcome("already draining")
            if record.state is not ResidencyState.READY:
                raise ActionFailure("not_ready", f"{req.model_id} is {record.state.value}")
            self._set(record, state=ResidencyState.DRAINING, message="draining")
        return Outcome("draining: no new admissions")

    # --- UNLOAD -----------------------------------------------------------------------

    def unload(self, req: LifecycleRequest) -> Outcome:
        with self._lock:
            record = self.store.residency(req.model_id)
            if record is None or not record.has_process:
                if record is not None and record.state is not ResidencyState.CACHED:
                    self._released(record, ResidencyState.CACHED, "unloaded")
                return Outcome("no child; nothing to unload")
            if record.fenced:
                raise ActionFailure("identity_unproven", f"pid {record.pid} cannot be proven")
            if record.state is ResidencyState.READY and not req.force:
                raise ActionFailure("not_drained", "drain before unload")
            liveness = self._liveness(record)
            if liveness is Liveness.DEAD:
                self._released(record, ResidencyState.CACHED, "child already gone")
                return Outcome("child already gone")
            if liveness is Liveness.UNPROVEN:
                self._fence(record, "identity_unproven")
                raise ActionFailure("identity_unproven", f"pid {record.pid} cannot be proven")
        assert record.port is not None
        if not req.force and record.state is not ResidencyState.FAILED:
            adapter = self._adapter_of(record)
            assert adapter is not None  # an unknown runtime's child was proven dead or fenced
            seen = residency_wait_idle(
                adapter, record.model_id, record.port, timeout=self.unload_idle_timeout
            )
            if seen is None:
                raise ActionFailure("activity_unknown", "authenticated /slots probe failed")
            if seen.processing:
                raise ActionFailure("requests_in_flight", f"{seen.processing} slot(s) busy")
        with self._lock:
            record = self.store.residency(req.model_id) or record
            if not record.has_process:
                return Outcome("child already gone")
            record = self._set(record, state=ResidencyState.UNLOADING, message="unloading")
        gone = self._stop_outside_lock(record)
        if not gone:
            raise ActionFailure("stop_failed", f"pid {record.pid} did not stop or is unproven")
        return Outcome("unloaded" + (" (forced)" if req.force else ""))

    def _stop_outside_lock(self, record: ResidencyRecord) -> bool:
        """Stop a child without blocking heartbeats, then commit the result under the lock."""
        adapter = self._adapter_of(record)
        gone = (
            record.identity is not None
            and adapter is not None
            and stop_residency(
                adapter, record.model_id, record.identity, record.port, grace=self.stop_grace
            )
        )
        with self._lock:
            current = self.store.residency(record.model_id) or record
            if current.pid != record.pid:
                return gone
            if gone:
                self._released(current, ResidencyState.CACHED, "unloaded")
            else:
                self._fence(current, "stop_failed: identity unproven or process survived")
        return gone

    def _stop_and_release(
        self,
        record: ResidencyRecord,
        message: str,
        state: ResidencyState = ResidencyState.CACHED,
    ) -> None:
        adapter = self._adapter_of(record)
        if record.identity is None or adapter is None:
            if self._liveness(record) is Liveness.DEAD:
                self._released(record, state, message)
            else:
                self._fence(record, "identity_unproven")
            return
        if stop_residency(
            adapter, record.model_id, record.identity, record.port, grace=self.stop_grace
        ):
            self._released(record, state, message)
        else:
            self._fence(record, "stop_failed: identity unproven or process survived")

    # --- EVICT ------------------------------------------------------------------------

    def evict(self, req: LifecycleRequest) -> Outcome:
        """Delete an unused predictive cache entry, fenced by its exact digest."""
        with self._lock:
            record = self.store.residency(req.model_id)
            if record is not None and record.has_process:
                raise ActionFailure("residency_active", f"{req.model_id} still has a child")
            entry = self.store.cached_artifact(req.model_id)
            if entry is not None:
                if req.artifact_sha256 is not None and entry.sha256 != req.artifact_sha256.lower():
                    raise ActionFailure("artifact_revision_changed", f"cached {entry.sha256[:12]}")
                if entry.provenance != "predictive" or entry.last_used_at is not None:
                    used = "used" if entry.last_used_at is not None else entry.provenance
                    raise ActionFailure("evict_refused", f"{req.model_id}: {used} entry")
            in_use = {
                r.artifact_sha256
                for r in self.store.residencies()
                if r.has_process and r.artifact_sha256
            }
            removed = self.cache.evict(req.model_id, in_use={s for s in in_use if s})
            if record is not None:
                self.store.delete_residency(req.model_id)
            self.disk = self.cache.disk()
        return Outcome("evicted" if removed else "not cached")

    # --- periodic health --------------------------------------------------------------

    def refresh(self) -> None:
        """Detect dead and unprovable children; probe health and activity of live ones.

        Probes run outside the lock; results are committed only if the record
        still describes the same child.
        """
        probes: list[tuple[ResidencyRecord, bool, int | None]] = []
        with self._lock:
            snapshot = self.store.residencies()
            for record in snapshot:
                if not record.has_process or record.state in (
                    ResidencyState.WARMING,
                    ResidencyState.UNLOADING,
                    ResidencyState.LOADING,
                ):
                    continue
                liveness = self._liveness(record)
                if liveness is Liveness.DEAD:
                    self._released(record, ResidencyState.FAILED, "child_exited")
                elif liveness is Liveness.UNPROVEN and not record.fenced:
                    self._fence(record, "identity_unproven")
        queued: dict[str, int] = {}
        for record in self.store.residencies():
            adapter = self._adapter_of(record)
            if record.state in _PROCESS_STATES and record.port is not None and not record.fenced:
                if adapter is None:
                    continue  # its engine kind cannot be probed here; the liveness pass fenced it
                healthy = residency_healthy(adapter, record.model_id, record.port)
                seen = (
                    residency_activity(adapter, record.model_id, record.port) if healthy else None
                )
                probes.append((record, healthy, None if seen is None else seen.processing))
                if seen is not None and seen.queued:
                    queued[record.model_id] = seen.queued
        self.queued = queued
        now = self.clock()
        with self._lock:
            for before, healthy, busy in probes:
                current = self.store.residency(before.model_id)
                if current is None or current.pid != before.pid or current.state != before.state:
                    continue
                failures = 0 if healthy else self._health_failures.get(before.model_id, 0) + 1
                self._health_failures[before.model_id] = failures
                if failures >= HEALTH_FAILURES_BEFORE_FAILED:
                    self.links.close(current.model_id)  # a failed coordinator reaches no stage
                    self._set(current, state=ResidencyState.FAILED, message="health_check_failed")
                    continue
                changes: dict[str, object] = {}
                if busy is not None and busy != current.active_requests:
                    changes["active_requests"] = busy
                if busy:
                    changes["last_used_at"] = now
                if changes:
                    self._set(current, **changes)

    def healthy_now(self, record: ResidencyRecord) -> bool:
        """Whether a child passed its most recent health probe (advertise only those)."""
        return self._health_failures.get(record.model_id, 0) == 0

    # --- shutdown ---------------------------------------------------------------------

    def shutdown(self, *, idle_timeout: float) -> list[str]:
        """Drain every proven child, wait for idle (bounded), then stop it."""
        notes: list[str] = []
        with self._lock:
            targets = [r for r in self.store.residencies() if r.has_process and not r.fenced]
            for record in targets:
                if record.state is ResidencyState.READY:
                    self._set(record, state=ResidencyState.DRAINING, message="node stopping")
        for record in targets:
            adapter = self._adapter_of(record)
            if record.port is not None and adapter is not None:
                residency_wait_idle(adapter, record.model_id, record.port, timeout=idle_timeout)
            with self._lock:
                current = self.store.residency(record.model_id)
                if current is None or current.pid != record.pid:
                    continue
                current = self._set(current, state=ResidencyState.UNLOADING, message="node stop")
            stopped = self._stop_outside_lock(current)
            notes.append(f"{record.model_id}: pid {record.pid} {'stopped' if stopped else 'kept'}")
        self.links.close_all()  # forwarders never outlive the node process's care
        return notes
