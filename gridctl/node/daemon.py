"""The node daemon process: assembly, single-instance lock, identity record, clean stop.

``run_daemon`` wires the store, artifact cache, runtime adapter, actuator,
intake, executor and agent for one state directory, adopts or fences surviving
children, and runs the agent loop until SIGTERM/SIGINT. Stopping drains: the
host reports ``draining``, queued work is cancelled, every proven child gets a
bounded wait for idle slots and is stopped, and a last heartbeat reports it.

The daemon publishes ``daemon.json`` (pid, process birth time, executable, exact
argv and a unique instance id) so ``gridctl node stop`` can prove whom it is
about to signal. A ``flock`` on ``daemon.lock`` keeps two daemons off one state
directory.
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType

import httpx
import psutil

from gridctl import logs
from gridctl.credentials import read_node_credential
from gridctl.errors import PermanentError
from gridctl.node.actuator import HostActuator, MemoryLimits, PortRange
from gridctl.node.agent import NodeAgent
from gridctl.node.artifacts import ArtifactCache
from gridctl.node.enginekey import ensure_engine_key
from gridctl.node.executor import CommandExecutor
from gridctl.node.gpus import probe_gpus
from gridctl.node.idle_input import InputIdle
from gridctl.node.idle_logind import LogindIdle
from gridctl.node.intake import CommandIntake
from gridctl.node.joining import NodeIdentity
from gridctl.node.mirroring import PeerMirror
from gridctl.node.network_state import with_network_rule
from gridctl.node.processes import observe_identity, stop_proven
from gridctl.node.protecting import ProtectionLoop
from gridctl.node.protection import ProtectionPolicy
from gridctl.node.qualification import qualified_runtimes
from gridctl.node.records import ProcessIdentity
from gridctl.node.reports import HostFacts
from gridctl.node.runtimes.llamacpp import (
    EngineNetwork,
    EngineSettings,
    LlamaCppRuntime,
    default_binary,
)
from gridctl.node.runtimes.llamacpp_router import LlamaCppRouterRuntime
from gridctl.node.runtimes.stage_server import default_stage_server, stage_server_beside
from gridctl.node.runtimes.vllm_config import configured_runtime
from gridctl.node.sensors import IdleSources, read_sensors
from gridctl.node.stagehost import StageHost, StageHostSettings, node_tls_identity
from gridctl.node.statestore import NodeStateStore
from gridctl.node.stoprequest import StopRequest
from gridctl.wallclock import wall_clock

log = logging.getLogger("gridctl.node")

DATABASE = "node.sqlite3"
DAEMON_RECORD = "daemon.json"
LOCK_FILE = "daemon.lock"
ARTIFACTS = "artifacts"


@dataclass(frozen=True)
class NodeConfig:
    """Everything ``gridctl node start`` was told."""

    host_id: str
    controller_url: str
    token_file: Path
    state_dir: Path
    capacity_mb: int | None = None  # None = the machine's physical memory
    reserved_mb: int = 0
    failure_domain: str = "default"
    tags: tuple[str, ...] = ()
    port_range: PortRange = field(default_factory=lambda: PortRange(23000, 23099))
    external_mb: int | None = None
    heartbeat_seconds: float = 5.0
    engine: EngineSettings = field(default_factory=EngineSettings)
    stop_idle_timeout: float = 30.0
    unload_idle_timeout: float = 30.0
    binary: Path | None = None
    artifact_dir: Path | None = None  # a shared cache; default: private <state_dir>/artifacts
    artifact_listen: str | None = None  # ADDR:PORT of the peer mirror; None = no mirror
    artifact_peer_ca: Path | None = None  # verifies https peers (the fleet CA)
    policy: ProtectionPolicy = field(default_factory=ProtectionPolicy)  # NodePolicy thresholds
    advertise: str | None = None  # engines bind this address and serve TLS (a joined node)
    # the vLLM virtualenv's interpreter; None: $GRIDCTL_VLLM_PYTHON, else no vllm runtime
    vllm_python: Path | None = None

    def facts(self) -> HostFacts:
        capacity = self.capacity_mb
        if capacity is None:
            capacity = int(psutil.virtual_memory().total // (1024 * 1024))
        return HostFacts(
            host_id=self.host_id,
            capacity_mb=capacity,
            reserved_mb=self.reserved_mb,
            failure_domain=self.failure_domain,
            tags=self.tags,
            external_mb=self.external_mb,
            throttle_fraction=self.policy.throttle_fraction,
            gpus=probe_gpus(),
            advertise=self.advertise,
            qualified_runtimes=qualified_runtimes(self.state_dir),
        )


@dataclass
class NodeParts:
    store: NodeStateStore
    actuator: HostActuator
    executor: CommandExecutor
    intake: CommandIntake
    agent: NodeAgent
    protection: ProtectionLoop
    idle: IdleSources | None = None  # started with the node, closed at shutdown
    stages: StageHost | None = None  # a split's stage host, when this node can be one


def open_store(state_dir: Path) -> NodeStateStore:
    state_dir.mkdir(parents=True, exist_ok=True)
    state_dir.chmod(0o700)
    return NodeStateStore(state_dir / DATABASE)


def build_node(
    config: NodeConfig, *, instance_id: str = "", transport: httpx.BaseTransport | None = None
) -> NodeParts:
    """Assemble a node from its configuration (no thread started, nothing recovered)."""
    store = open_store(config.state_dir)
    store.bind_host(config.host_id)
    clock = wall_clock()
    api_key, key_file = ensure_engine_key(store, config.state_dir)
    facts = config.facts()
    identity = NodeIdentity(config.state_dir)
    joined = identity.exists()
    network = EngineNetwork()
    if config.advertise is not None:
        network = EngineNetwork(
            advertise=config.advertise,
            cert_file=identity.cert_file if identity.cert_file.is_file() else None,
            key_file=identity.key_file if identity.key_file.is_file() else None,
            ca_file=identity.ca_file if identity.ca_file.is_file() else None,
        )
    binary = config.binary or default_binary()
    runtime = LlamaCppRuntime(
        binary=binary,
        key_file=key_file,
        api_key=api_key,
        log_dir=config.state_dir / "logs",
        settings=config.engine,
        network=network,
    )
    # the multi-model engine: no process until a warm names its runtime
    router = LlamaCppRouterRuntime(
        binary=binary,
        key_file=key_file,
        api_key=api_key,
        log_dir=config.state_dir / "logs",
        settings=config.engine,
        network=network,
        catalog=lambda: {e.model_id: Path(e.path) for e in store.cached_artifacts()},
    )
    # vLLM, an optional engine: only when its interpreter is named
    vllm = configured_runtime(
        config.state_dir,
        config.engine,
        key_file=key_file,
        api_key=api_key,
        network=network,
        python=config.vllm_python,
    )
    cache = ArtifactCache(
        config.artifact_dir or config.state_dir / ARTIFACTS,
        store,
        shared=config.artifact_dir is not None,
        peer_ca_file=config.artifact_peer_ca
        or (identity.ca_file if identity.ca_file.is_file() else None),
    )
    actuator = HostActuator(
        store=store,
        cache=cache,
        runtime=runtime,
        other_runtimes=[router, *([vllm] if vllm is not None else [])],
        ports=config.port_range,
        limits=MemoryLimits(facts.capacity_mb, facts.reserved_mb),
        unload_idle_timeout=config.unload_idle_timeout,
        clock=clock,
    )
    facts = replace(facts, runtimes=actuator.runtimes.names)  # what this node can start
    agent_ref: list[NodeAgent] = []
    stages = stage_host(config, store, joined)
    executor = CommandExecutor(
        actuator, lambda: agent_ref[0].host_state(), clock=clock, stages=stages
    )
    intake = CommandIntake(store, config.host_id, clock=clock)
    token_file = config.token_file
    read_node_credential(token_file)  # fail fast on a missing or group-readable file
    linux = sys.platform.startswith("linux")
    idle_fallback = IdleSources(InputIdle(), LogindIdle()) if linux else None
    protection = ProtectionLoop(
        with_network_rule(config.policy, config.controller_url),
        read=lambda: read_sensors(
            config.host_id,
            cache.root,
            controller_silent_seconds=_silence(agent_ref),
            state_dir=config.state_dir,
            controller_url=config.controller_url,
            idle_fallback=idle_fallback,
        ),
        busy=lambda: any(r.active_requests > 0 for r in store.residencies()),
        store=store,
        clock=clock,
    )
    agent = NodeAgent(
        facts=facts,
        actuator=actuator,
        executor=executor,
        intake=intake,
        controller_url=config.controller_url,
        token=lambda: read_node_credential(token_file),
        engine_api_key=api_key,
        heartbeat_seconds=config.heartbeat_seconds,
        transport=transport,
        instance_id=instance_id,
        protection=protection,
        identity=identity if joined else None,
        verify=identity.trust_context() if joined else True,
        clock=clock,
    )
    agent_ref.append(agent)
    if stages is not None:
        agent.housekeeping.append(lambda: stages.expire(int(clock() * 1000)))
        agent.housekeeping.append(stages.reap)  # a stage server that died is not served
    return NodeParts(store, actuator, executor, intake, agent, protection, idle_fallback, stages)


def stage_host(config: NodeConfig, store: NodeStateStore, joined: bool) -> StageHost | None:
    """The split stage host, when this node can serve a stage: an RPC-enabled engine
    build, a fleet identity (the tunnel's mutual TLS) and an advertised address."""
    if config.advertise is None or not joined:
        return None
    engine = config.binary
    binary = stage_server_beside(engine) if engine is not None else default_stage_server()
    if binary is None:
        return None
    settings = StageHostSettings(
        stage_server=binary,
        identity=node_tls_identity(config.state_dir),
        advertise_host=config.advertise,
        log_dir=config.state_dir / "logs",
    )
    return StageHost(store, settings)


def _silence(agent_ref: list[NodeAgent]) -> float | None:
    """Seconds since the last successful heartbeat (None before the first one)."""
    last = agent_ref[0].status.get("last_heartbeat_at") if agent_ref else None
    return None if not isinstance(last, int | float) else max(0.0, time.time() - last)


@contextmanager
def instance_lock(state_dir: Path) -> Iterator[None]:
    """Hold the state directory's daemon lock, or fail if another daemon holds it."""
    state_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise PermanentError(f"another node daemon is running on {state_dir}") from exc
        yield
    finally:
        os.close(fd)


def write_daemon_record(state_dir: Path, instance_id: str) -> ProcessIdentity:
    identity = observe_identity(os.getpid())
    if identity is None:  # pragma: no cover - we are alive by definition
        raise PermanentError("cannot read this process's identity")
    record = {
        "pid": identity.pid,
        "create_time": identity.create_time,
        "executable": identity.executable,
        "cmdline": list(identity.cmdline),
        "instance_id": instance_id,
        "started_at": time.time(),
    }
    path = state_dir / DAEMON_RECORD
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=2), encoding="utf-8")
    tmp.chmod(0o600)
    os.replace(tmp, path)
    return identity


