"""Simulated machines: namespaces that reach each other, and nothing else, and always go away."""

from __future__ import annotations

import ipaddress
import json
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.netfleet import (
    Host,
    NetFleet,
    NetFleetError,
    family_namespaces,
    list_namespaces,
    namespace_pids,
    require_netns,
    sweep_stale,
    wait_http,
)

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


def wait_until(what: str, probe: Any, deadline: float = 30.0) -> Any:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        value = probe()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {deadline:.0f}s waiting for {what}")


def serve_token(
    host: Host, directory: Path, bind: str, port: int
) -> tuple[str, subprocess.Popen[bytes]]:
    token = secrets.token_hex(16)
    (directory / "token.txt").write_text(token)
    server = host.popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", bind, "--directory", directory],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return token, server


def root_tables() -> dict[str, Any]:
    def ip_json(*args: str) -> Any:
        return json.loads(
            subprocess.run(["ip", "-j", *args], capture_output=True, check=True).stdout
        )

    return {
        "links": sorted(link["ifname"] for link in ip_json("link", "show")),
        "addresses": sorted(
            info["local"] for link in ip_json("addr", "show") for info in link["addr_info"]
        ),
        "routes4": ip_json("-4", "route", "show", "table", "all"),
        "routes6": ip_json("-6", "route", "show", "table", "all"),
    }


def test_two_hosts_talk_http_over_ipv4(netfleet: NetFleet, tmp_path: Path) -> None:
    a = netfleet.add_host("a")
    b = netfleet.add_host("b")
    token, server = serve_token(a, tmp_path, a.ip, 8000)

    answer = wait_http(b, a.url(8000, path="/token.txt"), watch=server, deadline=30)

    assert (answer.status, answer.text) == (200, token)
    assert ipaddress.ip_address(a.ip) in ipaddress.ip_network(netfleet.ipv4_network)
    assert a.ip != b.ip


def test_waiting_stops_as_soon_as_the_watched_server_exits(netfleet: NetFleet) -> None:
    a = netfleet.add_host("a")
    b = netfleet.add_host("b")
    crashing = a.popen([sys.executable, "-c", "raise SystemExit(3)"])
    start = time.monotonic()

    with pytest.raises(AssertionError, match=r"process \d+ exited before answering"):
        wait_http(b, a.url(8000), watch=crashing, deadline=60)

    assert time.monotonic() - start < 30
    assert crashing.wait(timeout=30) == 3


def test_two_hosts_talk_http_over_ipv6(netfleet: NetFleet, tmp_path: Path) -> None:
    a = netfleet.add_host("a")
    b = netfleet.add_host("b")
    token, server = serve_token(a, tmp_path, a.ip6, 8000)

    answer = wait_http(b, a.url(8000, ipv6=True, path="/token.txt"), watch=server, deadline=30)

    assert answer.text == token
    assert a.url(8000, ipv6=True) == f"http://[{a.ip6}]:8000"
    assert ipaddress.ip_address(a.ip6) in ipaddress.ip_network(netfleet.ipv6_network)


def test_each_host_has_its_own_loopback_unreachable_from_elsewhere(
    netfleet: NetFleet, tmp_path: Path
) -> None:
    a = netfleet.add_host("a")
    b = netfleet.add_host("b")
    port = 20000 + secrets.randbelow(20000)
    token, server = serve_token(a, tmp_path, "127.0.0.1", port)
    url = f"http://127.0.0.1:{port}/token.txt"

    assert wait_http(a, url, watch=server, deadline=30).text == token
    from_b = b.python(
        "import socket\n"
        "try:\n"
        "    socket.create_connection(('127.0.0.1', ARGS), timeout=5).close()\n"
        "    result = 'connected'\n"
        "except OSError as exc:\n"
        "    result = type(exc).__name__\n",
        port,
    )
    assert from_b == "ConnectionRefusedError"  # refused at once, not a 5 s timeout
    # The root namespace's loopback is shared with other programs, so the proof there
    # is that whatever may answer on that port, it is never this server's token.
    try:
        reached = httpx.get(url, timeout=2.0).text
    except httpx.HTTPError:  # refused, or some unrelated program that does not speak HTTP
        reached = ""
    assert token not in reached


def test_root_namespace_gains_no_address_link_or_route(netfleet: NetFleet) -> None:
    before = root_tables()
    a = netfleet.add_host("a")
    netfleet.add_host("b")
    after = root_tables()

    assert after == before
    fleet_networks = [
        ipaddress.ip_network(netfleet.ipv4_network),
        ipaddress.ip_network(netfleet.ipv6_network),
    ]
    for address in after["addresses"]:
        assert not any(ipaddress.ip_address(address) in net for net in fleet_networks)
    # Inside the host, its addresses sit on its own link, next to its own loopback.
    inside = json.loads(a.run(["ip", "-j", "addr", "show"]).stdout)
    assert {link["ifname"] for link in inside} == {"lo", "eth0"}
    assert {info["local"] for link in inside for info in link["addr_info"]} >= {
        "127.0.0.1",
        a.ip,
        a.ip6,
    }


