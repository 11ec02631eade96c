"""Named contexts, as kubectl has them: which fleet a command talks to.

A context records where a fleet's controller listens, the CA that verifies it
(when it serves TLS), the operator token file it wrote and, for fleets this
machine runs itself (``gridctl up``), each logical host's node state
directory. ``gridctl up`` and ``gridctl controller`` record one and make it
current; every other command uses the current context unless a flag
(``--controller``, ``--token-file``, ``--ca-file``) or the environment
(``GRIDCTL_CONTROLLER``, ``GRIDCTL_TOKEN_FILE``, ``GRIDCTL_CA_FILE``,
``GRIDCTL_CONTEXT``) says otherwise.

The file lives in the user's config directory (``$GRIDCTL_CONFIG_DIR``, else
``$XDG_CONFIG_HOME/gridctl``, else ``~/.config/gridctl``) as
``contexts.json``. It holds paths, never a secret.

A token file recorded for one controller is only ever sent to that
controller: ``--controller`` naming the current context's controller (or the
controller of exactly one other context, loopback spellings alike) keeps that
context's token and CA; naming any other URL uses neither.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from gridctl.errors import GridctlError

CONTEXTS_FILE = "contexts.json"
DEFAULT_CONTROLLER = "http://127.0.0.1:22100"


class ContextError(GridctlError):
    """The contexts file is unreadable, or a named context does not exist."""


def config_dir() -> Path:
    override = os.environ.get("GRIDCTL_CONFIG_DIR")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gridctl"


def contexts_path() -> Path:
    return config_dir() / CONTEXTS_FILE


def legacy_state_root() -> Path:
    """Where `gridctl up` keeps its state by default: $GRIDCTL_HOME, else ~/.local/state/gridctl."""
    home = os.environ.get("GRIDCTL_HOME")
    if home:
        return Path(home)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gridctl"


@dataclass(frozen=True)
class Context:
    name: str
    controller: str
    token_file: str | None = None
    ca_file: str | None = None
    state_root: str | None = None
    node_state_dirs: dict[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "controller": self.controller,
            "token_file": self.token_file,
            "ca_file": self.ca_file,
            "state_root": self.state_root,
            "node_state_dirs": dict(sorted(self.node_state_dirs.items())),
        }

    @staticmethod
    def from_json(name: str, raw: Any, path: Path) -> Context:
        if not isinstance(raw, dict) or not isinstance(raw.get("controller"), str):
            raise ContextError(f"{path}: context {name!r} has no controller URL; fix or remove it")
        dirs = raw.get("node_state_dirs") or {}
        return Context(
            name=name,
            controller=raw["controller"],
            token_file=_text(raw.get("token_file")),
            ca_file=_text(raw.get("ca_file")),
            state_root=_text(raw.get("state_root")),
            node_state_dirs={str(k): str(v) for k, v in dict(dirs).items()},
        )


def _text(value: Any) -> str | None:
    return str(value) if value else None


@dataclass
class ContextFile:
    path: Path
    current: str | None = None
    contexts: dict[str, Context] = field(default_factory=dict)

    def get(self, name: str) -> Context:
        try:
            return self.contexts[name]
        except KeyError:
            known = ", ".join(sorted(self.contexts)) or "none"
            raise ContextError(
                f"no context named {name!r} in {self.path} (known: {known}); "
                "`gridctl context ls` lists them"
            ) from None

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "current": self.current,
            "contexts": {n: c.as_json() for n, c in sorted(self.contexts.items())},
        }
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".contexts.")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=2)
            out.write("\n")
        os.replace(tmp, self.path)


def load(path: Path | None = None) -> ContextFile:
    path = path or contexts_path()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return ContextFile(path)
    except (OSError, ValueError) as exc:
        raise ContextError(
            f"cannot read the contexts file {path}: {exc}; fix or remove it"
        ) from None
    if not isinstance(raw, dict):
        raise ContextError(f"{path}: not a contexts file (expected an object); fix or remove it")
    contexts = {
        str(n): Context.from_json(str(n), c, path) for n, c in dict(raw.get("contexts", {})).items()
    }
    current = raw.get("current")
    return ContextFile(path, str(current) if current else None, contexts)


def record(context: Context, *, make_current: bool = True) -> ContextFile:
    """Add or replace ``context`` and (by default) make it the current one."""
    file = load()
    file.contexts[context.name] = context
    if make_current:
        file.current = context.name
    file.save()
    return file


def current_context() -> Context | None:
    """``$GRIDCTL_CONTEXT`` when set, else the file's current context, else none."""
    file = load()
    name = os.environ.get("GRIDCTL_CONTEXT") or file.current
    if not name:
        return None
    return file.get(name)


