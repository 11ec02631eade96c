"""Secret files are owner-only regular files; the signing key rotates with an overlap."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gridctl.credentials import (
    CredentialError,
    credential_claims_unverified,
    issue_node_credential,
    key_id,
    load_or_create_signing_key,
    read_secret_file,
    rotate_signing_key,
    verification_keys,
    write_secret_file,
)
from gridctl.fleetca import FleetCA, PkiError, build_csr, certificate_names, new_private_key


def test_parents_are_created_owner_only(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "secret"
    write_secret_file(target, "s3cret")
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "a" / "b").stat().st_mode) == 0o700
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert read_secret_file(target) == "s3cret"


def test_a_symlinked_secret_is_not_followed(tmp_path: Path) -> None:
    real = tmp_path / "real"
    write_secret_file(real, "s3cret")
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(CredentialError, match="is a symlink; refusing to follow it"):
        read_secret_file(link)
    write_secret_file(link, "other")  # replaces the link itself, never writes through it
    assert read_secret_file(real) == "s3cret"
    assert not link.is_symlink() and read_secret_file(link) == "other"


def test_group_readable_foreign_and_odd_files_are_refused(tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.write_text("x")
    loose.chmod(0o640)
    with pytest.raises(CredentialError, match="accessible by group or others"):
        read_secret_file(loose)
    foreign = tmp_path / "foreign"
    write_secret_file(foreign, "x")
    os.chown(foreign, 12345, -1)  # the tests run as root, as CI does
    with pytest.raises(CredentialError, match="belongs to uid 12345"):
        read_secret_file(foreign)
    directory = tmp_path / "dir"
    directory.mkdir(mode=0o700)
    with pytest.raises(CredentialError):
        read_secret_file(directory)
    binary = tmp_path / "binary"
    write_secret_file(binary, "")
    binary.write_bytes(b"\xff\xfe\xfa")
    with pytest.raises(CredentialError, match="not text"):
        read_secret_file(binary)


def test_signing_key_rotation_keeps_verifying_what_the_old_key_signed(tmp_path: Path) -> None:
    old = load_or_create_signing_key(tmp_path)
    token = issue_node_credential(old, "host-a", now=1_000.0)
    new = rotate_signing_key(tmp_path)
    assert key_id(new) != key_id(old)
    keys = verification_keys(tmp_path)
    assert set(keys) == {key_id(old), key_id(new)}
    assert credential_claims_unverified(token)["kid"] == key_id(old)
    fresh = issue_node_credential(load_or_create_signing_key(tmp_path), "host-a", now=1_000.0)
    assert credential_claims_unverified(fresh)["kid"] == key_id(new)


def test_csr_signing_names_exactly_the_advertised_addresses(tmp_path: Path) -> None:
    ca = FleetCA(tmp_path)
    assert ca.init(now=1_800_000_000.0)
    assert not ca.init(now=1_800_000_000.0)  # idempotent
    key = new_private_key()
    signed = ca.sign_csr(build_csr(key, "e", ["10.1.2.3"]), ["10.1.2.3"], now=1_800_000_000.0)
    assert certificate_names(signed) == ["10.1.2.3"]
    greedy = build_csr(key, "e", ["10.1.2.3", "controller.example"])
    with pytest.raises(PkiError, match=r"names controller\.example, which this node does not"):
        ca.sign_csr(greedy, ["10.1.2.3"], now=1_800_000_000.0)
    with pytest.raises(PkiError, match="not a PEM certificate request"):
        ca.sign_csr("garbage", ["10.1.2.3"], now=1_800_000_000.0)
    v6 = ca.sign_csr(build_csr(key, "e", ["fd5e::2"]), ["[fd5e::2]"], now=1_800_000_000.0)
    assert certificate_names(v6) == ["fd5e::2"]
    assert stat.S_IMODE((tmp_path / "pki" / "ca.key").stat().st_mode) == 0o600
