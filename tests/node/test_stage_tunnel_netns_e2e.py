"""The stage tunnel across simulated machines: refusals, listeners, and Gemma served through it.

Four network namespaces (``tests/netfleet``): two stage hosts each running a real
``StageHost`` under an accepted claim for one half of Gemma's layers, the claim's
coordinator host, and a rogue host of the same fleet. From the rogue host: no
certificate, a certificate from another CA naming the coordinator, and the rogue's own
valid fleet certificate are all refused before the stage server sees a connection
(its log counts them), and the stage server's own port is unreachable. On each stage
host only the tunnel listens on the advertised address. Then ``llama-server --rpc A,B`` on the
coordinator, through one coordinator forwarder and one tunnel per stage, must answer
a greedy completion exactly as the same ``llama-server`` does alone, with both stage
servers holding part of the weights. A release closes each tunnel and stops each
stage server.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import pytest

from gridctl.artifacts.sources import local_path
from gridctl.fleetca import FleetCA
from gridctl.node.rpctunnel import TlsIdentity
from gridctl.node.runtimes.llamacpp import default_binary
from gridctl.node.stageclaims import StageAssignment
from tests.netfleet import Host, NetFleet, wait_http
from tests.node.conftest import GEMMA_SOURCE
from tests.node.stage_certs import fleet_ca, fleet_identity
from tests.node.test_rpc_engine_e2e import PROMPT, _stage_server
from tests.node.test_stageclaims import gemma_claim

pytestmark = pytest.mark.e2e

READY_SECONDS = 60.0
SPLIT_PORT, ALONE_PORT = 18080, 18081

_PROBE = """
import socket, ssl
result = []
for attempt in ARGS["attempts"]:
    try:
        address = (ARGS["host"], attempt.get("port", ARGS["port"]))
        raw = socket.create_connection(address, timeout=10)
    except OSError as exc:
        result.append({"refused": True, "why": f"connect: {exc}"})
        continue
    try:
        conn = raw
        if attempt.get("tls", True):
            context = ssl.create_default_context(cafile=attempt["trust"])
            context.check_hostname = False  # the stage's verdict is under test, not ours
            if "cert" in attempt:
                context.load_cert_chain(attempt["cert"], attempt["key"])
            conn = context.wrap_socket(raw, server_hostname=ARGS["host"])
        conn.sendall(b"\\x00" * 16)
        result.append({"refused": conn.recv(1) == b"", "why": "closed"})
    except (ssl.SSLError, OSError) as exc:
        result.append({"refused": True, "why": f"{type(exc).__name__}: {exc}"})
    finally:
        raw.close()
"""

_COMPLETE = """
import httpx
answer = httpx.post(ARGS["url"], json={"prompt": ARGS["prompt"], "n_predict": 8,
    "temperature": 0, "seed": 1, "cache_prompt": False}, timeout=120)
result = {"status": answer.status_code, "content": answer.json().get("content")}
"""


def _read_line(child: subprocess.Popen[bytes], what: str) -> dict[str, Any]:
    """One JSON line from ``child``'s stdout, within READY_SECONDS, or a clear failure."""
    assert child.stdout is not None
    deadline, buffer = time.monotonic() + READY_SECONDS, b""
    while b"\n" not in buffer:
        left = deadline - time.monotonic()
        if left <= 0 or child.poll() is not None:
            pytest.fail(f"{what} gave no ready line (exit {child.poll()}): {buffer!r}")
        ready, _, _ = select.select([child.stdout], [], [], min(left, 1.0))
        if ready:
            buffer += os.read(child.stdout.fileno(), 4096)
    answer = json.loads(buffer.split(b"\n", 1)[0])
    assert isinstance(answer, dict)
    return answer


def _spawn(host: Host, config: dict[str, Any], path: Path) -> subprocess.Popen[bytes]:
    path.write_text(json.dumps(config))
    argv = [sys.executable, "-m", "tests.node.split_stage_child", str(path)]
    return host.popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def _identity_json(identity: TlsIdentity) -> dict[str, str]:
    return {"cert": str(identity.cert_file), "key": str(identity.key_file),
            "trust": str(identity.trust_file)}  # fmt: skip


def _accepted_connections(log: Path) -> int:
    return log.read_text(errors="replace").count("Accepted client connection")


def _listeners(host: Host) -> set[str]:
    """Every TCP listening address:port in ``host``'s namespace, as ``ss`` prints them."""
    done = host.run(["ss", "-ltnH"])
    assert done.returncode == 0, done.stderr
    return {line.split()[3] for line in done.stdout.splitlines() if line.strip()}


def _engine_argv(port: int, weights: Path) -> list[str]:
    return [str(default_binary()), "--host", "127.0.0.1", "--port", str(port), "-m",
            str(weights), "-c", "512", "-t", "1", "--no-webui"]  # fmt: skip


def _complete(host: Host, port: int) -> str:
    url = f"http://127.0.0.1:{port}/completion"
    answer = host.python(_COMPLETE, {"url": url, "prompt": PROMPT}, timeout=180)
    assert answer["status"] == 200, answer
    return str(answer["content"])


def _resident_mb(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss) >> 20


