"""The watched source follows commits: an uncommitted edit is shown dirty and never loaded,
a new commit and an amend (only ``.git`` changes) are picked up from ref events, a remote is
polled, and an unsigned commit is rejected while the last good revision stays."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from gridctl.controller.reading import DIRTY_NOTE, SourceOptions, make_reader
from gridctl.controller.watching import DesiredSource, watch_directory
from tests.config.test_gitsource import git, profile, ssh_key

pytestmark = pytest.mark.anyio
DEADLINE_SECONDS = 30.0


async def eventually(what: str, probe: Callable[[], object]) -> None:
    end = time.monotonic() + DEADLINE_SECONDS
    while time.monotonic() < end:
        if probe():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@asynccontextmanager
async def watching(source: DesiredSource, probe: Path | None = None) -> AsyncIterator[list[int]]:
    """Run the watcher; with ``probe`` (a YAML path in the watched directory) return only
    once it reports events, so nothing the test does next can precede the watch."""
    stop = asyncio.Event()
    news: list[int] = []
    task = asyncio.create_task(watch_directory(source, lambda: news.append(1), stop))
    try:
        end = time.monotonic() + DEADLINE_SECONDS
        while probe is not None and not news and time.monotonic() < end:
            probe.write_text(f"# {time.monotonic()}\n")
            await asyncio.sleep(0.1)
        if probe is not None:
            assert news, "the watcher never reported an event"
            probe.unlink()
        yield news
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=DEADLINE_SECONDS)


def new_repo(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    (root / "a.yaml").write_text(profile("a"))
    (root / "b.yaml").write_text(profile("b"))
    git(root, "add", "-A")
    git(root, "commit", "-qm", "two profiles")
    return root


def names(source: DesiredSource) -> list[str]:
    assert source.current is not None
    return [p.name for p in source.current.profiles]


async def test_commits_not_edits_become_the_desired_state(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "repo")
    source = DesiredSource(repo, time.time, make_reader(repo, SourceOptions(interval=60), None))
    source.reload()
    first = git(repo, "rev-parse", "HEAD")
    assert source.current is not None and source.current.revision == first

    def tree() -> dict[str, object]:
        found = source.status()["working_tree"]
        assert isinstance(found, dict)
        return found

    async with watching(source, probe=repo / "probe.yaml"):
        await eventually("a clean tree after the probe", lambda: tree()["dirty"] is False)
        (repo / "b.yaml").unlink()
        await eventually("dirty status", lambda: tree()["dirty"])
        status = source.status()
        assert status["source"] == "git" and status["ref"] == "refs/heads/main"
        assert status["working_tree"] == {"dirty": True, "paths": ["b.yaml"], "note": DIRTY_NOTE}
        assert names(source) == ["a", "b"] and status["revision"] == first

        git(repo, "commit", "-qam", "retire b")
        second = git(repo, "rev-parse", "HEAD")
        await eventually("the commit", lambda: source.status()["revision"] == second)
        assert names(source) == ["a"]
        assert tree()["note"] == "clean"

        git(repo, "commit", "-q", "--amend", "-m", "retire b, reworded")
        amended = git(repo, "rev-parse", "HEAD")
        assert amended != second
        await eventually("the amend", lambda: source.status()["revision"] == amended)
        assert names(source) == ["a"]


async def test_a_bare_remote_is_polled_and_converges_after_a_push(tmp_path: Path) -> None:
    work = new_repo(tmp_path / "work")
    bare = tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--bare", str(work), str(bare))
    options = SourceOptions(repo_url=f"file://{bare}", ref="main", interval=0.2)
    source = DesiredSource(None, time.time, make_reader(None, options, tmp_path / "state"))
    source.reload()
    assert names(source) == ["a", "b"]
    async with watching(source):
        (work / "a.yaml").unlink()
        git(work, "commit", "-qam", "retire a")
        git(work, "push", "-q", str(bare), "main")
        pushed = git(work, "rev-parse", "HEAD")
        await eventually("the pushed commit", lambda: source.status()["revision"] == pushed)
    assert names(source) == ["b"]
    assert source.status()["repository"] == f"file://{bare}"


async def test_an_unreadable_remote_keeps_the_last_good_revision(tmp_path: Path) -> None:
    work = new_repo(tmp_path / "work")
    bare = tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--bare", str(work), str(bare))
    options = SourceOptions(repo_url=f"file://{bare}", ref="main")
    source = DesiredSource(None, time.time, make_reader(None, options, tmp_path / "state"))
    assert source.reload() is True
    subprocess.run(["mv", str(bare), str(tmp_path / "gone.git")], check=True)
    assert source.reload() is False
    status = source.status()
    assert names(source) == ["a", "b"]
    assert "fetch file://" in str(status["error"])


def test_an_unsigned_commit_is_rejected_and_the_signed_one_stays(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "repo")
    keys = tmp_path / "keys"
    keys.mkdir()
    key, public = ssh_key(keys, "ops")
    signers = keys / "allowed_signers"
    signers.write_text(f"t@example.invalid {public}\n")
    (repo / "b.yaml").write_text(profile("b", memory_mb=7))
    git(repo, "add", "-A")
    git(
        repo,
        "-c",
        "gpg.format=ssh",
        "-c",
        f"user.signingkey={key}",
        "commit",
        "-q",
        "-S",
        "-m",
        "signed",
    )
    signed = git(repo, "rev-parse", "HEAD")
    reader = make_reader(repo, SourceOptions(allowed_signers=signers), None)
    source = DesiredSource(repo, time.time, reader)
    assert source.reload() is True and source.status()["revision"] == signed

    (repo / "a.yaml").unlink()
    git(repo, "commit", "-qam", "unsigned removal")
    unsigned = git(repo, "rev-parse", "HEAD")
    assert source.reload() is False
    status = source.status()
    assert status["revision"] == signed and status["rejected_revision"] == unsigned
    (rejected,) = status["rejected"]  # type: ignore[misc]
    assert rejected["errors"][0]["message"] == f"rejected: commit {unsigned[:12]} is not signed"
    assert names(source) == ["a", "b"]
