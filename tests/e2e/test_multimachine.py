"""A fleet of three machines, each its own network namespace with its own address.

The controller listens on its namespace's address with HTTPS from the fleet CA;
two hosts join with `gridctl join-token` bundles and serve Gemma from
llama-server children bound to their advertised addresses over TLS; the
official `openai` client talks to the router from the controller's namespace
with a router key. Then the fleet scales out, renews its credentials, survives
a CA rotation, and a revoked host is refused — all on real processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.e2e.harness import ENGINE_THREADS, GEMMA, DesiredRepo, profile_yaml, wait_for
from tests.netfleet import Host, NetFleet, wait_http

pytestmark = pytest.mark.e2e

PORT = 8443
GRIDCTL = [sys.executable, "-m", "gridctl"]

STATUS = """
import ssl, httpx
ctx = ssl.create_default_context(cafile=ARGS["ca"])
result = httpx.get(ARGS["url"], verify=ctx, timeout=10).json()
"""

CHAT = """
import ssl, httpx
from openai import OpenAI
ctx = ssl.create_default_context(cafile=ARGS["ca"])
client = OpenAI(base_url=ARGS["base"], api_key=ARGS["key"],
                http_client=httpx.Client(verify=ctx, timeout=120))
answer = client.chat.completions.create(
    model=ARGS["model"], max_tokens=8,
    messages=[{"role": "user", "content": "The capital of France is"}])
parts = []
for chunk in client.chat.completions.create(
        model=ARGS["model"], max_tokens=8, stream=True,
        messages=[{"role": "user", "content": "Count: one, two,"}]):
    if chunk.choices and chunk.choices[0].delta.content:
        parts.append(chunk.choices[0].delta.content)
result = {"text": answer.choices[0].message.content, "stream": "".join(parts),
          "models": [m.id for m in client.models.list().data]}
"""

NO_KEY = """
import ssl, httpx
ctx = ssl.create_default_context(cafile=ARGS["ca"])
r = httpx.post(ARGS["base"] + "/chat/completions", verify=ctx, timeout=30,
               json={"model": ARGS["model"], "messages": [{"role": "user", "content": "hi"}]})
result = {"status": r.status_code, "body": r.json()}
"""

PLAIN = """
import httpx
try:
    r = httpx.get(ARGS["url"], timeout=10)
    result = {"status": r.status_code}
except httpx.HTTPError as exc:
    result = {"error": type(exc).__name__}
"""

TRAFFIC = """
import json, ssl, sys, time
from pathlib import Path
import httpx
args = json.loads(sys.stdin.read())
ctx = ssl.create_default_context(cafile=args["ca"])
done, failed, errors = 0, 0, []
end = time.monotonic() + args["seconds"]
with httpx.Client(verify=ctx, timeout=60) as client:
    while done < args["max_requests"] and time.monotonic() < end:
        if Path(args["stop"]).exists() and done >= args["min_requests"]:
            break  # a slow machine keeps sending until the least number has been sent
        try:
            r = client.post(args["base"] + "/chat/completions",
                            headers={"Authorization": "Bearer " + args["key"]},
                            json={"model": args["model"], "max_tokens": 4,
                                  "messages": [{"role": "user", "content": "Hello"}]})
            ok = r.status_code == 200
            if not ok:
                errors.append(r.status_code)
        except httpx.HTTPError as exc:
            ok = False
            errors.append(type(exc).__name__)
        done += 1
        failed += 0 if ok else 1
