"""Revision: the commit SHA of a clean git work tree, else a dirty content digest."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from gridctl.config import load_directory

PROFILE = "apiVersion: gridctl/v1\nkind: ModelProfile\nmetadata: {name: a}\nspec: {memory_mb: 1}\n"

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(cwd: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
        "HOME": str(cwd),
        "PATH": "/usr/bin:/bin:/usr/local/bin",
    }
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


def test_clean_commit_then_dirty_edit(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "a.yaml").write_text(PROFILE)
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "profiles")
    head = git(tmp_path, "rev-parse", "HEAD")

    clean = load_directory(policies)
    assert (clean.revision, clean.dirty) == (head, False)

    (policies / "a.yaml").write_text(PROFILE.replace("memory_mb: 1", "memory_mb: 2"))
    dirty = load_directory(policies)
    assert dirty.dirty is True
    assert dirty.revision.startswith("sha256:") and len(dirty.revision) == 7 + 64

    (policies / "a.yaml").write_text(PROFILE)
    (policies / "new.yaml").write_text(PROFILE.replace("name: a", "name: b"))
    assert load_directory(policies).dirty is True  # untracked files count


def test_digest_is_independent_of_file_layout(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    (one / "all.yaml").write_text(PROFILE + "---\n" + PROFILE.replace("name: a", "name: b"))
    (two / "b.yaml").write_text(PROFILE.replace("name: a", "name: b"))
    (two / "a.yml").write_text("# same meaning, other layout\n" + PROFILE)
    assert load_directory(one).revision == load_directory(two).revision


def test_a_repository_without_a_commit_is_dirty(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / "a.yaml").write_text(PROFILE)
    git(tmp_path, "add", ".")
    state = load_directory(tmp_path)
    assert state.dirty is True and state.revision.startswith("sha256:")


def test_a_change_elsewhere_in_the_repository_leaves_the_directory_clean(
    tmp_path: Path,
) -> None:
    git(tmp_path, "init", "-q")
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "a.yaml").write_text(PROFILE)
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "profiles")
    (tmp_path / "README").write_text("not a policy\n")
    state = load_directory(policies)
    assert (state.revision, state.dirty) == (git(tmp_path, "rev-parse", "HEAD"), False)
    staged = policies / "b.yaml"
    staged.write_text(PROFILE.replace("name: a", "name: b"))
    git(tmp_path, "add", ".")  # staged but not committed
    assert load_directory(policies).dirty is True


def test_a_repository_named_by_git_dir_and_a_linked_work_tree_are_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """git is asked wherever it could find a work tree: through ``GIT_DIR`` and
    ``GIT_WORK_TREE`` (no ``.git`` near the directory), and in a linked work tree, whose
    ``.git`` is a file."""
    repo, tree = tmp_path / "repo", tmp_path / "tree"
    repo.mkdir()
    tree.mkdir()
    git(repo, "init", "-q")
    (repo / "a.yaml").write_text(PROFILE)
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "profiles")
    head = git(repo, "rev-parse", "HEAD")

    git(repo, "worktree", "add", "-q", str(tree / "linked"))
    assert (tree / "linked" / ".git").is_file()
    linked = load_directory(tree / "linked")
    assert (linked.revision, linked.dirty) == (head, False)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "a.yaml").write_text(PROFILE)
    monkeypatch.setenv("GIT_DIR", str(repo / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(elsewhere))
    named = load_directory(elsewhere)
    assert (named.revision, named.dirty) == (head, False)
