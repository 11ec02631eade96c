"""Who belongs to the fleet: joining, renewal, revocation, router keys (controller side).

``FleetIdentity`` owns the controller's secrets that concern membership: the
fleet CA, the node-credential signing keys (current and, after a rotation,
previous), the operator capability file and the membership database. Its
routes are mounted beside the allocator API:

* ``GET  /pki/ca`` — the trust bundle (public: certificates only);
* ``POST /join`` — a one-time bootstrap secret plus a CSR buys a host-scoped
  credential, an engine serving certificate for exactly the advertised
  addresses, and the trust bundle;
* ``POST /nodes/{id}/renew`` — the same for a node that presents its current
  credential (renewed well before expiry, and after a CA rotation);
* operator routes for join tokens, revocation, router keys and rotating the
  operator capability.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from gridctl.controller.auth import AuthFailure, require_operator
from gridctl.credentials import (
    DEFAULT_TTL_SECONDS,
    NODE_TOKEN_HEADER,
    OPERATOR_CAPABILITY_FILE,
    CredentialError,
    CredentialExpired,
    CredentialForbidden,
    credential_claims,
    ensure_operator_capability,
    issue_node_credential,
    load_or_create_signing_key,
    new_host_id,
    rotate_operator_capability,
    token_key_id,
    verification_keys,
)
from gridctl.errors import PermanentError, WireError
from gridctl.fleetca import FleetCA, PkiError, bundle_digest, fingerprint, load_certificates
from gridctl.membership import ROUTER_KEY_NAME, BootstrapRefused, Membership
from gridctl.transport import address_family, is_loopback

log = logging.getLogger(__name__)

JOIN_BUNDLE_KIND = "gridctl/join-bundle-v1"
DEFAULT_JOIN_TTL_SECONDS = 3600.0
MAX_ADDRESSES = 8
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def _url_host(url: str | None) -> frozenset[str]:
    host = urlsplit(url).hostname if url else None
    return frozenset({host.lower()}) if host else frozenset()


DIGEST_SECONDS = 1.0  # a CA rotation reaches heartbeat answers within this
VERIFIED_MEMORY = 16384  # remembered verified credentials (a fleet's worth, twice over)


class FleetIdentity:
    """Membership secrets of one controller state directory."""

    def __init__(
        self,
        state_dir: Path,
        *,
        clock: Callable[[], float],
        credential_ttl: float = DEFAULT_TTL_SECONDS,
        public_url: str | None = None,
        pinned_ca_pem: str | None = None,
    ) -> None:
        self.state_dir = Path(state_dir)
        self.clock = clock
        self.credential_ttl = credential_ttl
        self.public_url = public_url
        # certificates are checked by every TLS peer against its wall clock, so the CA
        # dates them (and times its rotation overlap) by the wall clock, not ``clock``
        self.wall = time.time
        self.ca = FleetCA(self.state_dir)
        self.ca.init(now=self.wall())
        self.membership = Membership(self.state_dir)
        self._operator_path = self.state_dir / OPERATOR_CAPABILITY_FILE
        self._operator = ensure_operator_capability(self._operator_path)
        self._operator_mtime = self._mtime()
        self._keys = verification_keys(self.state_dir)
        self._signing = load_or_create_signing_key(self.state_dir)
        self._pinned_ca_pem = pinned_ca_pem  # a bring-your-own CA the controller serves with
        self._lock = threading.Lock()
        self._digest_of = ("", "")
        self._digest_checked = 0.0
        self._verified: dict[str, dict[str, object]] = {}  # token -> claims, signature checked
        # whether the controller already knows a host id (its registry): an unbound join
        # bundle may not take it over
        self.known_host: Callable[[str], bool] | None = None
        # the names the controller's own certificate carries (and loopback): a node's
        # certificate may never name them, or that node could answer as the controller
        self.controller_names: frozenset[str] = frozenset(LOOPBACK_NAMES) | _url_host(public_url)

    # --- the operator capability (re-read when the file is rotated) -------------------

    def _mtime(self) -> float:
        try:
            return self._operator_path.stat().st_mtime
        except OSError:
            return 0.0

    def operator_token(self) -> str:
        mtime = self._mtime()
        if mtime != self._operator_mtime:
            with self._lock:
                try:
                    self._operator = ensure_operator_capability(self._operator_path)
                    self._operator_mtime = mtime
                except CredentialError as exc:  # keep the last good one; say why
                    log.error("operator token file: %s", exc)
        return self._operator

    # --- node credentials -------------------------------------------------------------

    def verify(self, token: str, host_id: str) -> dict[str, object]:
        """Verified claims of a node credential presented for ``host_id`` (or raise).

        A signature once verified is remembered (by token text, bounded), so a fleet's
        heartbeats skip the Ed25519 check; expiry, host binding and revocation are
        checked on every call all the same.
        """
        claims = self._verified.get(token)
        if claims is None or claims.get("kid") not in self._keys:
            claims = self._verify_signature(token)
        elif self.clock() >= float(claims["exp"]):  # type: ignore[arg-type]
            raise CredentialExpired(f"node credential for {claims['host_id']} expired")
        bound = str(claims["host_id"])
        if bound != host_id:
            raise CredentialForbidden(f"credential for host {bound} used for {host_id}")
        if self.membership.credential_revoked(claims):
            raise CredentialError(f"node credential for {bound} was revoked")
        return claims

    def _verify_signature(self, token: str) -> dict[str, object]:
        kid = token_key_id(token)
        key = self._keys.get(kid or "")
        if key is None:
            self._keys = verification_keys(self.state_dir)  # a rotation by the CLI
            key = self._keys.get(kid or "")
        if key is None:
            raise CredentialError("node credential signed by another key")
        claims = credential_claims(token, key, now=self.clock())
        with self._lock:
            if len(self._verified) >= VERIFIED_MEMORY:
                self._verified.clear()
            self._verified[token] = claims
        return claims

    def issue(self, host_id: str, addresses: Sequence[str]) -> tuple[str, dict[str, object]]:
        now = self.clock()
        signing = load_or_create_signing_key(self.state_dir)
        token = issue_node_credential(
            signing, host_id, now=now, ttl_seconds=self.credential_ttl, addresses=addresses
        )
        claims = credential_claims(token, signing, now=now)
        self.membership.record_credential(claims)
        self._keys = verification_keys(self.state_dir)
        return token, claims

    def trust_bundle(self) -> str:
        bundle = self.ca.trust_bundle(now=self.wall())
        if self._pinned_ca_pem and self._pinned_ca_pem not in bundle:
            bundle = self._pinned_ca_pem + bundle
        return bundle

    def trust_bundle_digest(self, *, fresh: bool = False) -> str:
        """Nodes compare it on every heartbeat to notice a rotation: the bundle files are
        read at most every ``DIGEST_SECONDS`` (always when ``fresh``), and the digest is
        cached by bundle text."""
        checked = time.monotonic()
        if not fresh and self._digest_of[0] and checked - self._digest_checked < DIGEST_SECONDS:
            return self._digest_of[1]
        self._digest_checked = checked
        bundle = self.trust_bundle()
        if bundle != self._digest_of[0]:
            self._digest_of = (bundle, bundle_digest(bundle))
        return self._digest_of[1]

    def pinned_fingerprint(self) -> str:
        """What a join bundle pins: the CA that signs the controller's serving certificate."""
        if self._pinned_ca_pem:
            return fingerprint(load_certificates(self._pinned_ca_pem)[0])
        return fingerprint(self.ca.certificate())

    def join_bundle(
        self, controller_url: str, *, ttl: float, host_id: str | None
    ) -> dict[str, Any]:
        secret = self.membership.create_bootstrap(
            now=self.clock(), ttl_seconds=ttl, host_id=host_id
        )
        return {
            "kind": JOIN_BUNDLE_KIND,
            "controller": controller_url.rstrip("/"),
            "ca_sha256": self.pinned_fingerprint(),
            "bootstrap_secret": secret,
            "host_id": host_id,
            "expires_at": self.clock() + ttl,
        }

    def _answer(self, host_id: str, addresses: list[str], csr: str | None) -> dict[str, Any]:
        token, claims = self.issue(host_id, addresses)
        answer: dict[str, Any] = {
            "host_id": host_id,
            "credential": token,
            "credential_expires_at": claims["exp"],
            "credential_issued_at": claims["iat"],
            "trust_bundle": self.trust_bundle(),
        }
        answer["trust_bundle_digest"] = bundle_digest(answer["trust_bundle"])
        if csr is not None:
            answer["engine_certificate"] = self.ca.sign_csr(
                csr, addresses, now=self.wall(), host_id=host_id
            )
        return answer

    def _refuse_controller_names(self, addresses: Sequence[str]) -> None:
        for index, address in enumerate(addresses):
            if address.lower() in self.controller_names:
                raise WireError(
                    f"{address} names the controller (or loopback); a node certificate may "
                    "name only the node's own addresses",
                    f"/advertise/{index}",
                )

    # --- HTTP -------------------------------------------------------------------------

    def routes(self) -> list[Route]:
        return [
            Route("/pki/ca", self._ca, methods=["GET"]),
            Route("/join", self._join, methods=["POST"]),
            Route("/nodes/{node_id}/renew", self._renew, methods=["POST"]),
            Route("/allocator/join-tokens", self._join_token, methods=["POST"]),
            Route("/allocator/credentials/{host_id}/revoke", self._revoke, methods=["POST"]),
            Route("/allocator/router-keys", self._router_key, methods=["POST"]),
            Route("/allocator/operator-token/rotate", self._rotate_operator, methods=["POST"]),
        ]

    async def _ca(self, request: Request) -> Response:
        return PlainTextResponse(self.trust_bundle(), media_type="application/x-pem-file")

    async def _join(self, request: Request) -> Response:
        return await _guard(self._join_body, request)

    async def _join_body(self, request: Request) -> Response:
        body = await _object(request)
        secret = _string(body, "bootstrap_secret", 256)
        host_id = body.get("host_id")
        if host_id is not None and not isinstance(host_id, str):
            raise WireError("host_id must be a string", "/host_id")
        addresses = _addresses(body)
        self._refuse_controller_names(addresses)
        csr = _string(body, "csr", 16 * 1024)
        host_id = host_id or new_host_id()
        if not 0 < len(host_id) <= 128:
            raise WireError("host_id must be 1-128 characters", "/host_id")
        taken = self.known_host is not None and self.known_host(host_id)
        self.membership.consume_bootstrap(secret, host_id=host_id, now=self.clock(), taken=taken)
        log.info("host %s joined advertising %s", host_id, ", ".join(addresses))
        return JSONResponse(self._answer(host_id, addresses, csr))

    async def _renew(self, request: Request) -> Response:
        return await _guard(self._renew_body, request)

    async def _renew_body(self, request: Request) -> Response:
        host_id = request.path_params["node_id"]
        token = request.headers.get(NODE_TOKEN_HEADER)
        if not token:
            raise AuthFailure(401, f"node credential required ({NODE_TOKEN_HEADER})")
        try:
            claims = self.verify(token, host_id)
        except CredentialError as exc:
            raise AuthFailure(getattr(exc, "http_status", 401), f"renewal refused: {exc}") from None
        body = await _object(request)
        adv = claims.get("adv")
        granted = [str(a) for a in adv] if isinstance(adv, list) else []
        csr = body.get("csr")
        if csr is not None and not isinstance(csr, str):
            raise WireError("csr must be a PEM string", "/csr")
        if csr is not None and not granted:
            raise WireError("this credential advertises no address to certify", "/csr")
        if csr is not None:
            self._refuse_controller_names(granted)
        return JSONResponse(self._answer(host_id, granted, csr))

    async def _join_token(self, request: Request) -> Response:
        return await _guard(self._join_token_body, request)

    async def _join_token_body(self, request: Request) -> Response:
        require_operator(request, self.operator_token())
        body = await _object(request)
        ttl = body.get("ttl_seconds", DEFAULT_JOIN_TTL_SECONDS)
        if not isinstance(ttl, int | float) or isinstance(ttl, bool) or not 0 < ttl <= 7 * 86400:
            raise WireError("ttl_seconds must be a number in (0, 604800]", "/ttl_seconds")
        host_id = body.get("host_id")
        if host_id is not None and (not isinstance(host_id, str) or not 0 < len(host_id) <= 128):
            raise WireError("host_id must be a string of 1-128 characters", "/host_id")
        url = body.get("controller") or self.public_url
        if not isinstance(url, str) or not url.startswith("https://"):
            raise WireError("controller must be this controller's https:// URL", "/controller")
        return JSONResponse(self.join_bundle(url, ttl=float(ttl), host_id=host_id))

    async def _revoke(self, request: Request) -> Response:
        return await _guard(self._revoke_body, request)

    async def _revoke_body(self, request: Request) -> Response:
        require_operator(request, self.operator_token())
        host_id = request.path_params["host_id"]
        count = self.membership.revoke_host(host_id, now=self.clock())
        return JSONResponse({"host_id": host_id, "revoked_credentials": count})

    async def _router_key(self, request: Request) -> Response:
        return await _guard(self._router_key_body, request)

    async def _router_key_body(self, request: Request) -> Response:
        require_operator(request, self.operator_token())
        body = await _object(request)
        name = _string(body, "name", 64)
        if not ROUTER_KEY_NAME.fullmatch(name):
            raise WireError(
                "name must be letters, digits or . _ : @ - (starting with a letter or digit)",
                "/name",
            )
        key_id, key = self.membership.create_router_key(name, now=self.clock())
        return JSONResponse({"id": key_id, "name": name, "key": key})

    async def _rotate_operator(self, request: Request) -> Response:
        return await _guard(self._rotate_operator_body, request)

    async def _rotate_operator_body(self, request: Request) -> Response:
        require_operator(request, self.operator_token())
        rotate_operator_capability(self._operator_path)
        return JSONResponse({"rotated": True, "file": str(self._operator_path)})


