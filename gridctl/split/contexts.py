"""Which context lengths the planner tries, and which overrides it refuses.

Candidates are the native context, then every power of two strictly below it
(131,072, 65,536, 32,768, ...), highest first, stopping at the floor: 64k,
or the native context itself when that is smaller. Nothing above native is
ever tried. A non-power-of-two native context (say 200,000) is tried as is,
then 131,072 and 65,536.
"""

from __future__ import annotations

from gridctl.split.topologies import CONTEXT_FLOOR, RejectionReason


def context_floor(native_context: int) -> int:
    """The lowest acceptable context: 64k, capped at the native context."""
    return min(CONTEXT_FLOOR, native_context)


def context_candidates(native_context: int) -> tuple[int, ...]:
    """Context lengths to try, from native down to the floor."""
    floor = context_floor(native_context)
    candidates = [native_context]
    power = 1 << ((native_context - 1).bit_length() - 1) if native_context > 1 else 0
    while power >= floor and power > 0:
        candidates.append(power)
        power >>= 1
    return tuple(candidates)


def override_problem(native_context: int, requested: int) -> RejectionReason | None:
    """Why an explicit context override cannot be used, or ``None``."""
    if requested > native_context:
        return RejectionReason.CONTEXT_EXCEEDS_NATIVE
    if requested < context_floor(native_context):
        return RejectionReason.CONTEXT_BELOW_MINIMUM
    return None
