"""Runtime qualification: the real lifecycle of one engine kind, proven on this host.

Before a host offers a runtime for placement, the operator runs
``gridctl node qualify RUNTIME MODEL``: the node's own adapter, engine key and
artifact cache drive one real child through every step the actuator relies on
(inventory, immutable identity, warm, ownership, native readiness, one real
inference, activity, drain and stop). Each step passes or fails with a stable
reason; the first failure skips the rest, and a child that was started is
always stopped again (only through its identity proof).

The result is durable evidence, one JSON file per runtime in the node's state
directory (``qualifications/<runtime>.json``); the latest run of a runtime
decides. :func:`qualified_runtimes` turns the evidence into the heartbeat's
optional ``qualified_runtimes`` field: absent (``None``) while no qualification
was ever run here, so an old or never-qualified node keeps placing as before.

The qualification child binds loopback on a free port outside any residency and
writes nothing into the residency table, so it can run beside a live daemon.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from gridctl.errors import GridctlError
from gridctl.node.artifacts import ArtifactCache
from gridctl.node.processes import Liveness, stop_proven
from gridctl.node.records import ProcessIdentity
from gridctl.node.runtimes.adapter import (
    LaunchOptions,
    RuntimeAdapter,
    RuntimeFailure,
    residency_activity,
    residency_wait_idle,
    stop_residency,
)

EVIDENCE_DIR = "qualifications"
EVIDENCE_VERSION = 1
STEP_NAMES = (
    "inventory",
    "identity",
    "warm",
    "ownership",
    "readiness",
    "inference",
    "activity",
    "drain",
    "stop",
)
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass
class StepResult:
    """One step of a qualification: passed or not, a stable reason, and what was seen."""

    name: str
    ok: bool
    reason: str = "ok"
    detail: str = ""
    seconds: float = 0.0


@dataclass
class Qualification:
    """The evidence of one run, as written to the state directory."""

    runtime: str
    model: str
    artifact_sha256: str | None = None
    engine_version: str | None = None
    started_at: float = 0.0
    finished_at: float = 0.0
    steps: list[StepResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return len(self.steps) == len(STEP_NAMES) and all(s.ok for s in self.steps)

    @property
    def failed_step(self) -> StepResult | None:
        return next((s for s in self.steps if not s.ok), None)

    def document(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["version"] = EVIDENCE_VERSION
        doc["passed"] = self.passed
        return doc


class StepFailed(Exception):
    """A step's "no": the stable reason and what was seen."""

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason, self.detail = reason, detail
        super().__init__(f"{reason}: {detail}")


def evidence_path(state_dir: Path, runtime: str) -> Path:
    return Path(state_dir) / EVIDENCE_DIR / f"{_SAFE.sub('_', runtime)}.json"


def write_evidence(state_dir: Path, result: Qualification) -> Path:
    """Write the run's evidence atomically (the latest run of a runtime replaces the last)."""
    path = evidence_path(state_dir, result.runtime)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_suffix(".json.tmp")
    staging.write_text(json.dumps(result.document(), indent=2, sort_keys=True) + "\n", "utf-8")
    os.replace(staging, path)
    return path


def read_evidence(state_dir: Path) -> dict[str, dict[str, Any]]:
    """Every readable evidence document by runtime; an unreadable file counts as failed."""
    found: dict[str, dict[str, Any]] = {}
    folder = Path(state_dir) / EVIDENCE_DIR
    if not folder.is_dir():
        return found
    for path in sorted(folder.glob("*.json")):
        try:
            doc = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            continue
        runtime = doc.get("runtime") if isinstance(doc, dict) else None
        if isinstance(runtime, str) and path == evidence_path(state_dir, runtime):
            found[runtime] = doc
    return found


def qualified_runtimes(state_dir: Path) -> tuple[str, ...] | None:
    """Runtimes whose latest qualification here passed; ``None`` if none was ever run.

    ``None`` is "not claimed": the heartbeat omits the field and placement
    treats the host as before qualification existed.
    """
    folder = Path(state_dir) / EVIDENCE_DIR
    if not folder.is_dir() or not any(folder.glob("*.json")):
        return None
    docs = read_evidence(state_dir)
    return tuple(sorted(r for r, doc in docs.items() if doc.get("passed") is True))


