"""The revision that identifies one loaded desired state.

Inside a git work tree with nothing uncommitted under the directory it is the
commit SHA; otherwise ``sha256:<digest>`` of the canonical documents, marked
dirty, so two directories with the same meaning share a revision.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

GIT_TIMEOUT_SECONDS = 10
_COMMIT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def _git(directory: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _may_be_in_work_tree(directory: Path) -> bool:
    """False only where ``git status`` must fail: no ``.git`` (a directory, or the file of a
    linked work tree or submodule) in the directory or above it, and no ``GIT_DIR`` or
    ``GIT_WORK_TREE`` naming a repository elsewhere. Saves starting git (a few ms) for
    a directory outside any repository, such as a snapshot's scratch copy."""
    if "GIT_DIR" in os.environ or "GIT_WORK_TREE" in os.environ:
        return True
    try:
        here = directory.resolve()
    except OSError:
        return True  # let git judge
    return any(os.path.lexists(place / ".git") for place in (here, *here.parents))


def git_revision(directory: Path) -> str | None:
    """The HEAD commit SHA when ``directory`` is clean in a git work tree, else None.

    One ``git status``: its ``--branch`` header names HEAD's commit (``(initial)``
    before the first), every other line is a change under the directory, and it fails
    outside a work tree (one process instead of three on every load)."""
    if not _may_be_in_work_tree(directory):
        return None
    status = _git(
        directory, "status", "--porcelain=v2", "--branch", "--untracked-files=all", "--", "."
    )
    if status is None:
        return None
    head = None
    for line in status.splitlines():
        if not line.startswith("# "):
            return None  # a change, an untracked or an unmerged file under the directory
        if line.startswith("# branch.oid "):
            head = line.removeprefix("# branch.oid ").strip()
    if head is None or not _COMMIT_ID.fullmatch(head):
        return None
    return head


# ``json.dumps`` with these options builds an encoder per call; one serves every document
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(value: Any) -> str:
    return _CANONICAL.encode(value)


def content_digest(documents: list[Any]) -> str:
    """``sha256:`` digest of documents, independent of their file order."""
    canon = sorted(canonical_json(d) for d in documents)
    return "sha256:" + hashlib.sha256("\n".join(canon).encode("utf-8")).hexdigest()


def revision_of(directory: Path, documents: list[Any]) -> tuple[str, bool]:
    """``(revision, dirty)`` for a directory whose canonical documents are given."""
    sha = git_revision(directory)
    if sha is not None:
        return sha, False
    return content_digest(documents), True