def test_python_runs_inside_the_namespace_and_returns_json(netfleet: NetFleet) -> None:
    a = netfleet.add_host("a")

    result = a.python(
        "import socket\n"
        "result = {'names': sorted(name for _, name in socket.if_nameindex()), 'x': ARGS['x'] * 2}",
        {"x": 21},
    )

    assert result == {"names": ["eth0", "lo"], "x": 42}
    with pytest.raises(NetFleetError, match="ZeroDivisionError"):
        a.python("result = 1 / 0")


def test_add_host_refuses_names_that_would_not_fit(netfleet: NetFleet) -> None:
    with pytest.raises(ValueError, match="1-12 lowercase"):
        netfleet.add_host("averyveryverylongname")
    with pytest.raises(ValueError, match="not 'hub'"):
        netfleet.add_host("hub")
    netfleet.add_host("a")
    with pytest.raises(ValueError, match="already exists"):
        netfleet.add_host("a")


@pytest.mark.parametrize("failure", [RuntimeError, KeyboardInterrupt])
def test_teardown_leaves_nothing_when_the_body_raises(
    netfleet_session: None, failure: type[BaseException]
) -> None:
    with pytest.raises(failure), NetFleet() as net:
        a = net.add_host("a")
        net.add_host("b")
        sleeper = a.popen(SLEEPER)
        wait_until("the sleeper inside a", lambda: sleeper.pid in a.pids())
        raise failure("body failed")

    assert [name for name in list_namespaces() if name.startswith(net.prefix + "-")] == []
    assert sleeper.returncode is not None


def test_sweep_removes_only_a_dead_runs_namespaces(netfleet: NetFleet) -> None:
    ours = netfleet.add_host("a")
    live = run_child_fleet("hold")  # first: a later run's own start-up sweep would clear the crash
    crashed = run_child_fleet("crash")
    try:
        removed = sweep_stale()

        # Another test run on this machine may be sweeping the crashed run at the same time
        # (it then holds the crashed run's lock, and this sweep skips it); either way the
        # crashed run's namespaces and orphan go away and no live run loses anything.
        wait_until(
            "the crashed run's namespaces to go",
            lambda: not set(crashed["namespaces"]) & set(list_namespaces()),
        )
        wait_until("the crashed run's orphan to die", lambda: not pid_alive(crashed["sleeper"]))
        assert not set(removed) & {*live["namespaces"], *netfleet.namespaces()}
        assert set(live["namespaces"]) <= set(list_namespaces())
        assert ours.namespace in list_namespaces()
        assert namespace_pids(live["namespaces"][-1]) == [live["sleeper"]]
    finally:
        live["process"].stdin.close()
        assert live["process"].wait(timeout=30) == 0
    assert not set(live["namespaces"]) & set(family_namespaces())


CHILD_FLEET = """
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
from tests.netfleet import NetFleet
net = NetFleet().__enter__()
a = net.add_host("a")
sleeper = a.popen([sys.executable, "-c", "import time; time.sleep(600)"])
while sleeper.pid not in a.pids():
    time.sleep(0.02)
print(json.dumps({"namespaces": net.namespaces(), "sleeper": sleeper.pid}), flush=True)
if sys.argv[2] == "crash":
    os._exit(0)  # no teardown: what a killed test run leaves behind
sys.stdin.read()
net.close()
"""


def run_child_fleet(mode: str) -> dict[str, Any]:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD_FLEET, str(ROOT), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line, f"child fleet ({mode}) printed nothing; exit {child.wait(timeout=30)}"
    report: dict[str, Any] = json.loads(line)
    if mode == "crash":
        assert child.wait(timeout=30) == 0
    report["process"] = child
    return report


def pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def test_without_root_the_check_names_the_reason() -> None:
    require_netns()  # this suite runs as root; the refusal is seen by a child that drops euid
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, sys; sys.path.insert(0, sys.argv[1])\n"
            "from tests.netfleet import require_netns\n"
            "os.seteuid(65534)\n"
            "require_netns()",
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "network-namespace tests must run as root (euid is 65534)" in done.stderr


def test_controller_process_serves_healthz_inside_its_namespace(
    netfleet: NetFleet, tmp_path: Path
) -> None:
    ctl = netfleet.add_host("ctl")
    a = netfleet.add_host("a")
    with (tmp_path / "controller.log").open("wb") as log:
        controller = ctl.popen(
            [
                sys.executable,
                "-m",
                "gridctl",
                "controller",
                "--state",
                tmp_path / "state",
                "--listen",
                "127.0.0.1:22100",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )

    answer = wait_http(ctl, "http://127.0.0.1:22100/healthz", watch=controller, deadline=60)

    assert json.loads(answer.text) == {"ok": True}
    refused = a.python(
        "import httpx\n"
        "try:\n"
        "    httpx.get('http://127.0.0.1:22100/healthz', timeout=5)\n"
        "    result = 'answered'\n"
        "except httpx.ConnectError:\n"
        "    result = 'refused'\n"
    )
    assert refused == "refused"
    assert controller.poll() is None, (tmp_path / "controller.log").read_text()
    assert controller.pid in ctl.pids()  # the fleet's teardown stops it
