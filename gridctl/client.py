"""An HTTP client for the controller, shared by the CLI commands and the dashboard.

Every call takes an httpx transport seam so tests can run the controller
in-process. The operator capability is read from a file, never from argv.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import httpx

from gridctl import contexts
from gridctl.credentials import OPERATOR_TOKEN_HEADER, CredentialError, read_operator_capability
from gridctl.errors import GridctlError
from gridctl.transport import InsecureTransport, require_safe_url, verify_setting

DEFAULT_CONTROLLER = contexts.DEFAULT_CONTROLLER


def default_state_root() -> Path:
    """Where `gridctl up` keeps its state: $GRIDCTL_HOME, else ~/.local/state/gridctl."""
    return contexts.legacy_state_root()


def default_token_file() -> Path:
    """The operator token file the current context (or the environment) names."""
    return contexts.resolve().token_file


def default_controller_url() -> str:
    """--controller's default: $GRIDCTL_CONTROLLER, the current context, else 22100 here."""
    return contexts.resolve().controller


def default_ca_file() -> Path | None:
    return contexts.resolve().ca_file


def add_ca_file_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ca-file",
        type=Path,
        metavar="PEM",
        help="CA bundle to verify an https:// controller with (default $GRIDCTL_CA_FILE; "
        "`gridctl ca show --pem` prints the fleet CA)",
    )


REACHABLE_PROBE_SECONDS = 2.0


class ControllerError(GridctlError):
    """The controller answered with an error, or could not be reached."""

    def __init__(self, message: str, status: int | None = None, *, unreachable: bool = False):
        self.status = status
        self.unreachable = unreachable
        super().__init__(message)

    @property
    def exit_code(self) -> int:
        """2 when the controller could not be reached, else 1."""
        return 2 if self.unreachable else 1


def _hint(status: int, target: contexts.Target) -> str:
    if status == 401:
        return (
            f"the token in {target.token_file} is not this controller's operator token; "
            "pass --token-file with the one it wrote (`gridctl context show` names it)"
        )
    if status == 403:
        return "this credential may not do that"
    return ""


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
        try:
            self.target = contexts.resolve(base_url, token_file, ca_file)
        except contexts.ContextError as exc:
            raise ControllerError(str(exc)) from None
        self.base_url = self.target.controller
        if not self.base_url.startswith(("http://", "https://")):
            raise ControllerError(
                f"controller URL {self.base_url} must start with http:// or https:// "
                f"(from {self.target.controller_from}; {self.where()})"
            )
        self._token = token
        ca_file = self.target.ca_file
        if ca_file is not None and not ca_file.is_file():
            raise ControllerError(
                f"CA file {ca_file} not found; pass --ca-file or set GRIDCTL_CA_FILE "
                f"({self.target.describe()})"
            )
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

    @property
    def token_file(self) -> Path:
        return self.target.token_file

    def where(self) -> str:
        """``context NAME; controller URL; token file F``: appended to every error."""
        return self.target.describe()

    def _operator_headers(self) -> dict[str, str]:
        try:
            require_safe_url(self.base_url, "the operator token")
        except InsecureTransport as exc:
            raise ControllerError(f"{exc} ({self.where()})") from None
        token = self._token
        if token is None:
            path = self.target.token_file
            fix = "pass --token-file or set GRIDCTL_TOKEN_FILE"
            if self.target.token_from == "default" and self.target.context is None:
                fix = (
                    f"no context records {self.base_url}, so its operator token is unknown: "
                    "pass --token-file with the operator.token that controller wrote"
                )
            try:
                token = read_operator_capability(path)
            except OSError as exc:
                self._unreachable_first()
                raise ControllerError(
                    f"cannot read the operator token file {path}: {exc.strerror or exc}; "
                    f"{fix} ({self.where()})"
                ) from None
            except UnicodeDecodeError:
                self._unreachable_first()
                raise ControllerError(
                    f"the operator token file {path} is not text; {fix} ({self.where()})"
                ) from None
            except CredentialError as exc:
                self._unreachable_first()
                raise ControllerError(f"{exc}; {fix} ({self.where()})") from None
        return {OPERATOR_TOKEN_HEADER: token}

    def _unreachable_first(self) -> None:
        """With no usable token, say first when there is no controller to send it to:
        the token is the second problem (exit 2 like every unreachable controller)."""
        try:
            self._client.get("/healthz", timeout=REACHABLE_PROBE_SECONDS)
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from None

    def _unreachable(self, exc: httpx.HTTPError) -> ControllerError:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return ControllerError(
            f"cannot reach the controller at {self.base_url}: {type(exc).__name__}: {detail}; "
            "is it running? "
            f"(`gridctl context ls` lists known fleets; {self.where()})",
            unreachable=True,
        )

    def _call(self, method: str, path: str, *, admin: bool = False, **kwargs: Any) -> Any:
        headers = self._operator_headers() if admin else {}
        try:
            response = self._client.request(method, path, headers=headers, **kwargs)
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from None
        if response.status_code >= 400:
            try:
                detail = response.json().get("error") or response.text
            except (ValueError, AttributeError):
                detail = response.text
            if isinstance(detail, dict):
                detail = detail.get("message", str(detail))
            hint = _hint(response.status_code, self.target)
            raise ControllerError(
                f"{method} {path}: HTTP {response.status_code}: "
                f"{str(detail).strip()}{'; ' + hint if hint else ''} ({self.where()})",
                response.status_code,
            )
        try:
            return response.json() if response.content else None
        except ValueError:
            raise ControllerError(
                f"{method} {path}: the answer from {self.base_url} is not JSON; is that a "
                f"gridctl controller? ({self.where()})"
            ) from None

    def call_admin(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._call(method, path, admin=True, **kwargs)

    def status(self, explain: tuple[str, ...] = ()) -> dict[str, Any]:
        """``GET /allocator/status``; every host's plan row of the models in ``explain``."""
        params = {"explain": list(explain)} if explain else None
        result: dict[str, Any] = self._call("GET", "/allocator/status", params=params)
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