Path(args["out"]).write_text(json.dumps({"done": done, "failed": failed, "errors": errors[:20]}))
"""

ISSUER = """
import ssl, socket
from cryptography import x509
pem = ssl.get_server_certificate((ARGS["host"], ARGS["port"]))
result = x509.load_pem_x509_certificate(pem.encode()).issuer.rfc4514_string()
"""


@dataclass
class World:
    net: NetFleet
    ctl: Host
    hosts: dict[str, Host]
    tmp: Path
    repo: DesiredRepo
    state: Path
    controller: subprocess.Popen[bytes]
    nodes: dict[str, subprocess.Popen[bytes]]
    router_key: str

    @property
    def url(self) -> str:
        return self.ctl.url(PORT, scheme="https")

    @property
    def ca(self) -> str:
        return str(self.state / "pki" / "trust.pem")

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = self.ctl.python(
            STATUS, {"ca": self.ca, "url": self.url + "/allocator/status"}
        )
        return result

    def ready_on(self) -> dict[str, str]:
        """host id -> endpoint of each routable Gemma replica."""
        return {
            h["host_id"]: r.get("endpoint", "")
            for h in self.status()["hosts"]
            for r in h["residencies"]
            if r["model_id"] == GEMMA and r.get("routable")
        }

    def chat(self) -> dict[str, Any]:
        result: dict[str, Any] = self.ctl.python(
            CHAT,
            {"ca": self.ca, "base": self.url + "/v1", "key": self.router_key, "model": GEMMA},
            timeout=300,
        )
        return result

    def node_status(self, name: str) -> dict[str, Any]:
        done = subprocess.run(
            [*GRIDCTL, "node", "status", "--state-dir", str(self.tmp / name), "--json"],
            capture_output=True,
            text=True,
            check=True,
        )
        result: dict[str, Any] = json.loads(done.stdout)
        return result

    def cli(self, *args: str) -> str:
        done = subprocess.run([*GRIDCTL, *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout


def gridctl_log(path: Path) -> Any:
    return open(path, "ab")  # the child owns it until teardown


def start_world(
    netfleet: NetFleet,
    tmp_path: Path,
    profiles: dict[str, str],
    *,
    hosts: tuple[str, ...] = ("a", "b"),
    capacity_mb: int = 1500,
) -> World:
    """A controller in its namespace serving HTTPS, ``profiles`` (file name -> YAML)
    committed, and one joined node per name of ``hosts`` in a namespace of its own,
    advertising its address, with ``capacity_mb`` of memory. ``stop_world`` ends it."""
    ctl = netfleet.add_host("ctl")
    machines = {name: netfleet.add_host(name) for name in hosts}
    repo = DesiredRepo(tmp_path / "repo")
    for name, text in profiles.items():
        repo.write(name, text)
    repo.commit("profiles")
    state = tmp_path / "controller"
    controller = ctl.popen(
        [
            *GRIDCTL,
            "controller",
            "--watch",
            str(repo.path),
            "--state",
            str(state),
            "--listen",
            f"{ctl.ip}:{PORT}",
            "--tick-interval",
            "1",
            "--node-credential-ttl",
            "40s",
        ],
        stdout=gridctl_log(tmp_path / "controller.log"),
        stderr=subprocess.STDOUT,
    )
    wait_for("the fleet CA", lambda: (state / "pki" / "trust.pem").is_file(), deadline=60)
    wait_http(
        ctl,
        ctl.url(PORT, scheme="https", path="/healthz"),
        verify=str(state / "pki" / "trust.pem"),
        watch=controller,
    )
    url = ctl.url(PORT, scheme="https")
    key_file = tmp_path / "router.key"
    subprocess.run(
        [
            *GRIDCTL,
            "token",
            "router",
            "create",
            "e2e",
            "--state",
            str(state),
            "--out",
            str(key_file),
        ],
        check=True,
        capture_output=True,
    )
    world = World(netfleet, ctl, machines, tmp_path, repo, state, controller, {}, "")
    world.router_key = key_file.read_text().strip()
    for index, name in enumerate(sorted(machines)):
        world.nodes[name] = start_node(world, name, index, url, capacity_mb)
    return world


def start_node(world: World, name: str, index: int, url: str, capacity_mb: int) -> Any:
    """Join host ``name`` with a fresh bundle and start its node daemon."""
    host, tmp_path = world.hosts[name], world.tmp
    bundle = tmp_path / f"join-{name}.json"
    subprocess.run(
        [
            *GRIDCTL,
            "join-token",
            "create",
            "--state",
            str(world.state),
            "--controller",
            url,
            "--out",
            str(bundle),
            "--ttl",
            "10m",
            "--host-id",
            f"host-{name}",
        ],
        check=True,
        capture_output=True,
    )
    return host.popen(
        [
            *GRIDCTL,
            "node",
            "start",
            "--join",
            str(bundle),
            "--advertise",
            host.ip,
            "--state-dir",
            str(tmp_path / name),
            "--capacity-mb",
            str(capacity_mb),
            "--external-mb",
            "0",  # the test machine's other work is not this simulated host's
            "--failure-domain",
            f"zone-{name}",
            "--port-range",
            f"{23000 + 10 * index}-{23009 + 10 * index}",
            "--heartbeat-seconds",
            "1",
            "--engine-threads",
            str(ENGINE_THREADS),
            "--foreground",
        ],
        stdout=gridctl_log(tmp_path / f"node-{name}.log"),
        stderr=subprocess.STDOUT,
    )


def stop_world(world: World) -> None:
    for process in world.nodes.values():
        if process.poll() is None:
            process.terminate()
    for process in world.nodes.values():
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
    world.controller.terminate()
    # the netfleet fixture kills whatever is still running in the namespaces


@pytest.fixture
def world(netfleet: NetFleet, tmp_path: Path) -> Iterator[World]:
    profile = profile_yaml(GEMMA, min_replicas=1, max_replicas=2)
    world = start_world(netfleet, tmp_path, {f"{GEMMA}.yaml": profile})
    try:
        yield world
    finally:
        stop_world(world)


def secrets_of(world: World) -> dict[str, str]:
    found = {"router key": world.router_key}
    found["operator token"] = (world.state / "operator.token").read_text().strip()
    for name in world.hosts:
        identity = world.tmp / name / "identity"
        found[f"credential {name}"] = (identity / "node.token").read_text().strip()
        bundle = json.loads((world.tmp / f"join-{name}.json").read_text())
        found[f"bootstrap {name}"] = bundle["bootstrap_secret"].split(".", 1)[1]
    return found


def test_two_hosts_join_serve_over_tls_scale_renew_rotate_and_revoke(world: World) -> None:
    # --- joined, and serving Gemma from a llama-server bound to its advertised address
    ready = wait_for("Gemma ready on a joined host", world.ready_on, deadline=240)
    for host_id, endpoint in ready.items():
        assert endpoint.startswith(f"https://{world.hosts[host_id.removeprefix('host-')].ip}:")
    answer = world.chat()
    assert answer["text"].strip() and answer["stream"].strip(), answer
    assert GEMMA in answer["models"]
    # (the chat's demand may already be scaling out: look at the first host's child)
    name = sorted(ready)[0].removeprefix("host-")
    marker = f"{world.tmp / name}/"
    (child,) = [
        p
        for p in psutil.process_iter(["cmdline"])
        if "llama-server" in " ".join(p.info["cmdline"] or [])
        and marker in " ".join(p.info["cmdline"] or [])
    ]
    argv = child.cmdline()
    assert argv[argv.index("--host") + 1] == world.hosts[name].ip
    assert "--ssl-cert-file" in argv and "--ssl-key-file" in argv

    # --- the router asks other machines' users for a key; plain HTTP gets no answer
    refused = world.ctl.python(NO_KEY, {"ca": world.ca, "base": world.url + "/v1", "model": GEMMA})
    assert refused["status"] == 401
    assert refused["body"]["error"]["message"].startswith("router API key required")
    plain = world.ctl.python(PLAIN, {"url": world.ctl.url(PORT, path="/allocator/status")})
    assert "status" not in plain or plain["status"] == 400, plain  # TLS only, never a status

    # --- min_replicas 2: one replica in each host namespace
    world.repo.write(f"{GEMMA}.yaml", profile_yaml(GEMMA, min_replicas=2, max_replicas=2))
    world.repo.commit("two replicas")
    both = wait_for(
        "a replica on each host",
        lambda: ready if len(ready := world.ready_on()) == 2 else None,
        deadline=240,
    )
    for host_id, endpoint in both.items():
        address = world.hosts[host_id.removeprefix("host-")].ip
        assert endpoint.startswith(f"https://{address}:"), both
    assert world.chat()["text"].strip()

    # --- credentials of 40 s are renewed by the running nodes, without a restart
    pids = {n: p.pid for n, p in world.nodes.items()}
    for node in world.hosts:
        wait_for(
            f"node {node} renews its credential",
            lambda node=node: world.node_status(node)["agent"].get("renewals", 0) >= 1,
            deadline=90,
        )
    assert {n: p.pid for n, p in world.nodes.items()} == pids
    assert all(p.poll() is None for p in world.nodes.values())

    # --- a CA rotation: the controller serves from the new CA, nodes renew onto it,
    #     requests keep being served throughout
    stop, out = world.tmp / "traffic.stop", world.tmp / "traffic.json"
    traffic = world.ctl.popen([sys.executable, "-c", TRAFFIC], stdin=subprocess.PIPE)
    assert traffic.stdin is not None
    traffic.stdin.write(
        json.dumps(
            {
                "ca": world.ca,
                "base": world.url + "/v1",
                "key": world.router_key,
                "model": GEMMA,
                "stop": str(stop),
                "out": str(out),
                "seconds": 240,
                "max_requests": 400,
                "min_requests": 5,
            }
        ).encode()
    )
    traffic.stdin.close()
    world.cli("ca", "rotate", "--state", str(world.state), "--overlap", "1h")
    new_ca = json.loads(world.cli("ca", "show", "--state", str(world.state), "--json"))
    wait_for(
        "the controller to serve from the new CA",
        lambda: world.ctl.python(ISSUER, {"host": world.ctl.ip, "port": PORT}) == new_ca["subject"],
        deadline=60,
    )
    for node in world.hosts:
        ca_file = world.tmp / node / "identity" / "ca.pem"
        wait_for(
            f"node {node} trusts both CAs",
            lambda ca_file=ca_file: ca_file.read_text().count("BEGIN CERTIFICATE") == 2,
            deadline=60,
        )
    assert world.chat()["text"].strip()
    assert len(world.ready_on()) == 2
    stop.touch()
    assert traffic.wait(timeout=120) == 0
    served = json.loads(out.read_text())
    print(f"requests through the CA rotation: {served['done']} sent, {served['failed']} failed")
    assert served["done"] >= 5 and served["failed"] == 0, served  # served through the rotation

    # --- no secret in any process's argv or environment, in a log, or in status
    hidden = secrets_of(world)
    status_text = json.dumps(world.status())
    logs = {p.name: p.read_text(errors="replace") for p in world.tmp.glob("*.log")}
    logs.update({p.name: p.read_text(errors="replace") for p in world.tmp.glob("*/logs/*.log")})
    for process in psutil.process_iter(["cmdline", "environ"]):
        blob = " ".join(process.info["cmdline"] or []) + json.dumps(process.info["environ"] or {})
        for what, secret in hidden.items():
            assert secret not in blob, f"{what} in the argv/environ of pid {process.pid}"
    for what, secret in hidden.items():
        assert secret not in status_text, f"{what} in status"
        for log_name, text in logs.items():
            assert secret not in text, f"{what} in {log_name}"

    # --- revoke host b: its next heartbeat is refused
    world.cli("token", "revoke", "host-b", "--state", str(world.state))
    wait_for(
        "host b refused after revocation",
        lambda: "revoked" in str(world.node_status("b")["agent"].get("last_error")),
        deadline=30,
    )
    assert "401" in str(world.node_status("b")["agent"]["last_error"])


def test_an_ipv6_fleet_joins_through_the_operator_api(netfleet: NetFleet, tmp_path: Path) -> None:
    """IPv6 end to end, with the join token made through a running controller's operator API."""
    ctl, host = netfleet.add_host("ctl"), netfleet.add_host("c")
    state = tmp_path / "controller"
    url = ctl.url(PORT, scheme="https", ipv6=True)
    controller = ctl.popen(
        [*GRIDCTL, "controller", "--state", str(state), "--listen", f"[{ctl.ip6}]:{PORT}"],
        stdout=gridctl_log(tmp_path / "controller.log"),
        stderr=subprocess.STDOUT,
    )
    ca = state / "pki" / "trust.pem"
    wait_for("the fleet CA", ca.is_file, deadline=60)
    wait_http(ctl, f"{url}/healthz", verify=str(ca), watch=controller)
    bundle = tmp_path / "join.json"
    made = ctl.run(
        [
            *GRIDCTL,
            "join-token",
            "create",
            "--controller",
            url,
            "--out",
            str(bundle),
            "--token-file",
            str(state / "operator.token"),
            "--ca-file",
            str(ca),
        ],
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    node = host.popen(
        [
            *GRIDCTL,
            "node",
            "start",
            "--join",
            str(bundle),
            "--advertise",
            host.ip6,
            "--state-dir",
            str(tmp_path / "node"),
            "--capacity-mb",
            "1000",
            "--external-mb",
            "0",
            "--heartbeat-seconds",
            "1",
            "--engine-threads",
            str(ENGINE_THREADS),
            "--foreground",
        ],
        stdout=gridctl_log(tmp_path / "node.log"),
        stderr=subprocess.STDOUT,
    )

    def registered() -> dict[str, Any] | None:
        done = ctl.run(
            [*GRIDCTL, "status", "--controller", url, "--ca-file", str(ca), "--json"], timeout=60
        )
        if done.returncode != 0:
            return None
        hosts = json.loads(done.stdout)["hosts"]
        return hosts[0] if hosts else None

    row = wait_for("the IPv6 host registered", registered, deadline=90)
    assert row["advertise"] == host.ip6 and row["address_family"] == "ipv6"
    assert row["gpu_count"] is None  # no NVML here: unknown, not 0
    # the same bundle cannot be used twice
    again = host.run(
        [
            *GRIDCTL,
            "node",
            "start",
            "--join",
            str(bundle),
            "--advertise",
            host.ip6,
            "--state-dir",
            str(tmp_path / "other"),
            "--engine-threads",
            str(ENGINE_THREADS),
            "--foreground",
        ],
        timeout=60,
    )
    assert again.returncode == 1
    assert "join refused: HTTP 401: join refused: bootstrap secret already used" in again.stderr
    # plain HTTP toward a controller off loopback is refused before anything is sent
    plain = host.run(
        [
            *GRIDCTL,
            "node",
            "start",
            "--controller",
            f"http://[{ctl.ip6}]:{PORT}",
            "--token-file",
            str(tmp_path / "node" / "identity" / "node.token"),
            "--host-id",
            "intruder",
            "--state-dir",
            str(tmp_path / "plain"),
            "--engine-threads",
            str(ENGINE_THREADS),
            "--foreground",
        ],
        timeout=60,
    )
    assert plain.returncode == 1
    assert f"refusing to send node credentials over plain HTTP to {ctl.ip6}" in plain.stderr
    assert node.poll() is None and controller.poll() is None
