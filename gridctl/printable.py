"""Text that is safe to show a person: no terminal escapes, no lone surrogates.

Strings that came from another machine (a node's state, a GGUF file's name, an
engine's error, a router key's name) end up in an operator's terminal, in logs
and in JSON answers. A control character in them could move the cursor, clear
the screen or recolour the output (``ESC [ 2 J``); a lone surrogate cannot be
encoded as UTF-8 at all. Both are written out as visible escapes (``\\x1b``,
``\\ud800``) instead, so what a person reads is what was sent, and nothing acts
on their terminal.

``one_line`` is for table cells and labels (every control character escaped,
newlines too); ``lines`` keeps tab and newline for multi-line messages. The wire
schemas accept only text these functions would leave unchanged (the ``label``
and ``message`` definitions of ``schemas/defs/identifiers.schema.json``), so a
node passes what it reports through them before sending.
"""

from __future__ import annotations

import re

# C0 controls, DEL, C1 controls, and unpaired surrogates
_UNSAFE_ONE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_UNSAFE_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def one_line(text: str, limit: int | None = None) -> str:
    """``text`` with every control character and lone surrogate escaped, cut to ``limit``."""
    safe = _UNSAFE_ONE_LINE.sub(_escape, text)
    return safe if limit is None else safe[:limit]


def lines(text: str, limit: int | None = None) -> str:
    """Like ``one_line`` but keeping tab and newline (a multi-line message)."""
    safe = _UNSAFE_LINES.sub(_escape, text)
    return safe if limit is None else safe[:limit]
