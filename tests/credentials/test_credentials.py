"""Node credentials and the operator capability: binding, expiry, file modes, no leaks."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from gridctl.cli.main import main
from gridctl.credentials import (
    CredentialError,
    CredentialExpired,
    CredentialForbidden,
    ensure_operator_capability,
    issue_node_credential,
    load_or_create_signing_key,
    operator_capability_matches,
    presented_operator_capability,
    read_node_credential,
    read_operator_capability,
    verify_node_credential,
    write_secret_file,
)

NOW = 1_800_000_000.0


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_credential_verifies_for_its_own_host(tmp_path: Path) -> None:
    key = load_or_create_signing_key(tmp_path)
    token = issue_node_credential(key, "host-a", now=NOW, ttl_seconds=60)
    assert verify_node_credential(token, key, now=NOW + 1) == "host-a"
    assert verify_node_credential(token, key.public_key(), now=NOW, expected_host_id="host-a") == (
        "host-a"
    )


def test_credential_for_host_a_used_for_host_b_is_forbidden(tmp_path: Path) -> None:
    key = load_or_create_signing_key(tmp_path)
    token = issue_node_credential(key, "host-a", now=NOW, ttl_seconds=60)
    with pytest.raises(CredentialForbidden) as info:
        verify_node_credential(token, key, now=NOW, expected_host_id="host-b")
    assert info.value.http_status == 403
    assert token not in str(info.value)


def test_expired_credential_is_refused(tmp_path: Path) -> None:
    key = load_or_create_signing_key(tmp_path)
    token = issue_node_credential(key, "host-a", now=NOW, ttl_seconds=60)
    with pytest.raises(CredentialExpired) as info:
        verify_node_credential(token, key, now=NOW + 60, expected_host_id="host-a")
    assert info.value.http_status == 401


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: t[:-3] + ("AAA" if not t.endswith("AAA") else "BBB"),
        lambda t: t.replace("gridctl-node-v1", "other", 1),
        lambda t: "",
        lambda t: t.split(".", 1)[1],
    ],
)
def test_forged_or_malformed_credential_is_refused(tmp_path: Path, mangle: object) -> None:
    key = load_or_create_signing_key(tmp_path)
    token = issue_node_credential(key, "host-a", now=NOW, ttl_seconds=60)
    with pytest.raises(CredentialError) as info:
        verify_node_credential(mangle(token), key, now=NOW)  # type: ignore[operator]
    assert info.value.http_status == 401


def test_claims_swapped_between_tokens_break_the_signature(tmp_path: Path) -> None:
    key = load_or_create_signing_key(tmp_path)
    a = issue_node_credential(key, "host-a", now=NOW, ttl_seconds=60).split(".")
    b = issue_node_credential(key, "host-b", now=NOW, ttl_seconds=60).split(".")
    with pytest.raises(CredentialError):
        verify_node_credential(".".join([a[0], b[1], a[2]]), key, now=NOW)


def test_credential_from_another_controller_key_is_refused(tmp_path: Path) -> None:
    ours = load_or_create_signing_key(tmp_path / "ours")
    theirs = load_or_create_signing_key(tmp_path / "theirs")
    token = issue_node_credential(theirs, "host-a", now=NOW, ttl_seconds=60)
    with pytest.raises(CredentialError):
        verify_node_credential(token, ours, now=NOW)


def test_signing_key_is_owner_only_and_stable(tmp_path: Path) -> None:
    key = load_or_create_signing_key(tmp_path)
    again = load_or_create_signing_key(tmp_path)
    token = issue_node_credential(key, "h", now=NOW, ttl_seconds=5)
    assert verify_node_credential(token, again, now=NOW) == "h"
    assert mode_of(tmp_path / "node-credential-signing.pem") == 0o600


def test_secret_files_readable_by_others_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "tok"
    key = load_or_create_signing_key(tmp_path)
    write_secret_file(path, issue_node_credential(key, "h", now=NOW) + "\n")
    assert mode_of(path) == 0o600
    assert read_node_credential(path).startswith("gridctl-node-v1.")
    os.chmod(path, 0o644)
    with pytest.raises(CredentialError):
        read_node_credential(path)


def test_operator_capability_is_random_owner_only_and_compared_safely(tmp_path: Path) -> None:
    path = tmp_path / "operator.token"
    cap = ensure_operator_capability(path)
    assert ensure_operator_capability(path) == cap == read_operator_capability(path)
    assert mode_of(path) == 0o600
    assert ensure_operator_capability(tmp_path / "other") != cap
    assert operator_capability_matches(cap, cap)
    assert not operator_capability_matches(cap + "x", cap)
    assert not operator_capability_matches(None, cap)
    assert presented_operator_capability({"Authorization": f"Bearer {cap}"}) == cap
    assert presented_operator_capability({"X-Grid-Allocator-Token": cap}) == cap
    assert presented_operator_capability({}) is None


def test_token_write_cli_writes_0600_and_never_prints_the_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state, out = tmp_path / "controller", tmp_path / "node-a.token"
    rc = main(["token", "write", "--host-id", "host-a", "--state", str(state), str(out)])
    assert rc == 0
    printed = capsys.readouterr()
    token = read_node_credential(out)
    assert mode_of(out) == 0o600
    assert token not in printed.out + printed.err
    assert token.split(".")[2] not in printed.out + printed.err
    key = load_or_create_signing_key(state)
    assert verify_node_credential(token, key, now=time.time()) == "host-a"
    # refuses to overwrite without --force
    assert main(["token", "write", "--host-id", "host-b", "--state", str(state), str(out)]) == 1
    assert verify_node_credential(read_node_credential(out), key, now=time.time()) == "host-a"


def test_token_write_cli_generates_and_prints_a_host_id_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t"
    assert main(["token", "write", "--state", str(tmp_path / "c"), str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.count("generated host id: host-") == 1
    host = printed.split("generated host id: ")[1].split()[0]
    key = load_or_create_signing_key(tmp_path / "c")
    assert verify_node_credential(read_node_credential(out), key, now=time.time()) == host
