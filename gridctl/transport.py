"""Where a secret may travel: loopback checks, URL rules and TLS contexts.

One rule holds for every client gridctl has (node agent, operator CLI, router,
prober): a credential, an engine key or a user's prompt crosses plain HTTP only
on loopback. Off loopback everything is HTTPS verified against the fleet's
trust bundle (or, for the controller's clients, an operator-supplied CA file).
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import ssl
from pathlib import Path
from urllib.parse import urlparse

from gridctl.errors import PermanentError


class InsecureTransport(PermanentError):
    """A secret would have crossed plain HTTP off loopback."""


def is_loopback(host: str) -> bool:
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def url_host(url: str) -> str:
    return (urlparse(url).hostname or "").strip("[]")


@functools.lru_cache(maxsize=4096)  # asked per proxied request, of a fleet's few endpoints
def is_plain_off_loopback(url: str) -> bool:
    parsed = urlparse(url)
    return parsed.scheme != "https" and not is_loopback(parsed.hostname or "")


def require_safe_url(url: str, what: str) -> None:
    """Refuse ``url`` if sending ``what`` to it would cross plain HTTP off loopback."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https"):
        raise InsecureTransport(f"URL must be http(s): {url}")
    if parsed.scheme == "http" and not is_loopback(parsed.hostname or ""):
        raise InsecureTransport(
            f"refusing to send {what} over plain HTTP to {parsed.hostname}; use https://"
        )


def address_family(address: str) -> str:
    """``ipv4`` / ``ipv6`` for an IP literal, ``dns`` for a name."""
    try:
        return "ipv6" if ipaddress.ip_address(address.strip("[]")).version == 6 else "ipv4"
    except ValueError:
        return "dns"


def wildcard_for(address: str) -> str:
    """The listener for an advertised address's family: ``0.0.0.0`` or ``::``."""
    return "::" if address_family(address) == "ipv6" else "0.0.0.0"


def socket_family(address: str) -> socket.AddressFamily:
    return socket.AF_INET6 if address_family(address) == "ipv6" else socket.AF_INET


def host_in_url(address: str) -> str:
    """An address as it appears in a URL (IPv6 in brackets)."""
    bare = address.strip("[]")
    return f"[{bare}]" if address_family(bare) == "ipv6" else bare


def base_url(scheme: str, address: str, port: int) -> str:
    return f"{scheme}://{host_in_url(address)}:{port}"


def client_context(ca_file: Path | None, *, system: bool = False) -> ssl.SSLContext:
    """A verifying client context: the CA file (and the system store when asked)."""
    context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    if system and ca_file is not None:
        context.load_default_certs()
    return context


def verify_setting(url: str, ca_file: Path | None) -> ssl.SSLContext | bool:
    """What httpx's ``verify=`` should be for ``url`` given an optional CA file."""
    if urlparse(url).scheme != "https":
        return True
    if ca_file is not None:
        return client_context(ca_file)
    return True
