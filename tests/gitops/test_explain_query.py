"""``?explain=MODEL`` and ``?explain_all=true`` on the dry run and the status, in-process.

Without the query both documents fold each model's hosts; with it they carry
every host's row of the models named, exactly as ``gridctl plan --explain``
shows them. A model the desired state does not hold, or a malformed flag, is a
400 naming the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from starlette.datastructures import QueryParams

from gridctl.cli import plan_cmd
from gridctl.config import load_directory
from gridctl.controller.documents import ExplainQuery, explain_query
from gridctl.errors import WireError
from tests.controller.simnodes import GEMMA_SHA
from tests.gitops.inprocess import Harness, controller, desired_dir

pytestmark = pytest.mark.anyio

HOSTS = ("local-1", "local-2")


async def dry_run(h: Harness, directory: Path, **params: Any) -> Any:
    body = plan_cmd.candidate_body(load_directory(directory), str(directory))
    return await h.admin("POST", "/allocator/dry-run", json=body, params=params)


async def fleet(h: Harness, tmp_path: Path) -> Path:
    nodes = [h.node(host, cached={"gemma": GEMMA_SHA}) for host in HOSTS]
    for node in nodes:
        assert (await node.register()).status_code == 200
    directory = desired_dir(tmp_path / "desired", gemma=1, other=0)
    await h.apply_files(directory)
    await h.converge(nodes)
    return directory


async def test_the_dry_run_carries_rows_only_for_the_models_asked(tmp_path: Path) -> None:
    async with controller(tmp_path) as h:
        directory = await fleet(h, tmp_path)
        folded = await dry_run(h, directory)
        assert folded.status_code == 200, folded.text
        plan = folded.json()["plan"]
        assert plan["explanations"] == {}
        assert plan["models"]["gemma"]["hosts_considered"] == len(HOSTS)

        one = (await dry_run(h, directory, explain="gemma")).json()["plan"]
        rows = one["explanations"]["gemma"]["candidates"]
        assert list(one["explanations"]) == ["gemma"]
        assert sorted(r["host_id"] for r in rows) == sorted(HOSTS)
        assert one["models"] == plan["models"]

        every = (await dry_run(h, directory, explain_all="true")).json()["plan"]
        assert sorted(every["explanations"]) == sorted(plan["models"])

        unknown = await dry_run(h, directory, explain=["gemma", "nope"])
        assert unknown.status_code == 400
        assert unknown.json()["error"]["pointer"] == "explain"
        assert "no such model profile 'nope'" in unknown.json()["error"]["message"]
        bad = await dry_run(h, directory, explain_all="maybe")
        assert bad.status_code == 400 and bad.json()["error"]["pointer"] == "explain_all"


async def test_the_status_adds_rows_for_the_selected_model(tmp_path: Path) -> None:
    async with controller(tmp_path) as h:
        await fleet(h, tmp_path)
        plain = await h.status()
        assert plain["plan"]["explanations"] == {}
        assert set(plain["plan"]["models"]) == {"gemma", "other"}

        asked = await h.client.get("/allocator/status", params={"explain": "gemma"})
        assert asked.status_code == 200, asked.text
        explanations = asked.json()["plan"]["explanations"]
        assert list(explanations) == ["gemma"]
        assert sorted(r["host_id"] for r in explanations["gemma"]["candidates"]) == sorted(HOSTS)
        again = await h.status()  # the cached document itself never gains rows
        assert again["plan"]["explanations"] == {}

        unknown = await h.client.get("/allocator/status", params={"explain": "nope"})
        assert unknown.status_code == 400 and unknown.json()["error"]["pointer"] == "explain"


def test_the_query_is_read_strictly() -> None:
    assert explain_query(QueryParams("")) == ExplainQuery()
    assert not explain_query(QueryParams("explain_all=false"))
    query = explain_query(QueryParams("explain=b&explain=a&explain=b"))
    assert query == ExplainQuery(("a", "b"), False) and query.wants("a") and not query.wants("c")
    assert explain_query(QueryParams("explain_all=TRUE")).wants("anything")
    for bad in ("explain=", "explain_all=2"):
        with pytest.raises(WireError):
            explain_query(QueryParams(bad))
    assert plan_cmd.explain_params(["a", "b"]) == {"explain": ["a", "b"]}
    assert plan_cmd.explain_params(["a"], explain_all=True) == {"explain_all": "true"}
    assert plan_cmd.explain_params() == {}
