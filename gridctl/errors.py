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

from dataclasses import dataclass, field


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
        subject = f"{self.kind or '?'}/{self.name or '?'}"
        pointer = self.pointer or "/"
        return f"{self.file}:{self.line}:{self.column}: {subject}: {pointer}: {self.message}"

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
        super().__init__(f"{pointer or '/'}: {message}")


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
