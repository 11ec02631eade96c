"""A stage host: its RPC stage server runs exactly while it holds an accepted split claim.

This is where the pure fence (``gridctl.split`` via ``stageclaims``) meets processes.
Offering a claim judges it; on acceptance the claim is persisted first, then the
stage servers of the claims it fenced are stopped, then ``ggml-rpc-server`` starts on
loopback and a ``StageTunnel`` opens on the advertised address, accepting only the
claim's coordinator host. A release, an expired lease or a newer term stops both.
Nothing starts a stage server except an accepted claim.

Each started stage server's process identity (pid, birth time, executable, argv) is
recorded in the node state store, so a node that was killed finds the stage servers it
left behind and stops them on ``resume`` (only when provably its own) before starting
what its persisted claims still authorise.

Time is an argument (``now_ms``) as in the rules; the caller owns the clock. The
node's executor offers and releases claims while its agent expires leases, so every
public method holds one lock.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from gridctl.domain.fleet import ObservedStage
from gridctl.node.joining import NodeIdentity
from gridctl.node.processes import observe_launched_identity, stop_proven
from gridctl.node.records import ProcessIdentity
from gridctl.node.rpctunnel import StageTunnel, TlsIdentity
from gridctl.node.stageclaims import ClaimOutcome, StageClaim, StageClaimBook
from gridctl.node.stageservers import RunningStageServer, start_stage_server, stop_process_tree
from gridctl.node.statestore import NodeStateStore
from gridctl.split import ClaimKey, StopDecision, StopRequest

log = logging.getLogger("gridctl.node")


@dataclass(frozen=True)
class RunningStage:
    """What serves one accepted claim: the loopback stage server and its TLS tunnel."""

    stage_claim: StageClaim
    server: RunningStageServer
    tunnel: StageTunnel

    @property
    def advertised(self) -> tuple[str, int]:
        """Where the coordinator reaches this stage: the tunnel, never the server."""
        return self.tunnel.address

    def observed(self) -> ObservedStage:
        """This stage as the heartbeat reports it (``split_stages``)."""
        claim, stage = self.stage_claim.claim, self.stage_claim.stage
        host, port = self.advertised
        return ObservedStage(
            model_id=claim.model_id,
            coordinator_id=claim.coordinator_id,
            coordinator_term=claim.coordinator_term,
            stage_index=stage.index,
            stage_count=stage.count,
            layer_start=stage.layer_start,
            layer_end=stage.layer_end,
            endpoint=f"{host}:{port}",
        )


@dataclass(frozen=True)
class StageHostSettings:
    """How this host runs stages: binary, identity, advertised address, logs, threads."""

    stage_server: Path
    identity: TlsIdentity
    advertise_host: str
    log_dir: Path
    tunnel_port: int = 0  # 0: the kernel picks a free port per stage
    threads: int = 1


def node_tls_identity(state_dir: Path) -> TlsIdentity:
    """The identity a joined node holds: its engine certificate, key and trust bundle."""
    joined = NodeIdentity(state_dir)
    return TlsIdentity(joined.cert_file, joined.key_file, joined.ca_file)


def _process_meta_key(key: ClaimKey) -> str:
    return f"stage_server:{key.model_id}|{key.package_ref}|{key.manifest_sha256}"


class StageHost:
    """Accepted claims (persisted) and the stage servers and tunnels that serve them."""

    def __init__(self, store: NodeStateStore, settings: StageHostSettings) -> None:
        self.book = StageClaimBook(store)
        self._store = store
        self.settings = settings
        self._running: dict[ClaimKey, RunningStage] = {}
        self._lock = threading.RLock()

    def running(self) -> dict[ClaimKey, RunningStage]:
        with self._lock:
            return dict(self._running)

    def observed(self) -> tuple[ObservedStage, ...]:
        """Every stage running now, as the heartbeat reports them."""
        return tuple(running.observed() for running in self.running().values())

    def resume(self, now_ms: int) -> None:
        """After a restart: stop stage servers a killed node left, end expired leases,
        then start every claim still serving."""
        with self._lock:
            for held in self.book.held():
                left_behind = self._recorded_process(held.stage_claim.key)
                if left_behind is not None and held.stage_claim.key not in self._running:
                    stop_proven(left_behind)
                    self._record_process(held.stage_claim.key, None)
            self.book.expire(now_ms)
            for stage_claim in self.book.serving():
                if stage_claim.key not in self._running:
                    self._start(stage_claim)

    def offer(self, stage_claim: StageClaim, now_ms: int) -> ClaimOutcome:
        """Judge a coordinator claim; stop what it fences and start what it authorises."""
        with self._lock:
            outcome = self.book.offer(stage_claim, now_ms)
            for ended in outcome.ended:
                self._stop(ended.key)
            if outcome.started is not None:
                self._stop(outcome.started.key)  # a released epoch claimed again starts afresh
                self._start(outcome.started)
            return outcome

    def release(self, stop: StopRequest, now_ms: int) -> StopDecision:
        """A coordinator's stop: stale terms are refused, an accepted one stops the stage."""
        with self._lock:
            decision, ended = self.book.release(stop, now_ms)
            if ended is not None:
                self._stop(ended.key)
            return decision

    def expire(self, now_ms: int) -> tuple[StageClaim, ...]:
        """Stop every stage whose claim's lease ended before ``now_ms``."""
        with self._lock:
            ended = self.book.expire(now_ms)
            for stage_claim in ended:
                self._stop(stage_claim.key)
            return ended

    def reap(self) -> tuple[StageClaim, ...]:
        """Stop serving every stage whose stage server exited (killed, crashed): close
        its tunnel and stop reporting it. Its claim stays accepted, so a late command of
        an older term is still refused; the controller, no longer seeing the stage,
        claims the split afresh under a newer term, which starts a new stage server."""
        with self._lock:
            dead = [
                running.stage_claim
                for running in self._running.values()
                if running.server.process.poll() is not None
            ]
            for stage_claim in dead:
                claim = stage_claim.claim
                log.warning(
                    "the stage server of %s (term %d) exited %s; the stage is no longer served",
                    claim.model_id,
                    claim.coordinator_term,
                    self._running[stage_claim.key].server.process.returncode,
                )
                self._stop(stage_claim.key)
            return tuple(dead)

    def close(self) -> None:
        """Stop every stage server and tunnel (the claims stay persisted)."""
        with self._lock:
            for key in list(self._running):
                self._stop(key)

    def _start(self, stage_claim: StageClaim) -> RunningStage:
        settings = self.settings
        claim = stage_claim.claim
        log_name = f"stage-{claim.model_id}-{claim.coordinator_term}.log".replace("/", "_")
        server = start_stage_server(
            settings.stage_server, settings.log_dir / log_name, threads=settings.threads
        )
        try:
            tunnel = StageTunnel(
                settings.identity,
                (settings.advertise_host, settings.tunnel_port),
                server.port,
                claim.coordinator_id,
            )
        except BaseException:
            stop_process_tree(server.process)
            raise
        running = RunningStage(stage_claim, server, tunnel)
        self._running[stage_claim.key] = running
        self._record_process(stage_claim.key, observe_launched_identity(server.pid))
        return running

    def _stop(self, key: ClaimKey) -> None:
        running = self._running.pop(key, None)
        if running is None:
            return
        try:
            running.tunnel.close()  # first: no new connection reaches a dying server
        finally:
            stop_process_tree(running.server.process)
            self._record_process(key, None)

    def _record_process(self, key: ClaimKey, identity: ProcessIdentity | None) -> None:
        text = "" if identity is None else json.dumps(asdict(identity), sort_keys=True)
        self._store.set_meta(_process_meta_key(key), text)

    def _recorded_process(self, key: ClaimKey) -> ProcessIdentity | None:
        text = self._store.get_meta(_process_meta_key(key))
        if not text:
            return None
        data = json.loads(text)
        return ProcessIdentity(
            pid=int(data["pid"]),
            create_time=float(data["create_time"]),
            executable=str(data["executable"]),
            cmdline=tuple(str(part) for part in data["cmdline"]),
        )
