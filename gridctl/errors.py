"""The exception tree of gridctl, in one place.

    GridctlError                  base of everything gridctl raises on purpose
    ├── ConfigError               desired state could not be loaded (carries issues)
    ├── WireError                 a message crossing a process boundary is malformed
    ├── FenceError                a command was refused by the authority fence
    ├── TransientError            worth retrying after ``retry_after`` seconds
    └── PermanentError            retrying will not help

An unplaceable model is data in the plan, never an exception. Third-party
exceptions are translated at the boundary that sees them, with ``raise ... from``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class GridctlError(Exception):
    """Base class of every error gridctl raises deliberately."""


@dataclass(frozen=True, order=True)
class ConfigIssue:
    """One problem found while loading desired state.

    ``line`` and ``column`` are 1-based positions in ``file`` (0 when unknown);
    ``pointer`` is a JSON pointer into the offending document.
    """

    file: str
    line: int
    column: int
    kind: str = ""
    name: str = ""
    pointer: str = ""
    message: str = ""
    severity: str = field(default="error", compare=False)

    def render(self) -> str:
        return issue_text(
            self.file, self.line, self.column, self.kind, self.name, self.pointer, self.message
        )

    def as_json(self) -> dict[str, object]:
        return {
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "kind": self.kind,
            "name": self.name,
            "pointer": self.pointer,
            "message": self.message,
        }


def issue_text(
    file: str, line: int, column: int, kind: str, name: str, pointer: str, message: str
) -> str:
    """``FILE:LINE:COL: KIND/NAME: POINTER: message``, each part shown only when known:
    no ``?`` for an unknown document, no ``0:0`` for an unknown position, no ``/`` for
    the whole document."""
    where = file
    if file and line > 0:
        where += f":{line}:{column}" if column > 0 else f":{line}"
    subject = f"{kind}/{name}" if kind and name else kind or name
    parts = [p for p in (where, subject, pointer if pointer not in ("", "/") else "") if p]
    return ": ".join([*parts, message or "invalid"])


def issue_json_text(issue: Mapping[str, Any]) -> str:
    """``issue_text`` of an issue's JSON form (``ConfigIssue.as_json``), as status carries it."""

    def number(key: str) -> int:
        value = issue.get(key)
        return value if isinstance(value, int) else 0

    return issue_text(
        str(issue.get("file") or ""),
        number("line"),
        number("column"),
        str(issue.get("kind") or ""),
        str(issue.get("name") or ""),
        str(issue.get("pointer") or ""),
        str(issue.get("message") or ""),
    )


class ConfigError(GridctlError):
    """Desired state was rejected; ``issues`` lists every error found."""

    def __init__(self, issues: list[ConfigIssue], warnings: list[ConfigIssue] | None = None):
        self.issues = sorted(issues)
        self.warnings = sorted(warnings or [])
        first = self.issues[0].render() if self.issues else "invalid desired state"
        more = f" (and {len(self.issues) - 1} more)" if len(self.issues) > 1 else ""
        super().__init__(first + more)


class WireError(GridctlError):
    """A wire message failed validation; ``pointer`` names the field."""

    def __init__(self, message: str, pointer: str = ""):
        self.pointer = pointer
        super().__init__(f"{pointer}: {message}" if pointer and pointer != "/" else message)


class FenceError(GridctlError):
    """A command was refused by the authority fence; ``reason`` is a stable code."""

    def __init__(self, reason: str, detail: str = ""):
        self.reason = reason
        super().__init__(f"{reason}: {detail}" if detail else reason)


class TransientError(GridctlError):
    """A failure that may succeed if retried after ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: float = 1.0):
        self.retry_after = retry_after
        super().__init__(message)


class PermanentError(GridctlError):
    """A failure that retrying cannot fix."""