@dataclass(frozen=True)
class Target:
    """The controller a command talks to, and where each setting came from."""

    controller: str
    token_file: Path
    ca_file: Path | None
    context: str | None
    controller_from: str  # "--controller", "$GRIDCTL_CONTROLLER", "context NAME", "default"
    token_from: str

    def describe(self) -> str:
        where = f"context {self.context}" if self.context else "no context"
        return f"{where}; controller {self.controller}; token file {self.token_file}"


def _url_key(url: str) -> tuple[str, str, int, str]:
    """What makes two spellings of one controller URL the same: scheme, host (loopback
    names as one), port (the scheme's default when absent) and path."""
    parsed = urlparse(url.strip())
    host = (parsed.hostname or "").strip("[]").lower()
    if host in ("localhost", "::1") or host.startswith("127."):
        host = "loopback"
    try:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError:
        port = -1
    return parsed.scheme.lower(), host, port, parsed.path.rstrip("/")


def _same_url(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/") or _url_key(a) == _url_key(b)


def context_for_url(url: str, current: Context | None) -> Context | None:
    """The context recorded for the controller at ``url``: the current one when it is that
    controller, else the only other context that is (several: none, as ambiguous)."""
    if current is not None and _same_url(current.controller, url):
        return current
    matching = [c for c in load().contexts.values() if _same_url(c.controller, url)]
    return matching[0] if len(matching) == 1 else None


def resolve(
    controller: str | None = None,
    token_file: Path | None = None,
    ca_file: Path | None = None,
) -> Target:
    """Flags first, then the environment, then the current context, then the defaults."""
    context = current_context()
    env_url = os.environ.get("GRIDCTL_CONTROLLER")
    if controller:
        url, url_from = controller, "--controller"
    elif env_url:
        url, url_from = env_url, "$GRIDCTL_CONTROLLER"
    elif context is not None:
        url, url_from = context.controller, f"context {context.name}"
    else:
        url, url_from = DEFAULT_CONTROLLER, "default"
    url = url.rstrip("/")
    ours = context_for_url(url, context)
    env_token = os.environ.get("GRIDCTL_TOKEN_FILE")
    if token_file is not None:
        token, token_from = Path(token_file), "--token-file"
    elif env_token:
        token, token_from = Path(env_token), "$GRIDCTL_TOKEN_FILE"
    elif ours is not None and ours.token_file:
        token, token_from = Path(ours.token_file), f"context {ours.name}"
    else:
        token, token_from = legacy_state_root() / "up" / "controller" / "operator.token", "default"
    env_ca = os.environ.get("GRIDCTL_CA_FILE")
    ca: Path | None
    if ca_file is not None:
        ca = Path(ca_file)
    elif env_ca:
        ca = Path(env_ca)
    elif ours is not None and ours.ca_file:
        ca = Path(ours.ca_file)
    else:
        ca = None
    return Target(
        controller=url,
        token_file=token,
        ca_file=ca,
        context=ours.name if ours is not None else None,
        controller_from=url_from,
        token_from=token_from,
    )


def node_state_dir(host_id: str) -> Path | None:
    """The state directory the current context recorded for ``host_id``, if any."""
    context = current_context()
    if context is None:
        return None
    value = context.node_state_dirs.get(host_id)
    return Path(value) if value else None


def context_name_for(url: str) -> str:
    """A stable name for a controller: ``local`` (loopback, port 22100), ``local-PORT``
    (loopback), else ``HOST-PORT``."""
    parsed = urlparse(url)
    host = (parsed.hostname or "").strip("[]")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    if host in ("localhost", "::1") or host.startswith("127."):
        return "local" if port == 22100 else f"local-{port}"
    return f"{host.replace(':', '_')}-{port}"


__all__ = [
    "Context",
    "ContextError",
    "ContextFile",
    "Target",
    "config_dir",
    "context_name_for",
    "contexts_path",
    "current_context",
    "load",
    "node_state_dir",
    "record",
    "resolve",
]