def _start_stage(
    host: Host, host_id: str, index: int, ca: FleetCA, tmp_path: Path
) -> tuple[subprocess.Popen[bytes], dict[str, Any], TlsIdentity]:
    """A stage host child serving stage ``index`` of 2 under an accepted claim."""
    identity = fleet_identity(ca, tmp_path / host_id, host_id, [host.ip])
    claim = replace(gemma_claim(1), stage=StageAssignment(index, 2, 9 * index, 9 * index + 9))
    data = claim.as_json()
    data["claim"]["lease_until_unix_ms"] = int(time.time() * 1000) + 3_600_000  # type: ignore[index]
    child = _spawn(host, {
        "role": "stage", "state_dir": str(tmp_path / f"{host_id}-node"), "claim": data,
        "now_ms": int(time.time() * 1000), "stage_server": str(_stage_server()),
        "identity": _identity_json(identity), "advertise": host.ip,
    }, tmp_path / f"{host_id}.json")  # fmt: skip
    ready = _read_line(child, f"the stage host {host_id}")
    assert ready["accepted"] and ready["tunnel"][0] == host.ip, ready
    # nothing but the tunnel on the advertised address; the stage server on loopback only
    assert _listeners(host) == {f"{host.ip}:{ready['tunnel'][1]}", f"127.0.0.1:{ready['rpc_port']}"}
    return child, ready, identity


def _release(host: Host, child: subprocess.Popen[bytes]) -> None:
    assert child.stdin is not None
    child.stdin.write(b"release\n")
    child.stdin.flush()
    assert _read_line(child, "the release") == {"released": True, "running": 0}
    assert _listeners(host) == set()  # tunnel closed, stage server gone
    child.stdin.close()
    assert child.wait(timeout=30) == 0


def test_only_the_coordinator_reaches_the_stages_and_gemma_answers_through_the_tunnels(
    netfleet: NetFleet, tmp_path: Path
) -> None:
    weights = local_path(GEMMA_SOURCE)
    stage_a, stage_b, coord, rogue = (
        netfleet.add_host(name) for name in ("stagea", "stageb", "coord", "rogue")
    )
    ca, elsewhere = fleet_ca(tmp_path / "ctl"), fleet_ca(tmp_path / "elsewhere")
    ids = {
        "coord": fleet_identity(ca, tmp_path / "coord", "coord-host", [coord.ip]),
        "rogue": fleet_identity(ca, tmp_path / "rogue", "rogue-host", [rogue.ip]),
        "forged": fleet_identity(elsewhere, tmp_path / "forged", "coord-host", [rogue.ip]),
    }
    stages = [
        _start_stage(stage_a, "stage-a", 0, ca, tmp_path),
        _start_stage(stage_b, "stage-b", 1, ca, tmp_path),
    ]
    _, ready, stage_identity = stages[0]
    tunnel_port, rpc_log = ready["tunnel"][1], Path(ready["rpc_log"])

    trust = str(stage_identity.trust_file)
    refusals = rogue.python(_PROBE, {"host": stage_a.ip, "port": tunnel_port, "attempts": [
        {"trust": trust},  # no certificate
        {"trust": trust, "cert": str(ids["forged"].cert_file), "key": str(ids["forged"].key_file)},
        {"trust": trust, "cert": str(ids["rogue"].cert_file), "key": str(ids["rogue"].key_file)},
        {"tls": False},  # plain bytes at the tunnel
        {"tls": False, "port": ready["rpc_port"]},  # the stage server's port from outside
    ]})  # fmt: skip
    assert [r["refused"] for r in refusals] == [True] * 5, refusals
    assert "Connection refused" in refusals[4]["why"], refusals[4]
    assert _accepted_connections(rpc_log) == 0  # not one byte reached the stage server

    # the coordinator's certificate gets through, whichever machine holds it
    through = rogue.python(_PROBE, {"host": stage_a.ip, "port": tunnel_port, "attempts": [
        {"trust": trust, "cert": str(ids["coord"].cert_file), "key": str(ids["coord"].key_file)},
    ]})  # fmt: skip
    assert through[0]["why"] == "closed", through
    assert _accepted_connections(rpc_log) == 1

    forwarder_ports = []
    for (host, host_id), (_, stage_ready, _) in zip(
        ((stage_a, "stage-a"), (stage_b, "stage-b")), stages, strict=True
    ):
        coord_child = _spawn(coord, {
            "role": "coordinator", "identity": _identity_json(ids["coord"]),
            "stage": [host.ip, stage_ready["tunnel"][1]], "stage_host_id": host_id,
        }, tmp_path / f"coord-{host_id}.json")  # fmt: skip
        forwarder_ports.append(_read_line(coord_child, f"the forwarder to {host_id}")["port"])
    idle_mb = [_resident_mb(stage_ready["rpc_pid"]) for _, stage_ready, _ in stages]

    rpc = ",".join(f"127.0.0.1:{port}" for port in forwarder_ports)
    split_argv = [*_engine_argv(SPLIT_PORT, weights), "--rpc", rpc, "-ngl", "99"]
    split = coord.popen(split_argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_http(coord, f"http://127.0.0.1:{SPLIT_PORT}/health", deadline=180, watch=split)
    from_split = _complete(coord, SPLIT_PORT)
    grown_mb = [
        _resident_mb(stage_ready["rpc_pid"]) - idle
        for (_, stage_ready, _), idle in zip(stages, idle_mb, strict=True)
    ]
    weights_mb = weights.stat().st_size >> 20
    # the layers crossed the tunnels: each stage holds a share, together half the file or more
    assert min(grown_mb) >= 8 and sum(grown_mb) >= weights_mb // 2, (grown_mb, weights_mb)

    alone = coord.popen(_engine_argv(ALONE_PORT, weights), stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL)  # fmt: skip
    wait_http(coord, f"http://127.0.0.1:{ALONE_PORT}/health", deadline=180, watch=alone)
    from_one_host = _complete(coord, ALONE_PORT)
    print(f"\nthrough the tunnels ({grown_mb} MB on the stages): {from_split!r}; "
          f"alone: {from_one_host!r}")  # fmt: skip
    assert from_split.strip() and from_split == from_one_host

    split.terminate()
    split.wait(timeout=30)
    for host, (child, _, _) in zip((stage_a, stage_b), stages, strict=True):
        _release(host, child)
