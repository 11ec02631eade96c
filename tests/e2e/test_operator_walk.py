"""A newcomer's first hour on real processes: `scripts/up --port P --state-dir D` in the
background, then the README's tour with no flags at all (the context `up` recorded finds the
fleet), "model": "auto" answered or refused at once, an invalid commit shown with file, line
and pointer in plain `gridctl status`, bad token files as one line, a second `up` on the same
port refused fast, and a drain that cannot complete saying so (then forced). Then the
Terraform-like loop in recommend mode: a saved plan still applies after the learned rates
decayed, a commit in between makes it `stale plan:` naming the changed actions, an applied
plan ends (diff exits 0, no operator line), and `--explain` on the steady fleet lists the
incumbents."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from openai import APIStatusError, OpenAI

from tests.e2e.harness import ROOT, SMOLLM, Fleet, embedded_default_repo, free_port, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
GEMMA = "gemma-3-270m"
GEMMA_FILE = "models/gemma-3-270m.yaml"


def gridctl(
    *argv: str, check: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """The CLI as an operator types it: no GRIDCTL_CONTROLLER / GRIDCTL_TOKEN_FILE in sight."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in ("GRIDCTL_CONTROLLER", "GRIDCTL_TOKEN_FILE", "GRIDCTL_CA_FILE", "GRIDCTL_CONTEXT")
    }
    done = subprocess.run(
        [sys.executable, "-m", "gridctl", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert "Traceback" not in done.stderr, done.stderr
    if check:
        assert done.returncode == 0, (argv, done.stdout, done.stderr)
    return done


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    """The embedded default's own policies, as a git repository, on one logical host."""
    fleet = Fleet(
        repo=embedded_default_repo(tmp_path / "desired"),
        state_dir=tmp_path / "state",
        port=free_port(),
        engine_port_base=31000 + (os.getpid() % 80) * 100,
    )
    fleet.start(machines=1, command=[str(ROOT / "scripts" / "up")])
    yield fleet
    fleet.stop()


def routable_gemma(fleet: Fleet) -> None:
    """Both shipped models serving: Gemma (the tour's named model) and the chat model."""
    try:
        wait_for(
            "gemma and the chat model routable",
            lambda: fleet.routable(GEMMA) and fleet.routable(SMOLLM),
            deadline=300,
        )
    except AssertionError:
        print(fleet.log())
        raise


def second_up_on_the_same_port(fleet: Fleet, tmp_path: Path) -> None:
    other = tmp_path / "other-state"
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gridctl",
            "up",
            "--port",
            str(fleet.port),
            "--state-dir",
            str(other),
            "--watch",
            str(fleet.repo.path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    elapsed = time.monotonic() - started
    print(f"second up refused in {elapsed:.2f}s")
    assert done.returncode != 0  # by itself, well inside the 60 s deadline above
    assert "address already in use" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    left = [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if any(str(other) in part for part in (p.info.get("cmdline") or []))
    ]
    assert left == []
    # the first fleet is untouched, and its context still current
    assert fleet.status()["mode"]["effective"] == "automatic"
    assert json.loads(gridctl("context", "show", "--json").stdout)["controller"] == fleet.url


def test_the_readme_tour_through_the_context(fleet: Fleet, tmp_path: Path) -> None:
    routable_gemma(fleet)
    second_up_on_the_same_port(fleet, tmp_path)
    up_log = fleet.log_path.read_text() if fleet.log_path else ""
    assert "context: local-" in up_log and "export GRIDCTL_CONTROLLER=" in up_log, up_log

    # the context `up` recorded is current, and names this fleet's URL and token file
    shown = json.loads(gridctl("context", "show", "--json").stdout)
    assert shown["controller"] == fleet.url
    assert shown["token_file"] == str(fleet.state_dir / "controller" / "operator.token")
    assert shown["node_state_dirs"] == {"local-1": str(fleet.state_dir / "local-1")}

    # the README's short tour, verbatim
    started = time.monotonic()
    answer = gridctl("chat", "What is the capital of France?")
    assert answer.stdout.strip()
    assert "what is the capital of france" not in answer.stdout.lower(), answer.stdout
    continued = gridctl("chat", "-m", GEMMA, "Once upon a time")
    assert continued.stdout.strip()
    status = gridctl("status").stdout
    assert GEMMA in status and "local-1" in status and "mode: automatic" in status
    doc = json.loads(gridctl("status", "--json").stdout)
    assert doc["mode"]["effective"] == "automatic"
    assert "mode is now recommend" in gridctl("mode", "recommend", "--reason", "review").stdout
    assert gridctl("mode").stdout.startswith("mode: recommend (operator override")
    assert "mode is now automatic" in gridctl("mode", "--clear").stdout
    assert json.loads(gridctl("mode", "--json").stdout)["effective"] == "automatic"
    assert json.loads(gridctl("tick", "--json").stdout)["ok"] is True
    diff = gridctl("diff", check=False)
    assert diff.returncode in (0, 1) and GEMMA in diff.stdout
    node = json.loads(gridctl("node", "status", "--host", "local-1", "--json").stdout)
    assert node["host_id"] == "local-1" and node["daemon"]["running"] is True
    typo = gridctl("chat", "-m", "gemma-3-27m", "hi", check=False)
    assert typo.returncode == 1 and f"did you mean {GEMMA}?" in typo.stderr
    print(f"tour of 13 commands in {time.monotonic() - started:.1f}s")

    # "model": "auto": the first general request is answered by the chat model ...
    client = OpenAI(base_url=fleet.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    reply = client.chat.completions.create(
        model="auto", messages=[{"role": "user", "content": "Say hello"}], max_tokens=8
    )
    assert reply.model == SMOLLM
    # ... and a workload no profile scores (coding) is refused at once, saying so
    started = time.monotonic()
    with pytest.raises(APIStatusError) as refused:
        client.chat.completions.create(
            model="auto", messages=[{"role": "user", "content": "fix this python bug"}]
        )
    elapsed = time.monotonic() - started
    assert refused.value.status_code == 422  # permanent: a client does not retry it
    assert "no configured model scores workload coding" in refused.value.message
    print(f"coding refused in {elapsed * 1000:.0f} ms")

    # a bad token file: one line naming the file; a stale one: the 401 names it too
    loose = tmp_path / "loose.token"
    loose.write_text("x" * 43 + "\n")
    loose.chmod(0o644)
    bad = gridctl("mode", "recommend", "--token-file", str(loose), check=False)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and str(loose) in bad.stderr
    stale = tmp_path / "stale.token"
    stale.write_text("s" * 43 + "\n")
    stale.chmod(0o600)
    rejected = gridctl("tick", "--token-file", str(stale), check=False)
    assert rejected.returncode == 1 and "401" in rejected.stderr and str(stale) in rejected.stderr
    assert rejected.stderr.count("\n") == 1

    # an invalid commit: plain status shows FILE:LINE:COL: Kind/name: /pointer: message
    profile = fleet.repo.path / GEMMA_FILE
    good = profile.read_text()
    profile.write_text(good.replace("memory_mb: 640", "memory_mb: lots"))
    bad_commit = fleet.repo.commit("memory in words")
    line = good.splitlines().index("  memory_mb: 640") + 1

    def shows_rejection() -> str | None:
        out = gridctl("status").stdout
        return out if bad_commit[:12] in out and "rejected" in out else None

    out = wait_for("rejection in plain status", shows_rejection, deadline=60)
    expected = f"{GEMMA_FILE}:{line}:"
    assert any(
        expected in row and f"ModelProfile/{GEMMA}: /spec/memory_mb:" in row
        for row in out.splitlines()
    ), out
    wait_for(
        "rejection in the up log",
        lambda: f"ModelProfile/{GEMMA}: /spec/memory_mb" in fleet.log_path.read_text(),  # type: ignore[union-attr]
        deadline=30,
    )
    profile.write_text(good)
    fleet.repo.commit("memory back in MB")


def test_drain_of_the_last_replica_says_why_then_force_drains(fleet: Fleet) -> None:
    routable_gemma(fleet)
    plain = gridctl("node", "drain", "--host", "local-1")
    assert "drain of local-1 cannot complete" in plain.stdout, plain.stdout
    for model in (GEMMA, SMOLLM):  # one host holds the last replica of both shipped models
        assert f"last ready replica of {model}" in plain.stdout, plain.stdout
    assert "it is the only host in the fleet" in plain.stdout
    wait_for(
        "local-1 draining",
        lambda: [h for h in fleet.status()["hosts"] if h["state"] == "draining"],
        deadline=60,
    )
    # the last replicas stay loaded (no new work is routed to a draining host)
    assert [r["state"] for r in fleet.live_copies(GEMMA)] == ["ready"]
    assert [r["state"] for r in fleet.live_copies(SMOLLM)] == ["ready"]
    forced = json.loads(
        gridctl("node", "drain", "--host", "local-1", "--force", "--yes", "--json").stdout
    )
    assert forced["forced"] is True and sorted(forced["stopped"]) == [GEMMA, SMOLLM]
    assert forced["shortfall"] == [
        {"model_id": model, "ready": 0, "wanted": 1, "shortfall": 1} for model in (GEMMA, SMOLLM)
    ]
    wait_for(
        "gemma and the chat model no longer ready",
        lambda: all(r["state"] != "ready" for m in (GEMMA, SMOLLM) for r in fleet.live_copies(m)),
        deadline=60,
    )

    def short_in_status() -> str | None:
        out = gridctl("status").stdout
        rows = [r for r in out.splitlines() if r.startswith((GEMMA, SMOLLM))]
        short = len(rows) == 2 and all(r.split()[3:5] == ["0", "1"] for r in rows)
        return out if short else None

    print(wait_for("shortfall in plain status", short_in_status, deadline=60))


def test_plan_and_apply_in_recommend_mode(fleet: Fleet, tmp_path: Path) -> None:
    routable_gemma(fleet)
    directory = str(fleet.repo.path)
    client = OpenAI(base_url=fleet.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    for _ in range(2):  # some demand, so its learned rate has something to decay from
        client.chat.completions.create(
            model=GEMMA, messages=[{"role": "user", "content": "Say hello"}], max_tokens=4
        )
    assert "mode is now recommend" in gridctl("mode", "recommend", "--reason", "review").stdout

    # the steady fleet explains itself: the incumbent is listed, no traceback
    explained = gridctl("plan", directory, "--explain", GEMMA).stdout
    assert f"Explain {GEMMA}: target 1" in explained
    assert "* local-1: holds a replica, not scored" in explained, explained

    # plan, then let the demand the plan rests on move with no traffic at all
    out = tmp_path / "p.json"
    planned = gridctl("plan", directory, "--out", str(out)).stdout
    saved = json.loads(out.read_text())
    header = planned.splitlines()[0]
    assert f"inputs {saved['inputs']['digest'][:12]}" in header, header
    started = time.monotonic()

    def idle_for_90_seconds() -> bool:  # the review: no traffic while the operator reads
        return time.monotonic() - started >= 90

    wait_for("90 s without traffic", idle_for_90_seconds, deadline=120, interval=5)
    answer = json.loads(gridctl("apply", str(out), "--json").stdout)
    assert answer["applied"] is True and answer["inputs_digest"] == saved["inputs"]["digest"]
    if answer["current_inputs_digest"] != saved["inputs"]["digest"]:  # drift: a note
        assert any("no action changed" in note for note in answer["notes"]), answer
    print(f"applied after {time.monotonic() - started:.0f}s; notes: {answer['notes']}")

    # a commit between plan and apply: refused as stale, naming the actions it changed
    gridctl("plan", directory, "--out", str(out))
    profile = fleet.repo.path / GEMMA_FILE
    good = profile.read_text()
    profile.unlink()
    retired = fleet.repo.commit("retire gemma")
    wait_for(
        "the retiring commit in force",
        lambda: fleet.status()["desired"]["revision"] == retired,
        deadline=60,
    )
    stale = gridctl("apply", str(out), check=False)
    assert stale.returncode == 1
    assert stale.stderr.startswith("error: ") and "stale plan: " in stale.stderr, stale.stderr
    assert "plan again" in stale.stderr
    assert f"+ drain {GEMMA} on local-1" in stale.stderr, stale.stderr
    profile.write_text(good)
    restored = fleet.repo.commit("gemma back")
    wait_for(
        "the restoring commit in force",
        lambda: fleet.status()["desired"]["revision"] == restored,
        deadline=60,
    )

    # an applied plan ends: after mode --clear, diff is clean and status names no operator
    gridctl("plan", directory, "--out", str(out))
    gridctl("apply", str(out))
    assert "mode is now automatic" in gridctl("mode", "--clear").stdout
    gridctl("tick")

    def in_sync() -> bool:
        return gridctl("diff", check=False).returncode == 0

    wait_for("diff in sync", in_sync, deadline=60)
    status = gridctl("status").stdout
    assert "operator" not in status and "applied plan" not in status, status
    assert gridctl("apply", "--cancel").stdout.strip() == "no applied plan is in force"
