"""Network link and route to the controller, read from sysfs and procfs (psutil as fallback).

A laptop that loses its Wi-Fi should stop taking work before the controller's
heartbeat timeout notices: two readings feed the protection loop.

- ``link_up``: some non-loopback interface is up (``/sys/class/net/*/operstate``,
  or its carrier when the driver reports ``unknown``; ``psutil.net_if_stats`` where
  there is no sysfs).
- ``route_up``: the kernel has a usable route to the controller's address, or a
  default route when the controller is named by a host name
  (``/proc/net/route`` and ``/proc/net/ipv6_route``; a route through an interface
  that is down does not count).

Each is ``None`` when it cannot be read. The roots are arguments so tests lay out a
fake ``/sys`` and ``/proc``.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from gridctl.node.protection import ProtectionPolicy

RTF_UP = 0x0001
RTF_REJECT = 0x0200
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class NetworkReading:
    link_up: bool | None
    route_up: bool | None


def interface_states(sys_root: Path) -> dict[str, bool] | None:
    """Non-loopback interfaces by name -> up, from sysfs; None without a readable sysfs."""
    base = sys_root / "class" / "net"
    try:
        names = sorted(p.name for p in base.iterdir())
    except OSError:
        return None
    states: dict[str, bool] = {}
    for name in names:
        if name == "lo":
            continue
        try:
            operstate = (base / name / "operstate").read_text().strip()
        except OSError:
            continue
        if operstate == "unknown":  # some drivers report no state: the carrier decides
            try:
                states[name] = (base / name / "carrier").read_text().strip() == "1"
            except OSError:
                continue
        else:
            states[name] = operstate == "up"
    return states


def psutil_interface_states(
    stats: Callable[[], dict[str, Any]] = psutil.net_if_stats,
) -> dict[str, bool] | None:
    """The same from psutil (non-Linux systems); loopback interfaces left out."""
    try:
        found = stats()
    except (OSError, RuntimeError):
        return None
    return {
        name: bool(s.isup)
        for name, s in found.items()
        if not name.startswith("lo") and "LOOPBACK" not in str(getattr(s, "flags", ""))
    }


def _ipv4_routes(text: str) -> Iterable[tuple[str, ipaddress.IPv4Network]]:
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8:
            continue
        try:
            flags = int(fields[3], 16)
            dest = ipaddress.IPv4Address(bytes.fromhex(fields[1])[::-1])
            mask = ipaddress.IPv4Address(bytes.fromhex(fields[7])[::-1])
            network = ipaddress.IPv4Network(f"{dest}/{mask}", strict=False)
        except ValueError:
            continue
        if flags & RTF_UP and not flags & RTF_REJECT:
            yield fields[0], network


def _ipv6_routes(text: str) -> Iterable[tuple[str, ipaddress.IPv6Network]]:
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 10 or fields[9] == "lo":
            continue
        try:
            dest = ipaddress.IPv6Address(bytes.fromhex(fields[0]))
            network = ipaddress.IPv6Network(f"{dest}/{int(fields[1], 16)}", strict=False)
            flags = int(fields[8], 16)
        except ValueError:
            continue
        if flags & RTF_UP and not flags & RTF_REJECT and not network.is_link_local:
            yield fields[9], network


def route_up(proc_root: Path, target: Address | None, links: dict[str, bool] | None) -> bool | None:
    """Whether a route reaches ``target`` (any default route when None)."""
    texts = []
    for name in ("route", "ipv6_route"):
        try:
            texts.append((name, (proc_root / "net" / name).read_text()))
        except OSError:
            continue
    if not texts:
        return None
    for name, text in texts:
        routes = _ipv4_routes(text) if name == "route" else _ipv6_routes(text)
        for interface, network in routes:
            if links is not None and links.get(interface) is False:
                continue  # a route left behind on an interface that is down
            if target is None:
                if network.prefixlen == 0:
                    return True
            elif network.version == target.version and target in network:
                return True
    return False


def _host(url: str) -> str:
    """The host part of the (first) controller URL."""
    first = url.split(",", 1)[0].strip()
    return first.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]


def controller_address(url: str | None) -> Address | None:
    """The controller's IP address when its URL names one (None for a host name)."""
    if not url:
        return None
    host = _host(url)
    if host.startswith("["):
        host = host[1:].split("]", 1)[0]
    elif host.count(":") == 1:
        host = host.split(":", 1)[0]
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def needs_network(url: str | None) -> bool:
    """A node whose controller is on this machine's loopback does not need the network."""
    address = controller_address(url)
    if address is not None:
        return not address.is_loopback
    return _host(url or "").split(":", 1)[0].lower() != "localhost"


def with_network_rule(policy: ProtectionPolicy, controller_url: str | None) -> ProtectionPolicy:
    """``network_required: null`` decided for this node: required unless its controller is
    on this machine's loopback (an embedded fleet keeps serving with the Wi-Fi off)."""
    if policy.network_required is not None:
        return policy
    return dataclasses.replace(policy, network_required=needs_network(controller_url))


def read_network(
    controller_url: str | None,
    *,
    sys_root: Path = Path("/sys"),
    proc_root: Path = Path("/proc"),
    stats: Callable[[], dict[str, Any]] = psutil.net_if_stats,
) -> NetworkReading:
    links = interface_states(sys_root)
    if links is None:
        links = psutil_interface_states(stats)
    link = None if links is None else any(links.values())  # no interface at all: down
    return NetworkReading(
        link_up=link, route_up=route_up(proc_root, controller_address(controller_url), links)
    )
