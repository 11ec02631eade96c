"""The controllers a node reports to: every configured URL, and the one holding authority.

Highly available controllers share one store; one of them holds authority.
A node is given all of their URLs (``--controller URL,URL,...``). Its control
heartbeats, which carry receipts and take commands, go to the one it believes
holds authority; a controller that does not hold it answers with
``leader_url`` and the node moves there, but only to a URL it was configured
with, so an answer can never send the node's credential somewhere new. Lease
heartbeats also go to the others, so every controller's router knows the
fleet. An unreachable controller makes the node try the next one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gridctl.errors import PermanentError


class ControllerSet:
    def __init__(self, urls: str | Sequence[str], *, validate: Callable[[str], None]) -> None:
        given = urls.split(",") if isinstance(urls, str) else list(urls)
        parsed = [u.strip().rstrip("/") for u in given if u.strip()]
        if not parsed:
            raise PermanentError("no controller URL given")
        for url in parsed:
            validate(url)
        self.urls = tuple(dict.fromkeys(parsed))
        self._current = 0
        self.mirrored: set[str] = set()  # followers this node has registered with

    @property
    def current(self) -> str:
        return self.urls[self._current]

    @property
    def several(self) -> bool:
        return len(self.urls) > 1

    def others(self) -> tuple[str, ...]:
        return tuple(u for u in self.urls if u != self.current)

    def follow(self, leader: object) -> bool:
        """Move to ``leader`` if it is a configured controller other than the current one."""
        if not isinstance(leader, str):
            return False
        target = leader.strip().rstrip("/")
        if target == self.current or target not in self.urls:
            return False
        self._current = self.urls.index(target)
        return True

    def fail_over(self) -> None:
        """The current controller did not answer: try the next one."""
        self._current = (self._current + 1) % len(self.urls)
