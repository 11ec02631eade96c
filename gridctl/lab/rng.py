"""Seeded, named random streams for the lab (SplitMix64; no global random source).

Every stochastic part of a scenario draws from its own stream, derived from
the scenario seed and a stable name, so adding a draw in one part never shifts
another part's numbers, and the arrival trace is the same whatever the
strategy does with it.
"""

from __future__ import annotations

import hashlib
import math

_MASK = (1 << 64) - 1
_UNIT = 1.0 / (1 << 53)
# the SplitMix64 constants, for a hot loop that inlines ``uniform`` on a local copy of
# ``Stream.state`` (the arrival trace: tens of millions of draws at the maxima)
GOLDEN_GAMMA = 0x9E3779B97F4A7C15
MIX_1 = 0xBF58476D1CE4E5B9
MIX_2 = 0x94D049BB133111EB
MASK_64 = _MASK
UNIT_53 = _UNIT


class Stream:
    """A SplitMix64 generator: small, fast, and fully determined by its seed."""

    __slots__ = ("_state",)

    def __init__(self, seed: int, name: str) -> None:
        digest = hashlib.sha256(f"{seed}\x00{name}".encode()).digest()
        self._state = int.from_bytes(digest[:8], "big")

    @property
    def state(self) -> int:
        """The generator's position (a loop that inlines the step stores it back)."""
        return self._state

    @state.setter
    def state(self, value: int) -> None:
        self._state = value & _MASK

    def next_u64(self) -> int:
        self._state = (self._state + 0x9E3779B97F4A7C15) & _MASK
        z = self._state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return z ^ (z >> 31)

    def uniform(self) -> float:
        """A float in [0, 1) (``next_u64`` inlined: the lab draws millions of these)."""
        z = self._state = (self._state + 0x9E3779B97F4A7C15) & _MASK
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return ((z ^ (z >> 31)) >> 11) * _UNIT

    def below(self, n: int) -> int:
        """An integer in [0, n)."""
        return int(self.uniform() * n) if n > 0 else 0

    def poisson(self, lam: float) -> int:
        """A Poisson draw (Knuth for small means, a rounded normal for large ones)."""
        if lam <= 0:
            return 0
        if lam > 30:
            u1 = max(self.uniform(), 1e-12)
            u2 = self.uniform()
            normal = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
            return max(0, round(lam + math.sqrt(lam) * normal))
        return self.knuth_poisson(math.exp(-lam))

    def knuth_poisson(self, limit: float) -> int:
        """Knuth's Poisson draw for a mean ``lam`` <= 30 given ``limit = exp(-lam)``
        (a caller drawing many times with one mean computes the limit once)."""
        uniform = self.uniform
        k, p = 0, uniform()
        while p > limit:
            k += 1
            p *= uniform()
        return k

    def weighted(self, weights: list[float], total: float | None = None) -> int:
        """An index drawn with probability proportional to ``weights`` (``total``, when
        given, must be ``sum(weights)``: a caller reusing one list sums it once)."""
        if total is None:
            total = sum(weights)
        x = self.uniform() * total
        for i, w in enumerate(weights):
            x -= w
            if x < 0:
                return i
        return len(weights) - 1