def free_loopback_port() -> int:
    """A port free on loopback right now (the kernel's pick)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class _Journal:
    """Keeps what the adapter published, to check the identity against it."""

    def __init__(self) -> None:
        self.published: tuple[str, int, int] | None = None
        self.identity: ProcessIdentity | None = None

    def spawned(self, model_id: str, pid: int, port: int) -> None:
        self.published = (model_id, pid, port)

    def proven(self, model_id: str, identity: ProcessIdentity) -> None:
        self.identity = identity


Progress = Callable[[StepResult], None]


class Qualifier:
    """Runs the lifecycle check of one runtime adapter on this host."""

    def __init__(
        self,
        adapter: RuntimeAdapter,
        cache: ArtifactCache,
        *,
        api_key: str,
        drain_timeout: float = 120.0,
        progress: Progress = lambda step: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.adapter, self.cache, self.api_key = adapter, cache, api_key
        self.drain_timeout, self.progress, self.clock = drain_timeout, progress, clock
        self.identity: ProcessIdentity | None = None
        self.model = ""
        self.artifact = Path()
        self.port = 0
        self._request: threading.Thread | None = None

    def run(
        self, model: str, *, artifact_sha256: str | None, artifact_source: str | None = None
    ) -> Qualification:
        self.model = model
        result = Qualification(
            self.adapter.name,
            model,
            artifact_sha256=artifact_sha256.lower() if artifact_sha256 else None,
            engine_version=engine_version(self.adapter),
            started_at=self.clock(),
        )
        checks: dict[str, Callable[[], str]] = {
            "inventory": lambda: self._inventory(result, artifact_source),
            "identity": lambda: self._identity(model),
            "warm": lambda: self._warm(model),
            "ownership": self._ownership,
            "readiness": lambda: self._readiness(model),
            "inference": lambda: self._inference(model),
            "activity": lambda: self._activity(model),
            "drain": self._drain,
            "stop": self._stop,
        }
        try:
            for name in STEP_NAMES:
                step = self._step(name, checks[name])
                result.steps.append(step)
                self.progress(step)
                if not step.ok:
                    break
        finally:
            self._cleanup()
            result.finished_at = self.clock()
        return result

    def _step(self, name: str, check: Callable[[], str]) -> StepResult:
        started = time.monotonic()
        try:
            detail = check()
        except StepFailed as exc:
            return StepResult(name, False, exc.reason, exc.detail, time.monotonic() - started)
        except RuntimeFailure as exc:
            return StepResult(name, False, exc.reason, str(exc), time.monotonic() - started)
        except (GridctlError, OSError, httpx.HTTPError) as exc:
            reason = str(getattr(exc, "reason", "") or type(exc).__name__)
            return StepResult(name, False, reason, str(exc)[:512], time.monotonic() - started)
        return StepResult(name, True, "ok", detail, round(time.monotonic() - started, 3))

    # --- the steps ----------------------------------------------------------------------

    def _inventory(self, result: Qualification, source: str | None) -> str:
        want = result.artifact_sha256
        cached = self.cache.store.cached_artifact(result.model)
        if source is None and cached is not None and want and cached.sha256 != want:
            raise StepFailed(
                "artifact_sha256_mismatch",
                f"{result.model} is cached as {cached.sha256[:12]}, not {want[:12]}",
            )
        acquired = self.cache.acquire(
            result.model, sha256=want, source=source, size_ceiling_mb=None, now=self.clock()
        )
        entry = self.cache.verified(result.model, want)
        if entry is None:
            raise StepFailed("artifact_unverified", f"{result.model} does not hash as recorded")
        result.artifact_sha256 = entry.sha256
        self.artifact = self.adapter.prepare_artifact(result.model, Path(entry.path))
        verb = "fetched" if acquired.fetched else "verified"
        return f"{verb} {entry.sha256[:12]} at {entry.path}"

    def _identity(self, model: str) -> str:
        journal = _Journal()
        self.port = free_loopback_port()
        self.identity = self.adapter.start(
            model, self.artifact, self.port, journal, LaunchOptions()
        )
        if journal.published is None or journal.published[1] != self.identity.pid:
            raise StepFailed("identity_unjournalled", "the PID was not published at spawn")
        if journal.identity != self.identity:
            raise StepFailed("identity_unjournalled", "the identity proof was not published")
        if self.adapter.prove_identity(self.identity) is not Liveness.PROVEN:
            raise StepFailed("identity_unproven", f"pid {self.identity.pid} cannot be proven")
        return f"pid {self.identity.pid} born {self.identity.create_time:.2f} on port {self.port}"

    def _warm(self, model: str) -> str:
        assert self.identity is not None
        waited = self.adapter.wait_ready(model, self.identity, self.port)
        return f"ready after {waited:.2f}s"

    def _ownership(self) -> str:
        assert self.identity is not None
        key_file = str(self.adapter.key_file)
        if key_file not in self.identity.cmdline:
            raise StepFailed("not_owned", "the child does not read this node's engine key file")
        response = httpx.get(f"{self.adapter.endpoint(self.port)}/v1/models", timeout=10)
        if response.status_code not in (401, 403):
            raise StepFailed(
                "engine_unfenced", f"/v1/models without the key answered {response.status_code}"
            )
        return f"pid {self.identity.pid} reads {key_file}; unauthenticated calls refused"

    def _readiness(self, model: str) -> str:
        if not self.adapter.model_ready(model, self.port):
            raise StepFailed("not_ready", f"the engine does not list {model} as usable")
        decoy = f"{model}-not-served"
        if self.adapter.model_ready(decoy, self.port):
            raise StepFailed("readiness_not_model_specific", f"{decoy} reported ready too")
        return f"{model} listed by the engine; {decoy} is not"

    def _post(self, body: dict[str, Any], timeout: float) -> httpx.Response:
        return httpx.post(
            f"{self.adapter.endpoint(self.port)}/v1/completions",
            json=body,
            headers={"Authorization": f"Bearer {self.api_key}"},
            timeout=timeout,
        )

    def _inference(self, model: str) -> str:
        body = {"model": model, "prompt": "Hello", "max_tokens": 1, "temperature": 0}
        response = self._post(body, 120)
        if response.status_code != 200:
            raise StepFailed("inference_failed", f"HTTP {response.status_code}")
        choices = response.json().get("choices")
        if not isinstance(choices, list) or not choices:
            raise StepFailed("inference_failed", "no choices in the completion")
        text = choices[0].get("text") if isinstance(choices[0], dict) else None
        return f"one-token completion {text!r}"

    def _activity(self, model: str) -> str:
        body = {"model": model, "prompt": "Count:", "max_tokens": 96, "ignore_eos": True}

        def generate() -> None:
            with contextlib.suppress(httpx.HTTPError):  # the drain step sees the outcome
                self._post(body, self.drain_timeout)

        self._request = threading.Thread(target=generate, daemon=True)
        self._request.start()
        deadline = time.monotonic() + 30
        seen = None
        while time.monotonic() < deadline and self._request.is_alive():
            seen = residency_activity(self.adapter, self.model, self.port)
            if seen is not None and seen.processing > 0:
                return f"{seen.processing} of {seen.slots} running, {seen.queued} queued"
            time.sleep(0.02)
        raise StepFailed("activity_unseen", f"a running request was never reported ({seen})")

    def _drain(self) -> str:
        seen = residency_wait_idle(self.adapter, self.model, self.port, timeout=self.drain_timeout)
        if seen is None:
            raise StepFailed("activity_unknown", "the activity probe failed while draining")
        if seen.processing:
            raise StepFailed("drain_timeout", f"{seen.processing} still running")
        if self._request is not None:
            self._request.join(self.drain_timeout)
        return "idle: nothing running"

    def _stop(self) -> str:
        assert self.identity is not None
        stopped = stop_residency(self.adapter, self.model, self.identity, self.port, grace=10.0)
        if not stopped:
            raise StepFailed("stop_failed", f"pid {self.identity.pid} did not stop")
        if self.adapter.prove_identity(self.identity) is not Liveness.DEAD:
            raise StepFailed("child_survived", f"pid {self.identity.pid} is still alive")
        pid, self.identity = self.identity.pid, None
        return f"pid {pid} gone"

    def _cleanup(self) -> None:
        """A child left running by a failed step is stopped, only by its proof."""
        if self.identity is not None:
            if not stop_residency(self.adapter, self.model, self.identity, self.port, grace=5.0):
                stop_proven(self.identity, grace=5.0)
            self.identity = None
        if self._request is not None:
            self._request.join(10)


def engine_version(adapter: RuntimeAdapter) -> str | None:
    """The engine's own version string, when the adapter can tell it."""
    probe = getattr(adapter, "engine_version", None)
    if not callable(probe):
        return None
    try:
        version = probe()
    except (OSError, GridctlError):
        return None
    return version if isinstance(version, str) else None
