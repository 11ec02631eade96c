"""The protection loop thread of the node daemon, and the ``NodePolicy`` file it obeys.

Every ``sample_seconds`` it reads the sensors, steps the pure
``ProtectionMachine`` and publishes the decision: the agent reports it (combined
with any local override, stricter only) as the host state, advertises the
concurrency multiplier to the router, and the executor cancels constructive
commands while the host admits no new work. The decision is also persisted in
the node's state store so ``gridctl node status`` shows it and a restart starts
from the last protective state rather than from ``accepting``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from gridctl.config.resolving import node_policy_spec
from gridctl.config.schemas import validator
from gridctl.domain.states import HostState
from gridctl.errors import ConfigError, ConfigIssue
from gridctl.node.protection import Decision, ProtectionMachine, ProtectionPolicy, Readings
from gridctl.node.statestore import NodeStateStore

log = logging.getLogger("gridctl.node")

NODE_POLICY_SCHEMA = "node-policy.schema.json"  # KIND_SCHEMAS["NodePolicy"]
PROTECTION_META = "protection"


def load_node_policy(path: Path) -> ProtectionPolicy:
    """Read and validate a ``NodePolicy`` YAML file."""
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        issue = ConfigIssue(str(path), 0, 0, "NodePolicy", message=f"cannot read: {exc}")
        raise ConfigError([issue]) from exc
    issues = [
        ConfigIssue(
            str(path),
            0,
            0,
            "NodePolicy",
            pointer="".join(f"/{p}" for p in error.absolute_path),
            message=error.message[:300],
        )
        for error in validator(NODE_POLICY_SCHEMA).iter_errors(doc)
    ]
    if issues:
        raise ConfigError(issues)
    return ProtectionPolicy.from_spec(node_policy_spec(doc))


class ProtectionLoop:
    """Samples, decides and publishes; ``current()`` is what the agent reports."""

    def __init__(
        self,
        policy: ProtectionPolicy,
        read: Callable[[], Readings],
        busy: Callable[[], bool],
        store: NodeStateStore | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.policy = policy
        self._read, self._busy, self._store, self._clock = read, busy, store, clock
        self.machine = ProtectionMachine(policy)
        self._restore()
        self._lock = threading.Lock()
        self._decision = Decision(
            self.machine.state, self.machine.state, (), (), 1.0, self.machine.since
        )
        self.last_readings: Readings | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def _restore(self) -> None:
        """Start from the last persisted protective state; its cooldown still applies."""
        raw = self._store.get_meta(PROTECTION_META) if self._store is not None else None
        try:
            saved = json.loads(raw) if raw else None
            state = HostState(saved["state"]) if isinstance(saved, dict) else None
        except (ValueError, KeyError, TypeError):
            state = None
        if state is not None and state is not HostState.ACCEPTING:
            now = self._clock()
            self.machine.state, self.machine.since, self.machine.held_at = state, now, now

    def current(self) -> Decision:
        with self._lock:
            return self._decision

    def sample(self) -> Decision:
        """One round: read, decide, publish (also called directly by tests)."""
        readings = self._read()
        decision = self.machine.step(readings, self._clock(), busy=self._busy())
        with self._lock:
            before, self._decision = self._decision, decision
            self.last_readings = readings
        if decision.state is not before.state or decision.reasons != before.reasons:
            log.info(
                "protection: %s -> %s (%s)",
                before.state.value,
                decision.state.value,
                ", ".join(decision.reasons) or "clear",
            )
            self._persist(decision)
        return decision

    def _persist(self, decision: Decision) -> None:
        if self._store is None:
            return
        try:
            self._store.set_meta(PROTECTION_META, json.dumps(decision.describe(), sort_keys=True))
        except Exception as exc:  # persistence is best effort; the decision stands
            log.warning("protection state not persisted: %s", exc)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception:  # a broken sensor must not kill protection
                log.exception("protection sample failed")
            self._stop.wait(self.policy.sample_seconds)

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="gridctl-protection", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)


def describe_readings(readings: Readings | None) -> dict[str, Any] | None:
    if readings is None:
        return None
    return {k: v for k, v in readings.__dict__.items()}
