"""Plan generations: ``epoch:sequence:digest``.

The epoch is a persistent hex identifier of the controller's durable state,
the sequence a 20-digit zero-padded counter that only grows, and the digest
the plan's input digest. Plans are therefore ordered across wall-clock
changes; two generations of different epochs are not comparable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gridctl.errors import WireError

GENERATION_PATTERN = re.compile(r"^([0-9a-f]+):([0-9]{20}):([0-9a-f]+)\Z")
MAX_SEQUENCE = 10**20 - 1


@dataclass(frozen=True)
class PlanGeneration:
    epoch: str
    sequence: int
    digest: str

    def __post_init__(self) -> None:
        if not 0 <= self.sequence <= MAX_SEQUENCE:
            raise ValueError(f"plan generation sequence out of range: {self.sequence}")

    def __str__(self) -> str:
        return f"{self.epoch}:{self.sequence:020d}:{self.digest}"

    @classmethod
    def parse(cls, text: str) -> PlanGeneration:
        match = GENERATION_PATTERN.match(text)
        if match is None:
            raise WireError(f"malformed plan generation {text[:80]!r}", "/plan_generation")
        return cls(match.group(1), int(match.group(2)), match.group(3))

    def comparable(self, other: PlanGeneration) -> bool:
        return self.epoch == other.epoch

    def older_than(self, other: PlanGeneration) -> bool:
        """True only within one epoch and with a smaller sequence."""
        return self.comparable(other) and self.sequence < other.sequence