def read_daemon_record(state_dir: Path) -> dict[str, object] | None:
    try:
        data = json.loads((state_dir / DAEMON_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def daemon_identity(record: dict[str, object]) -> ProcessIdentity | None:
    """The identity a daemon record claims, or None if the record is not usable proof."""
    try:
        cmdline = record["cmdline"]
        instance = str(record["instance_id"])
        if not isinstance(cmdline, list) or not instance:
            return None  # a legacy or ambiguous record cannot prove anything
        if "--instance-id" in cmdline and instance not in cmdline:
            return None  # the argv names another instance
        return ProcessIdentity(
            pid=int(record["pid"]),  # type: ignore[call-overload]
            create_time=float(record["create_time"]),  # type: ignore[arg-type]
            executable=str(record["executable"]),
            cmdline=tuple(str(a) for a in cmdline),
        )
    except (KeyError, TypeError, ValueError):
        return None


def stop_orphaned_engines(parts: NodeParts) -> list[str]:
    """Stop engine children of this state directory that no residency record names.

    A child is this node's when it reads this state directory's engine key file (the
    directory is the daemon's own, mode 0700). If the node database was lost or
    quarantined, no record proves the child's model path and birth any more: it can
    neither be adopted nor fenced, and left alone it would hold memory and a port
    that nothing reports, beside the fresh engine the controller then starts. It is
    stopped, by the identity observed now.
    """
    key_file = parts.actuator.runtime.key_file.resolve()
    known = {r.pid for r in parts.store.residencies() if r.pid is not None}
    notes = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info.get("cmdline") or []
        if proc.pid in known or "--api-key-file" not in cmd[:-1]:
            continue
        if Path(cmd[cmd.index("--api-key-file") + 1]).resolve() != key_file:
            continue
        identity = observe_identity(proc.pid)
        if identity is None:
            continue
        alias = cmd[cmd.index("-a") + 1] if "-a" in cmd[:-1] else "?"
        stopped = stop_proven(identity)
        notes.append(
            f"orphaned engine pid {proc.pid} ({alias}) has no record: "
            + ("stopped" if stopped else "could not be stopped")
        )
    return notes


def run_daemon(config: NodeConfig, *, instance_id: str) -> int:
    """Run the node in this process until SIGTERM/SIGINT; returns the exit code."""
    logs.bind(host=config.host_id)  # every line of this daemon names its host
    with instance_lock(config.state_dir):
        parts = build_node(config, instance_id=instance_id)
        for warning in parts.store.warnings:
            log.warning("%s", warning)
        for note in parts.actuator.recover():
            log.info("recover %s", note)
        for note in stop_orphaned_engines(parts):
            log.warning("recover %s", note)
        if parts.stages is not None:
            parts.stages.resume(int(parts.agent.clock() * 1000))  # claims persisted before a crash
        interrupted = parts.executor.recover()
        if interrupted:
            log.warning("%d interrupted action(s) marked failed", interrupted)
        write_daemon_record(config.state_dir, instance_id)
        # set from the signal handler: it must not take a lock (``stoprequest``)
        stop = StopRequest()

        def on_signal(signum: int, _frame: FrameType | None) -> None:
            stop.set(signum)

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        if parts.idle is not None:
            parts.idle.start()
        parts.protection.sample()  # report a protective state from the first heartbeat
        parts.protection.start()
        parts.executor.start()
        mirror = start_mirror(config, parts) if config.artifact_listen else None
        log.info("node %s started (instance %s)", config.host_id, instance_id)
        try:
            parts.agent.run(stop)
            log.info("signal %s: stopping", stop.signum)
        finally:
            if mirror is not None:
                mirror.stop()
            shutdown(parts, config)
            (config.state_dir / DAEMON_RECORD).unlink(missing_ok=True)
    return 0


def start_mirror(config: NodeConfig, parts: NodeParts) -> PeerMirror:
    """Serve the cache's verified objects to peers; the agent then advertises the URL."""
    assert config.artifact_listen is not None
    identity = NodeIdentity(config.state_dir)
    host = config.artifact_listen.rpartition(":")[0].strip("[]")
    # Off loopback the mirror speaks TLS with the node's fleet identity; peers verify it
    # with the fleet CA.
    tls = not _loopback(host) and identity.cert_file.is_file() and identity.key_file.is_file()
    mirror = PeerMirror(
        parts.actuator.cache.objects,
        config.artifact_listen,
        cert_file=identity.cert_file if tls else None,
        key_file=identity.key_file if tls else None,
    )
    parts.agent.artifact_mirror = mirror.start()
    log.info("artifact mirror at %s", parts.agent.artifact_mirror)
    return mirror


def _loopback(host: str) -> bool:
    try:
        return host in ("", "localhost") or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def shutdown(parts: NodeParts, config: NodeConfig) -> None:
    """Drain and stop: no new work, bounded wait for idle children, stop them, report."""
    parts.agent.stopping = True
    parts.protection.stop()
    if parts.idle is not None:
        parts.idle.close()  # the input devices' thread and descriptors, logind's bus
    try:
        parts.agent.heartbeat(request_commands=False)  # advertise draining at once
    except Exception as exc:  # best effort: the controller may be gone
        log.warning("draining heartbeat: %s", exc)
    parts.executor.stop()
    # engines first: a split coordinator here drains while its stages (this host's too)
    # still serve; its forwarders close with it
    for note in parts.actuator.shutdown(idle_timeout=config.stop_idle_timeout):
        log.info("shutdown %s", note)
    if parts.stages is not None:
        parts.stages.close()  # stage servers and tunnels stop; the claims stay persisted
    parts.agent.final_heartbeat()
    parts.agent.close()
    parts.store.close()
