"""An HTTP client for the controller, shared by the CLI commands and the dashboard.

Every call takes an httpx transport seam so tests can run the controller
in-process. The operator capability is read from a file, never from argv.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import httpx

from gridctl.credentials import OPERATOR_TOKEN_HEADER, CredentialError, read_operator_capability
from gridctl.errors import GridctlError
from gridctl.transport import InsecureTransport, require_safe_url, verify_setting

DEFAULT_CONTROLLER = "http://127.0.0.1:22100"


def default_state_root() -> Path:
    """Where `gridctl up` keeps its state: $GRIDCTL_HOME, else ~/.local/state/gridctl."""
    home = os.environ.get("GRIDCTL_HOME")
    if home:
        return Path(home)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gridctl"


def default_token_file() -> Path:
    env = os.environ.get("GRIDCTL_TOKEN_FILE")
    if env:
        return Path(env)
    return default_state_root() / "up" / "controller" / "operator.token"


def default_controller_url() -> str:
    return os.environ.get("GRIDCTL_CONTROLLER", DEFAULT_CONTROLLER)


def default_ca_file() -> Path | None:
    env = os.environ.get("GRIDCTL_CA_FILE")
    return Path(env) if env else None


def add_ca_file_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ca-file",
        type=Path,
        metavar="PEM",
        help="CA bundle to verify an https:// controller with (default $GRIDCTL_CA_FILE; "
        "`gridctl ca show --pem` prints the fleet CA)",
    )


class ControllerError(GridctlError):
    """The controller answered with an error, or could not be reached."""

    def __init__(self, message: str, status: int | None = None):
        self.status = status
        super().__init__(message)


class ControllerClient:
    def __init__(
        self,
        base_url: str | None = None,
        *,
        token_file: Path | None = None,
        token: str | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 10.0,
        ca_file: Path | None = None,
    ) -> None:
        self.base_url = (base_url or default_controller_url()).rstrip("/")
        self._token = token
        self._token_file = token_file
        ca_file = ca_file or default_ca_file()
        if ca_file is not None and not ca_file.is_file():
            raise ControllerError(f"CA file {ca_file} not found (--ca-file / GRIDCTL_CA_FILE)")
        self._client = httpx.Client(
            base_url=self.base_url,
            transport=transport,
            timeout=timeout,
            verify=verify_setting(self.base_url, ca_file),
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> ControllerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _operator_headers(self) -> dict[str, str]:
        try:
            require_safe_url(self.base_url, "the operator token")
        except InsecureTransport as exc:
            raise ControllerError(f"{exc} (the controller at {self.base_url})") from None
        token = self._token
        if token is None:
            path = self._token_file or default_token_file()
            try:
                token = read_operator_capability(path)
            except OSError as exc:
                raise ControllerError(
                    f"cannot read the operator token file {path}: {exc.strerror}; "
                    "pass --token-file or set GRIDCTL_TOKEN_FILE"
                ) from None
            except CredentialError as exc:
                raise ControllerError(
                    f"{exc}; pass --token-file or set GRIDCTL_TOKEN_FILE"
                ) from None
        return {OPERATOR_TOKEN_HEADER: token}

    def _call(self, method: str, path: str, *, admin: bool = False, **kwargs: Any) -> Any:
        headers = self._operator_headers() if admin else {}
        try:
            response = self._client.request(method, path, headers=headers, **kwargs)
        except httpx.HTTPError as exc:
            raise ControllerError(
                f"cannot reach the controller at {self.base_url}: {type(exc).__name__}: {exc}"
            ) from None
        if response.status_code >= 400:
            try:
                detail = response.json().get("error") or response.text
            except ValueError:
                detail = response.text
            if isinstance(detail, dict):
                detail = detail.get("message", str(detail))
            raise ControllerError(
                f"{method} {path}: HTTP {response.status_code}: {detail}", response.status_code
            )
        return response.json() if response.content else None

    def call_admin(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._call(method, path, admin=True, **kwargs)

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/allocator/status")
        return result

    def set_mode(self, mode: str | None, reason: str = "") -> dict[str, Any]:
        body: dict[str, Any] = {"clear": True} if mode is None else {"mode": mode}
        if reason:
            body["reason"] = reason
        result: dict[str, Any] = self._call("PUT", "/allocator/mode", admin=True, json=body)
        return result

    def tick(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", "/allocator/tick", admin=True)
        return result

    def snapshot(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/allocator/snapshot", admin=True)
        return result
