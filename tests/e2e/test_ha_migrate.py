"""`gridctl state migrate` of a real `gridctl up` state directory into PostgreSQL.

The fleet serves requests (outcome evidence), finishes actions (history), and
its controller is killed while new work is still pending (the machine that
died, whose disk is moved elsewhere); the migrated database then holds
every pending action, history row and evidence key, compared by count and
content with the SQLite it came from.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from openai import OpenAI

from gridctl.controller.store import ControllerStore
from gridctl.controller.stores.postgres import PostgresBackend, PostgresLocation
from tests.e2e.harness import GEMMA, ROOT, Fleet, make_fleet, profile_yaml, wait_for
from tests.pgcluster import PgCluster, pg_cluster  # noqa: F401  (a session fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    fleet = make_fleet(tmp_path)
    fleet.repo.write("gemma.yaml", profile_yaml(GEMMA, min_replicas=1, max_replicas=1))
    fleet.repo.commit("gemma")
    yield fleet
    fleet.stop()


def _contents(store: ControllerStore) -> dict[str, object]:
    return {
        "pending": [(p.action, p.delivered, p.delivered_at, p.status) for p in store.pending()],
        "history": list(store.history()),
        "evidence": store.evidence(),
        "memory": store.memory(),
        "generation_epoch": store.epoch,
    }


def test_migrate_a_gridctl_up_state_dir(fleet: Fleet, pg_cluster: PgCluster) -> None:  # noqa: F811
    fleet.start()
    wait_for("gemma routable", lambda: fleet.routable(GEMMA), deadline=240)
    client = OpenAI(base_url=fleet.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    for _ in range(4):
        client.chat.completions.create(
            model=GEMMA, messages=[{"role": "user", "content": "Say hi."}], max_tokens=4
        )
    fleet.repo.write("gemma-b.yaml", profile_yaml("gemma-b", min_replicas=2, max_replicas=2))
    fleet.repo.commit("more work")
    wait_for("pending work", lambda: fleet.status()["pending_commands"], deadline=60, interval=0.05)
    assert fleet.process is not None
    (controller,) = [
        p for p in psutil.Process(fleet.process.pid).children() if "controller" in p.cmdline()
    ]
    controller.kill()
    controller.wait(timeout=30)
    fleet.stop()

    source = ControllerStore(fleet.state_dir / "controller")
    before = _contents(source)
    source.close()
    assert before["pending"] and before["history"], before  # a state worth carrying
    url = pg_cluster.create_database()
    args = [sys.executable, "-m", "gridctl", "state", "migrate", "--from", str(fleet.state_dir)]
    args += ["--to", url, "--to-password-file", str(pg_cluster.password_file), "--json"]
    done = subprocess.run(
        args,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    target = ControllerStore(
        None, backend=PostgresBackend(PostgresLocation(url, pg_cluster.password_file))
    )
    after = _contents(target)
    counts = {k: len(v) for k, v in after.items() if isinstance(v, list | dict)}
    print(f"\nMEASURED migrated: {counts}, rows {report['rows']}, term {report['term']}")
    assert len(after["pending"]) == len(before["pending"])  # type: ignore[arg-type]
    assert len(after["history"]) == len(before["history"])  # type: ignore[arg-type]
    assert len(after["evidence"]) == len(before["evidence"])  # type: ignore[arg-type]
    assert after == before
    assert report["term"] >= 1
