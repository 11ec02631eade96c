"""What every managed child shares, whatever its engine: settings, network, environment.

A node starts children of several engine kinds; all of them bind the same
address (loopback, or the advertised one with the node's engine certificate),
get the same allowlisted environment, and are sized by the same operator
settings. These pieces live here so each adapter uses them instead of
restating them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gridctl.transport import wildcard_for

_ENV_ALLOWLIST = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "LD_LIBRARY_PATH", "TZ")


@dataclass(frozen=True)
class EngineSettings:
    """How children are started; small defaults keep a 2-core test machine usable."""

    threads: int = 2
    ctx_size: int = 2048
    parallel: int = 2  # requests one child serves at once: the heartbeat's max_concurrency
    ready_timeout: float = 180.0
    probe_timeout: float = 2.0
    extra_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class EngineNetwork:
    """Where children listen and how they are reached.

    Without an advertised address children bind loopback and speak plain HTTP
    (a fleet on one machine). With one they bind that address and serve HTTPS
    with the node's engine certificate (issued by the fleet CA for exactly the
    advertised addresses); probes verify them against the node's trust bundle.
    """

    advertise: str | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    ca_file: Path | None = None

    @property
    def tls(self) -> bool:
        return self.cert_file is not None and self.key_file is not None

    @property
    def bind(self) -> str:
        return (self.advertise or "127.0.0.1").strip("[]")

    @property
    def probe_address(self) -> str:
        """Where a free-port probe binds: the advertised family's wildcard, else loopback."""
        return wildcard_for(self.advertise) if self.advertise else "127.0.0.1"


def child_environment() -> dict[str, str]:
    """An allowlisted environment: nothing secret can be inherited by a child."""
    return {name: os.environ[name] for name in _ENV_ALLOWLIST if name in os.environ}
