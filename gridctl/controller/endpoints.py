"""Which engine endpoints a node may advertise.

The router sends the engine key and users' prompts to whatever endpoint a
node reports, so the controller accepts an endpoint only if it is on loopback
(a fleet on one machine) or HTTPS on an address the node's credential was
issued for (``adv``, granted at join time). Anything else is refused with a
400 naming the residency row, before any state changes.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from gridctl.errors import WireError
from gridctl.transport import is_loopback


def check_engine_endpoints(payload: Any, claims: dict[str, object]) -> None:
    if not isinstance(payload, dict):
        return  # the schema check names the problem
    envelope = payload.get("allocator")
    rows = envelope.get("residencies") if isinstance(envelope, dict) else None
    if not isinstance(rows, list):
        return
    granted_raw = claims.get("adv")
    granted = {str(a) for a in granted_raw} if isinstance(granted_raw, list) else set()
    for index, row in enumerate(rows):
        endpoint = row.get("endpoint") if isinstance(row, dict) else None
        if not isinstance(endpoint, str):
            continue
        pointer = f"/allocator/residencies/{index}/endpoint"
        try:
            parsed = urlparse(endpoint)
            host = (parsed.hostname or "").strip("[]")
            parsed.port  # noqa: B018 - raises on a malformed port
        except ValueError:
            raise WireError(f"endpoint {endpoint!r} is not a URL", pointer) from None
        if parsed.scheme not in ("http", "https") or not host:
            raise WireError(f"endpoint {endpoint!r} must be an http(s) URL", pointer)
        if is_loopback(host):
            continue
        if parsed.scheme != "https":
            raise WireError(
                f"endpoint {endpoint!r} is plain HTTP off loopback; engines on other machines "
                "must serve HTTPS with the node's engine certificate",
                pointer,
            )
        if host not in granted:
            allowed = ", ".join(sorted(granted)) or "loopback only"
            raise WireError(
                f"endpoint host {host} is not an address this node advertises ({allowed})",
                pointer,
            )