async def _guard(handler: Callable[[Request], Any], request: Request) -> Response:
    try:
        response: Response = await handler(request)
        return response
    except AuthFailure as exc:
        return _error(exc.status, str(exc))
    except BootstrapRefused as exc:
        return _error(exc.http_status, f"join refused: {exc}")
    except PkiError as exc:
        return _error(400, f"certificate request refused: {exc}", "/csr")
    except WireError as exc:
        status = getattr(exc, "status", 400)
        return _error(status, str(exc.args[0]) if exc.args else "bad request", exc.pointer)
    except CredentialError as exc:
        return _error(400, str(exc))
    except PermanentError as exc:  # a conflict with what exists (a router key's name)
        return _error(409, str(exc))


def _error(status: int, message: str, pointer: str | None = None) -> JSONResponse:
    body: dict[str, Any] = {"error": {"message": message}}
    if pointer:
        body["error"]["pointer"] = pointer
    return JSONResponse(body, status_code=status)


async def _object(request: Request) -> dict[str, Any]:
    from gridctl.controller.app import read_json

    body = await read_json(request)
    if not isinstance(body, dict):
        raise WireError("body must be a JSON object")
    return body


def _string(body: dict[str, Any], name: str, limit: int) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value or len(value) > limit:
        raise WireError(
            f"{name} must be a non-empty string of at most {limit} characters", f"/{name}"
        )
    return value


def _addresses(body: dict[str, Any]) -> list[str]:
    raw = body.get("advertise")
    if not isinstance(raw, list) or not raw or len(raw) > MAX_ADDRESSES:
        raise WireError(f"advertise must list 1-{MAX_ADDRESSES} addresses", "/advertise")
    out: list[str] = []
    for index, item in enumerate(raw):
        if not isinstance(item, str) or not item or len(item) > 253:
            raise WireError("each advertised address must be a string", f"/advertise/{index}")
        address = item.strip("[]")
        if (
            address_family(address) == "dns"
            and not address.replace("-", "").replace(".", "").isalnum()
        ):
            raise WireError(f"{item!r} is not an address or host name", f"/advertise/{index}")
        if is_loopback(address) and len(raw) == 1:
            raise WireError(
                "a joining node must advertise an address other machines can reach",
                f"/advertise/{index}",
            )
        out.append(address)
    return out
