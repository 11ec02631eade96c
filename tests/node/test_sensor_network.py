"""Network link and route to the controller from a fake ``/sys`` and ``/proc`` laid out by the
test, and the protection machine they drive (time is an argument, no sleeps).

Losing the link or the route makes the host unhealthy (the spec's connectivity failure)
only after the debounce; it recovers after as many good samples and the cooldown.
Unreadable sources are unknown, and a node whose controller is on loopback ignores the
network altogether.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from types import SimpleNamespace

import pytest

from gridctl.domain.states import HostState
from gridctl.node.network_state import (
    controller_address,
    interface_states,
    needs_network,
    psutil_interface_states,
    read_network,
    route_up,
    with_network_rule,
)
from gridctl.node.protection import ProtectionMachine, ProtectionPolicy, Readings

ROUTE_HEADER = "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT"
DEFAULT_VIA_WLAN = "wlan0\t00000000\t0101A8C0\t0003\t0\t0\t600\t00000000\t0\t0\t0"
LAN_ON_WLAN = "wlan0\t0001A8C0\t00000000\t0001\t0\t0\t600\t00FFFFFF\t0\t0\t0"  # 192.168.1.0/24
V6_DEFAULT = (
    "00000000000000000000000000000000 00 00000000000000000000000000000000 00 "
    "fd000000000000000000000000000001 00000400 00000003 00000000 00000003     wlan0"
)
V6_LO = (
    "00000000000000000000000000000001 80 00000000000000000000000000000000 00 "
    "00000000000000000000000000000000 00000000 00000002 00000000 80200001       lo"
)
POLICY = ProtectionPolicy(debounce_samples=3, recovery_cooldown_seconds=60.0, network_required=True)


class FakeRoots:
    """``<tmp>/sys/class/net/IF/{operstate,carrier}`` and ``<tmp>/proc/net/{route,ipv6_route}``."""

    def __init__(self, root: Path) -> None:
        self.sys, self.proc = root / "sys", root / "proc"
        (self.proc / "net").mkdir(parents=True)
        self.link("lo", "unknown", carrier="1")

    def link(self, name: str, operstate: str, carrier: str | None = None) -> None:
        folder = self.sys / "class" / "net" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "operstate").write_text(operstate + "\n")
        if carrier is not None:
            (folder / "carrier").write_text(carrier + "\n")

    def routes(self, *lines: str, v6: tuple[str, ...] = ()) -> None:
        (self.proc / "net" / "route").write_text("\n".join([ROUTE_HEADER, *lines]) + "\n")
        (self.proc / "net" / "ipv6_route").write_text("".join(line + "\n" for line in v6))

    def read(self, url: str | None = "https://10.9.8.7:22100"):  # type: ignore[no-untyped-def]
        return read_network(url, sys_root=self.sys, proc_root=self.proc, stats=dict)


@pytest.fixture
def roots(tmp_path: Path) -> FakeRoots:
    made = FakeRoots(tmp_path)
    made.link("wlan0", "up")
    made.link("eth0", "down")
    made.routes(DEFAULT_VIA_WLAN, LAN_ON_WLAN)
    return made


def test_the_link_is_up_while_any_interface_but_loopback_is(roots: FakeRoots) -> None:
    assert interface_states(roots.sys) == {"wlan0": True, "eth0": False}
    assert roots.read().link_up is True
    roots.link("wlan0", "down")
    assert roots.read().link_up is False  # lo being "up" does not count
    roots.link("wlan0", "unknown", carrier="1")  # a driver without operstate: the carrier
    assert roots.read().link_up is True
    roots.link("wlan0", "dormant")
    assert roots.read().link_up is False


def test_psutil_answers_where_there_is_no_sysfs_and_nothing_reads_unknown(
    tmp_path: Path,
) -> None:
    stats = {
        "lo0": SimpleNamespace(isup=True, flags="up,loopback"),
        "en0": SimpleNamespace(isup=False, flags="up,broadcast"),
    }
    assert psutil_interface_states(lambda: stats) == {"en0": False}

    def broken() -> dict[str, object]:
        raise OSError("no")

    assert psutil_interface_states(broken) is None
    empty = read_network("http://10.0.0.1:1", sys_root=tmp_path / "no", proc_root=tmp_path / "no")
    assert empty.route_up is None  # no /proc: unknown, not "no route"
    none = read_network(None, sys_root=tmp_path / "no", proc_root=tmp_path, stats=broken)
    assert none.link_up is None


def test_a_route_to_the_controller_or_a_default_route(roots: FakeRoots) -> None:
    controller = ipaddress.ip_address("10.9.8.7")
    links = {"wlan0": True}
    assert route_up(roots.proc, controller, links) is True  # the default route covers it
    roots.routes(LAN_ON_WLAN)  # the default route is gone
    assert route_up(roots.proc, controller, links) is False
    assert route_up(roots.proc, ipaddress.ip_address("192.168.1.20"), links) is True
    assert route_up(roots.proc, None, links) is False  # a host name needs a default route
    roots.routes(DEFAULT_VIA_WLAN)
    assert route_up(roots.proc, None, {"wlan0": False}) is False  # left on a downed link
    roots.routes(v6=(V6_LO,))
    assert route_up(roots.proc, ipaddress.ip_address("2001:db8::1"), links) is False
    roots.routes(v6=(V6_DEFAULT, V6_LO))
    assert route_up(roots.proc, ipaddress.ip_address("2001:db8::1"), links) is True
    assert route_up(roots.proc, controller, links) is False  # v4 target, v6 routes only


def test_where_the_controller_is_decides_whether_the_network_matters() -> None:
    assert controller_address("https://[fd00::5]:22100/x") == ipaddress.ip_address("fd00::5")
    assert controller_address("http://10.0.0.2:22100,http://10.0.0.3:22100") == (
        ipaddress.ip_address("10.0.0.2")
    )
    assert controller_address("https://ctl.example:22100") is None
    for local in ("http://127.0.0.1:22100", "http://[::1]:1", "http://localhost:22100"):
        assert needs_network(local) is False, local
    for remote in ("https://10.0.0.2:22100", "https://ctl.example:22100"):
        assert needs_network(remote) is True, remote
    auto = ProtectionPolicy()
    assert with_network_rule(auto, "http://127.0.0.1:1").network_required is False
    assert with_network_rule(auto, "https://10.0.0.2:1").network_required is True
    forced = ProtectionPolicy(network_required=True)
    assert with_network_rule(forced, "http://127.0.0.1:1").network_required is True


def _drive(machine: ProtectionMachine, roots: FakeRoots, times: list[float]) -> list[HostState]:
    states = []
    for t in times:
        reading = roots.read()
        readings = Readings(network_link_up=reading.link_up, network_route_up=reading.route_up)
        states.append(machine.step(readings, t).state)
    return states


def test_link_loss_makes_the_host_unhealthy_after_the_debounce_and_recovery_waits(
    roots: FakeRoots,
) -> None:
    machine = ProtectionMachine(POLICY)
    A, U = HostState.ACCEPTING, HostState.UNHEALTHY
    assert _drive(machine, roots, [0, 2]) == [A, A]
    roots.link("wlan0", "down")
    assert _drive(machine, roots, [4, 6]) == [A, A]  # two samples: a blip
    roots.link("wlan0", "up")
    assert _drive(machine, roots, [8]) == [A]  # the blip did nothing
    roots.link("wlan0", "down")
    assert _drive(machine, roots, [10, 12, 14]) == [A, A, U]
    assert "network_link_down" in machine.step(Readings(network_link_up=False), 16).reasons
    roots.link("wlan0", "up")
    # three good samples clear the condition; the state loosens 60 s after it last held
    assert _drive(machine, roots, [18, 20, 22]) == [U, U, U]
    assert _drive(machine, roots, [70, 81]) == [U, A]


def test_losing_the_route_to_the_controller_is_the_same_failure(roots: FakeRoots) -> None:
    machine = ProtectionMachine(POLICY)
    roots.routes(LAN_ON_WLAN)  # Wi-Fi up, but the gateway is gone
    states = _drive(machine, roots, [0, 1, 2])
    assert states[-1] is HostState.UNHEALTHY
    assert machine.step(Readings(network_link_up=True, network_route_up=False), 3).reasons == (
        "network_route_lost",
    )


def test_unknown_network_and_a_loopback_controller_change_nothing(tmp_path: Path) -> None:
    machine = ProtectionMachine(POLICY)
    for t in range(5):
        decision = machine.step(Readings(), float(t))
    assert decision.state is HostState.ACCEPTING
    assert {"network_link_down", "network_route_lost"} <= set(decision.unknown)
    local = ProtectionMachine(with_network_rule(ProtectionPolicy(), "http://127.0.0.1:1"))
    for t in range(5):
        decision = local.step(Readings(network_link_up=False, network_route_up=False), float(t))
    assert decision.state is HostState.ACCEPTING and decision.reasons == ()
    assert "network_link_down" not in decision.unknown


def test_the_lost_state_is_policy(roots: FakeRoots) -> None:
    machine = ProtectionMachine(
        ProtectionPolicy(debounce_samples=1, network_required=True, network_lost_state="paused")
    )
    assert machine.step(Readings(network_link_up=False), 0).state is HostState.PAUSED
