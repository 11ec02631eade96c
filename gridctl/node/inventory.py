"""When a heartbeat carries the host's full inventory, and when a small lease renewal does.

Every interval the node renews its lease with the controller; the inventory (resources
and the allocator envelope: residencies, artifacts, transfers, protection) goes in
full only when it changed since the last full one the controller took, every
``FULL_REFRESH_SECONDS`` regardless, and whenever the controller asks for it (it
does not hold the digest a lease names: a restart, a failover, lost state). This is
the split Kubernetes made for node status and node leases (KEP-0009): the large
report is written when it changes, the tiny one is renewed often.

"Changed" ignores what moves on every beat without meaning anything new: reported
ages grow with the clock (the view compares the moment they name, within
``STEADY_SECONDS``, as the controller does), and sampled memory and disk use jitter
(within ``NOISE_MB``, or 5 % of a small reading). Everything else (a residency's state
or load, a transfer's progress, the host state) is compared exactly.

Pure: the caller passes the clocks; nothing here reads one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

FULL_REFRESH_SECONDS = 300.0  # the full inventory goes at least this often
STEADY_SECONDS = 2.0  # an age naming a moment this close to the last one reported is no news
# sampled quantities that jitter between beats: a change below this is no news, unless it
# is a large share of what is there (a small volume filling up or freed is always news:
# 300 MB coming back on a nearly full disk decides whether a model's weights fit)
NOISE_MB = {"external_mb": 64, "disk_free_mb": 1024}
NOISE_FLOOR_MB = 16
NOISE_SHARE = 0.05
DIGEST_HEX = 32


def inventory_digest(resources: Mapping[str, Any], envelope: Mapping[str, Any]) -> str:
    """The label of one full inventory as sent (resources and envelope, canonical JSON)."""
    text = json.dumps(
        {"resources": resources, "allocator": envelope}, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_HEX]


def steady_view(value: Any, now: float) -> Any:
    """``value`` with every ``*_age_seconds`` turned into the moment it names (``now -
    age``), so an unchanged inventory reads the same at any later ``now``."""
    if isinstance(value, dict):
        view: dict[str, Any] = {}
        for key, item in value.items():
            if key.endswith("_age_seconds") and isinstance(item, int | float):
                view[key.removesuffix("_age_seconds") + "_moment"] = now - float(item)
            else:
                view[key] = steady_view(item, now)
        return view
    if isinstance(value, list):
        return [steady_view(item, now) for item in value]
    return value


def differs(old: Any, new: Any, key: str = "") -> bool:
    """Whether two steady views say something different (moments within
    ``STEADY_SECONDS`` and sampled megabytes within ``NOISE_MB`` are the same)."""
    if isinstance(old, dict) and isinstance(new, dict):
        if old.keys() != new.keys():
            return True
        return any(differs(old[k], new[k], k) for k in old)
    if isinstance(old, list) and isinstance(new, list):
        return len(old) != len(new) or any(
            differs(a, b, key) for a, b in zip(old, new, strict=True)
        )
    if _number(old) and _number(new):
        if key.endswith("_moment"):
            return bool(abs(old - new) > STEADY_SECONDS)
        if key in NOISE_MB:
            return bool(abs(old - new) >= noise_mb(key, old, new))
    return bool(type(old) is not type(new) or old != new)


def noise_mb(key: str, old: float, new: float) -> float:
    """The smallest change of a sampled quantity that is news: ``NOISE_MB`` on a large
    value, ``NOISE_SHARE`` of the larger reading on a small one (never under
    ``NOISE_FLOOR_MB``)."""
    share = NOISE_SHARE * max(abs(old), abs(new))
    return min(float(NOISE_MB[key]), max(float(NOISE_FLOOR_MB), share))


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class Inventory:
    """One full inventory at the moment it was built."""

    resources: dict[str, Any]
    envelope: dict[str, Any]
    view: Any  # ``steady_view`` of both, for comparing with a later one
    digest: str

    @classmethod
    def of(cls, resources: dict[str, Any], envelope: dict[str, Any], now: float) -> Inventory:
        view = steady_view({"resources": resources, "allocator": envelope}, now)
        return cls(resources, envelope, view, inventory_digest(resources, envelope))


class InventoryTracker:
    """What the controller last took in full from this node, and so what the next
    heartbeat must carry. Times are the caller's monotonic clock."""

    def __init__(self, refresh_seconds: float = FULL_REFRESH_SECONDS) -> None:
        if refresh_seconds <= 0:
            raise ValueError("refresh_seconds must be positive")
        self.refresh_seconds = refresh_seconds
        self._taken: Inventory | None = None
        self._taken_at = 0.0

    @property
    def digest(self) -> str | None:
        """The digest of the inventory the controller holds (None: it holds none)."""
        return None if self._taken is None else self._taken.digest

    def full_due(self, current: Inventory, at: float) -> bool:
        """Whether the next heartbeat carries ``current`` in full."""
        taken = self._taken
        return (
            taken is None
            or at - self._taken_at >= self.refresh_seconds
            or differs(taken.view, current.view)
        )

    def taken(self, inventory: Inventory, at: float) -> None:
        """The controller accepted ``inventory`` in full (a 2xx answer)."""
        self._taken, self._taken_at = inventory, at

    def forget(self) -> None:
        """The controller does not hold it (it asked, or another one answers now)."""
        self._taken = None
