"""A stage host or a coordinator forwarder as its own process, for namespace tests.

``python -m tests.node.split_stage_child CONFIG.json`` runs one role inside a
simulated machine (``tests/netfleet``) and prints one JSON line when ready:

* ``stage``: a ``StageHost`` with its own node state store, offered the claim of the
  config; prints the decision, the tunnel's address, the stage server's pid, port and
  log. A ``release`` line on stdin releases the claim (prints ``{"released": ...}``).
* ``coordinator``: a ``CoordinatorForwarder`` to the stage's tunnel; prints its
  loopback port.

End of stdin closes everything and exits.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from gridctl.node.rpctunnel import CoordinatorForwarder, TlsIdentity
from gridctl.node.stageclaims import stage_claim
from gridctl.node.stagehost import StageHost, StageHostSettings
from gridctl.node.statestore import NodeStateStore
from gridctl.split import StopRequest


def _identity(data: dict[str, str]) -> TlsIdentity:
    return TlsIdentity(Path(data["cert"]), Path(data["key"]), Path(data["trust"]))


def _say(value: object) -> None:
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


def run_stage(config: dict[str, Any]) -> None:
    store = NodeStateStore(Path(config["state_dir"]) / "node.db")
    settings = StageHostSettings(
        stage_server=Path(config["stage_server"]),
        identity=_identity(config["identity"]),
        advertise_host=config["advertise"],
        log_dir=Path(config["state_dir"]) / "logs",
        tunnel_port=int(config.get("tunnel_port", 0)),
    )
    host = StageHost(store, settings)
    try:
        offered = stage_claim(config["claim"])
        outcome = host.offer(offered, int(config["now_ms"]))
        running = host.running().get(offered.key)
        _say(
            {
                "accepted": outcome.decision.accepted,
                "reason": outcome.decision.reason,
                "tunnel": list(running.advertised) if running else None,
                "rpc_pid": running.server.pid if running else None,
                "rpc_port": running.server.port if running else None,
                "rpc_log": str(running.server.log_path) if running else None,
            }
        )
        for line in sys.stdin:
            if line.strip() == "release":
                claim = offered.claim
                stop = StopRequest(claim.model_id, claim.package_ref, claim.manifest_sha256,
                                   claim.coordinator_id, claim.coordinator_term)  # fmt: skip
                decision = host.release(stop, int(config["now_ms"]))
                _say({"released": decision.accepted, "running": len(host.running())})
    finally:
        host.close()
        store.close()


def run_coordinator(config: dict[str, Any]) -> None:
    stage_host, stage_port = config["stage"]
    forwarder = CoordinatorForwarder(
        _identity(config["identity"]), (stage_host, int(stage_port)), config["stage_host_id"]
    )
    try:
        _say({"port": forwarder.address[1]})
        for _line in sys.stdin:
            pass
    finally:
        forwarder.close()


def main() -> None:
    config = json.loads(Path(sys.argv[1]).read_text())
    {"stage": run_stage, "coordinator": run_coordinator}[config["role"]](config)


if __name__ == "__main__":
    main()
