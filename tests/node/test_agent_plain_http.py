"""A node whose controllers are all plain HTTP (loopback) reads no CA store for its
controller client: no request of it makes a TLS handshake. One controller on https
keeps certificate verification."""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx

from gridctl.credentials import (
    issue_node_credential,
    load_or_create_signing_key,
    write_secret_file,
)
from gridctl.node.actuator import PortRange
from gridctl.node.agent import NodeAgent
from gridctl.node.daemon import NodeConfig, build_node


def agent_for(tmp_path: Path, controller_url: str) -> NodeAgent:
    token_file = tmp_path / "node.token"
    key = load_or_create_signing_key(tmp_path / "controller")
    write_secret_file(token_file, issue_node_credential(key, "host-a", now=0.0) + "\n")
    config = NodeConfig(
        host_id="host-a",
        controller_url=controller_url,
        token_file=token_file,
        state_dir=tmp_path / "node",
        capacity_mb=1024,
        failure_domain="rack-1",
        tags=("test",),
        port_range=PortRange(29920, 29929),
        binary=Path("/nonexistent/llama-server"),
    )
    parts = build_node(config, instance_id="test-instance")
    parts.store.close()
    return parts.agent


def verify_mode(client: httpx.Client) -> ssl.VerifyMode:
    # httpx keeps the context it built on its connection pool
    return client._transport._pool._ssl_context.verify_mode  # type: ignore[attr-defined]


def test_plain_http_controllers_need_no_ca_store(tmp_path: Path) -> None:
    agent = agent_for(tmp_path, "http://127.0.0.1:1,http://localhost:2")
    try:
        assert verify_mode(agent._client) is ssl.CERT_NONE
    finally:
        agent.close()


def test_an_https_controller_keeps_verification(tmp_path: Path) -> None:
    agent = agent_for(tmp_path, "http://127.0.0.1:1,HTTPS://controller.example:8443")
    try:
        assert verify_mode(agent._client) is ssl.CERT_REQUIRED
    finally:
        agent.close()
