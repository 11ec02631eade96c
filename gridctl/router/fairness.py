"""Each caller's share of a model's slots, so one caller cannot hold them all.

A caller is a router key or, for an anonymous loopback request, the client's
address. Sharing is work-conserving: a caller alone may use every slot of a
model. While a request of another caller waits for the same model:

- a caller already holding its share of the model's slots
  (``ceil(router_caller_slot_share x slots)``, at least one) takes no free slot
  on arrival: it joins the line behind the others;
- a released slot goes to the waiting request whose caller holds the fewest slots
  of the model, then whose caller was admitted least recently, then first come.
  With one caller this is plain first come, first served.

A caller may also have at most ``router_max_waiting_per_caller`` requests waiting
for one model; more are refused with 429 at once, so one caller cannot fill the
model's whole line either.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Iterable
from typing import Any

ANONYMOUS = "anonymous"


def caller_of(request: Any) -> str:
    """Who is asking: the router key's id, else the client's address."""
    key = getattr(request.state, "router_client", None)
    if key:
        return f"key:{key}"
    client = request.client
    return f"address:{client.host}" if client is not None and client.host else ANONYMOUS


def share_of(slots: int, share: float) -> int:
    """Slots one caller may hold while others wait: ``ceil(share x slots)``, at least 1."""
    return max(1, math.ceil(share * slots - 1e-9))


class CallerShares:
    """Slots held, requests waiting and the last admission, per model and caller."""

    def __init__(self) -> None:
        self._held: Counter[tuple[str, str]] = Counter()
        self._waiting: Counter[tuple[str, str]] = Counter()
        self._last: dict[tuple[str, str], int] = {}  # admission sequence number
        self._admissions = 0
        self._turns: dict[asyncio.Future[bool], str] = {}

    def held(self, model: str, caller: str) -> int:
        return self._held[(model, caller)]

    def waiting(self, model: str, caller: str) -> int:
        return self._waiting[(model, caller)]

    def admitted(self, model: str, caller: str) -> None:
        self._admissions += 1
        self._held[(model, caller)] += 1
        self._last[(model, caller)] = self._admissions

    def released(self, model: str, caller: str) -> None:
        key = (model, caller)
        self._held[key] -= 1
        if self._held[key] <= 0:
            del self._held[key]
            self._forget_if_idle(key)

    def joined(self, model: str, caller: str) -> None:
        self._waiting[(model, caller)] += 1

    def left(self, model: str, caller: str) -> None:
        key = (model, caller)
        self._waiting[key] -= 1
        if self._waiting[key] <= 0:
            del self._waiting[key]
            self._forget_if_idle(key)

    def queued(self, turn: asyncio.Future[bool], caller: str) -> None:
        self._turns[turn] = caller

    def dequeued(self, turn: asyncio.Future[bool]) -> None:
        self._turns.pop(turn, None)

    def others_waiting(self, model: str, caller: str) -> bool:
        """Whether a request of another caller waits for ``model``."""
        return any(m == model and c != caller for m, c in self._waiting)

    def in_order(
        self, model: str, line: Iterable[asyncio.Future[bool]]
    ) -> list[asyncio.Future[bool]]:
        """The waiting turns of ``model`` in the order a released slot goes to them."""
        ranked = []
        for position, turn in enumerate(line):
            if turn.done():
                continue
            caller = self._turns.get(turn, ANONYMOUS)
            key = (model, caller)
            ranked.append((self._held[key], self._last.get(key, 0), position, turn))
        ranked.sort(key=lambda r: r[:3])
        return [r[3] for r in ranked]

    def _forget_if_idle(self, key: tuple[str, str]) -> None:
        if self._held[key] <= 0 and self._waiting[key] <= 0:
            self._held.pop(key, None)
            self._waiting.pop(key, None)
            self._last.pop(key, None)
