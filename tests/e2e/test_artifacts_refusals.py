"""A 404 and a 401 from the origin: clear receipts, controller backoff, nothing published.

`gridctl up --machines 1` runs two profiles whose loopback ``http://`` sources are
refused by real `gridctl artifacts serve` processes: one path that does not exist
(404), one server that wants a token the node does not have (401). The test reads
the servers' own timestamped access lines: each refused load is retried, but never
before the policy's exponential failure backoff, so the origin sees a bounded
number of requests; the controller's history carries the node's receipt naming the
source and the refusal; the node's cache holds no object and no partial file.
"""

from __future__ import annotations

import itertools
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from tests.artifacts.conftest import FILE, OWNER, REPO, make_weights
from tests.e2e.harness import ROOT, Fleet, free_port, make_fleet, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
MIB = 1024 * 1024
BASE, CAP = 2.0, 8.0  # failure_backoff_base_seconds / _max_seconds below
RETRIES = 3  # requests after the first that the test waits to see

POLICY = f"""\
apiVersion: gridctl/v1
kind: ControllerPolicy
metadata:
  name: e2e
spec:
  mode: automatic
  max_concurrent_mutations: 2
  mutation_cooldown_seconds: 1
  failure_backoff_base_seconds: {BASE:g}
  failure_backoff_max_seconds: {CAP:g}
  observation_timeout_seconds: 10
"""


def profile(name: str, sha: str, source: str) -> str:
    return f"""\
apiVersion: gridctl/v1
kind: ModelProfile
metadata:
  name: {name}
spec:
  memory_mb: 256
  artifact:
    sha256: {sha}
    source: {source}
    size_mb: 4
  min_replicas: 1
  max_replicas: 1
  min_residency_seconds: 0
  load_seconds: 2
  warm_seconds: 2
"""


class Origin:
    """A real `gridctl artifacts serve` process and its access log."""

    def __init__(self, root: Path, log_path: Path, *extra: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        argv = [sys.executable, "-m", "gridctl", "artifacts", "serve", str(root)]
        argv += ["--listen", f"127.0.0.1:{self.port}", *extra]
        with open(log_path, "wb") as sink:
            self.process = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, cwd=ROOT)

    def listening(self) -> bool:
        assert self.process.poll() is None, self.log_path.read_text()
        try:
            httpx.get(f"{self.url}/-/-/resolve/main/probe", timeout=2)
        except httpx.TransportError:
            return False
        return True

    def requests(self, path: str, status: int) -> list[float]:
        """Wall-clock times of the GETs of ``path`` answered with ``status``."""
        times = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if f"GET {path} status={status}" not in line:
                continue
            stamp = re.match(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ", line)
            assert stamp, line
            times.append(datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp())
        return times

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=30)


def backoff(failures: int) -> float:
    """The spec's schedule, restated: base, 2x base, 4x base ... capped."""
    return float(min(BASE * 2 ** (failures - 1), CAP))


@pytest.fixture
def origins(tmp_path: Path) -> Iterator[tuple[Origin, Origin, str]]:
    weights = make_weights(tmp_path / "hub", MIB)
    token = tmp_path / "hub.token"
    token.write_text("only-the-operator-has-this\n")
    token.chmod(0o600)
    open_hub = Origin(weights.root, tmp_path / "open.log")
    locked_hub = Origin(weights.root, tmp_path / "locked.log", "--token-file", str(token))
    try:
        for hub in (open_hub, locked_hub):
            wait_for("artifact server", hub.listening, deadline=60)
        yield open_hub, locked_hub, weights.sha256
    finally:
        open_hub.stop()
        locked_hub.stop()


@pytest.fixture
def fleet(tmp_path: Path, origins: tuple[Origin, Origin, str]) -> Iterator[Fleet]:
    open_hub, locked_hub, sha = origins
    fleet = make_fleet(tmp_path)
    fleet.repo.write("policy.yaml", POLICY)
    missing = f"{open_hub.url}/{OWNER}/{REPO}/resolve/main/nope.gguf"
    fleet.repo.write("missing.yaml", profile("tiny-missing", "e" * 64, missing))
    locked = f"{locked_hub.url}/{OWNER}/{REPO}/resolve/main/{FILE}"
    fleet.repo.write("locked.yaml", profile("tiny-locked", sha, locked))
    fleet.repo.commit("two sources the origin refuses")
    yield fleet
    fleet.stop()


def test_refused_sources_give_clear_receipts_backoff_and_nothing_published(
    fleet: Fleet, origins: tuple[Origin, Origin, str]
) -> None:
    open_hub, locked_hub, sha = origins
    cases = [
        (open_hub, f"/{OWNER}/{REPO}/resolve/main/nope.gguf", 404, "tiny-missing"),
        (locked_hub, f"/{OWNER}/{REPO}/resolve/main/{FILE}", 401, "tiny-locked"),
    ]
    fleet.start(machines=1)
    for hub, path, status, _ in cases:

        def retried(hub: Origin = hub, path: str = path, status: int = status) -> bool:
            return len(hub.requests(path, status)) > RETRIES

        try:
            wait_for(f"{RETRIES + 1} refused GETs of {path} (HTTP {status})", retried, deadline=240)
        except AssertionError:
            print(fleet.log())
            raise

    for hub, path, status, model in cases:
        seen = hub.requests(path, status)
        print(f"{model}: HTTP {status} at +s", [round(t - seen[0], 2) for t in seen])
        # never earlier than the backoff after the previous failure
        for n, (before, after) in enumerate(itertools.pairwise(seen), start=1):
            assert after - before >= backoff(n) - 0.01, (model, n, seen)
        # and so a bounded count over the window the first retries span
        window = sum(backoff(n) for n in range(1, RETRIES + 1))
        inside = [t for t in seen if t <= seen[0] + window]
        assert len(inside) <= RETRIES + 1, (model, seen)

    events = fleet.status()["history"]
    failed = {e["model_id"]: e["message"] for e in events if e["event"] == "load_failed"}
    assert "artifact_not_found" in failed["tiny-missing"], failed
    assert f"{open_hub.url}/{OWNER}/{REPO}/resolve/main/nope.gguf" in failed["tiny-missing"]
    assert "HTTP 404" in failed["tiny-missing"]
    assert "artifact_unauthorized" in failed["tiny-locked"], failed
    assert f"{locked_hub.url}/{OWNER}/{REPO}/resolve/main/{FILE}" in failed["tiny-locked"]
    assert "HTTP 401" in failed["tiny-locked"]

    cache = fleet.state_dir / "local-1" / "artifacts"
    objects = sorted(p.name for p in (cache / "objects").glob("*")) if cache.exists() else []
    partials = sorted(p.name for p in (cache / "staging").glob("*")) if cache.exists() else []
    assert not [name for name in objects if sha in name or "e" * 64 in name], objects
    assert partials == [], partials
