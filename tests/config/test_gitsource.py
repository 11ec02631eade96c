"""The commit's tree is the desired state: git plumbing reads, dirty paths, SSH signatures,
a bare remote fetched into a mirror."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from gridctl.config.gitsource import (
    FETCHED_REF,
    check_commit,
    fetch_remote,
    find_checkout,
    resolve_commit,
    uncommitted_paths,
    verify_commit,
)
from gridctl.controller.reading import DIRTY_NOTE, SourceOptions, make_reader

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def profile(name: str, memory_mb: int = 1) -> str:
    return (
        f"apiVersion: gridctl/v1\nkind: ModelProfile\nmetadata: {{name: {name}}}\n"
        f"spec: {{memory_mb: {memory_mb}}}\n"
    )


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


def repo_with_policies(root: Path) -> Path:
    git(root, "init", "-q", "-b", "main")
    policies = root / "policies"
    (policies / "nested").mkdir(parents=True)
    (policies / "a.yaml").write_text(profile("a"))
    (policies / "nested" / "b.yml").write_text(profile("b"))
    (policies / ".hidden").mkdir()
    (policies / ".hidden" / "c.yaml").write_text("not: [valid")
    (root / "outside.yaml").write_text("kind: Nope\n")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "profiles")
    return policies


def test_the_commit_tree_loads_and_working_tree_edits_do_not(tmp_path: Path) -> None:
    policies = repo_with_policies(tmp_path)
    head = git(tmp_path, "rev-parse", "HEAD")
    checkout = find_checkout(policies)
    assert checkout is not None and checkout.prefix == "policies/"
    assert resolve_commit(checkout.toplevel, "HEAD") == head

    (policies / "a.yaml").unlink()  # uncommitted removal
    (policies / "nested" / "b.yml").write_text("kind: [broken")  # torn edit
    (policies / "new.yaml").write_text(profile("n"))  # untracked
    report = check_commit(checkout.toplevel, head, checkout.prefix, "policies")
    assert report.errors == []
    assert report.state is not None
    assert (report.revision, report.dirty) == (head, False)
    assert [p.name for p in report.state.profiles] == ["a", "b"]
    assert uncommitted_paths(checkout, head) == [
        "policies/a.yaml",
        "policies/nested/b.yml",
        "policies/new.yaml",
    ]

    reader = make_reader(policies, SourceOptions(), None)
    reading = reader.read()
    assert reading.report is not None and reading.report.revision == head
    tree = reading.details["working_tree"]
    assert isinstance(tree, dict) and tree["dirty"] is True and tree["note"] == DIRTY_NOTE
    assert reading.details["ref"] == "refs/heads/main"


def test_bad_yaml_in_a_commit_names_the_file_and_line(tmp_path: Path) -> None:
    policies = repo_with_policies(tmp_path)
    (policies / "a.yaml").write_text(profile("a") + "  replicas: [1\n")
    git(tmp_path, "commit", "-qam", "broken")
    head = git(tmp_path, "rev-parse", "HEAD")
    report = check_commit(tmp_path, head, "policies/", "policies")
    assert report.state is None and report.revision == head
    assert report.errors[0].file == "policies/a.yaml" and report.errors[0].line > 0


def test_an_empty_path_is_an_error_not_an_empty_fleet(tmp_path: Path) -> None:
    repo_with_policies(tmp_path)
    head = git(tmp_path, "rev-parse", "HEAD")
    report = check_commit(tmp_path, head, "missing/", "missing")
    assert report.state is None
    assert "has no YAML under missing" in report.errors[0].message


def test_outside_git_needs_worktree_when_commits_are_required(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(ValueError, match="not inside a git repository"):
        make_reader(plain, SourceOptions(worktree=False), None)
    assert make_reader(plain, SourceOptions(worktree=True), None).label == "worktree"
    assert make_reader(plain, SourceOptions(), None).label == "worktree"


def test_a_bare_remote_is_fetched_into_the_mirror(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    repo_with_policies(work)
    bare = tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--bare", str(work), str(bare))
    mirror = tmp_path / "state" / "mirror.git"
    fetch_remote(mirror, f"file://{bare}", "main")
    first = resolve_commit(mirror, FETCHED_REF)
    assert first == git(work, "rev-parse", "HEAD")

    (work / "policies" / "a.yaml").write_text(profile("a", memory_mb=2))
    git(work, "commit", "-qam", "more memory")
    git(work, "push", "-q", str(bare), "main")
    reader = make_reader(
        None, SourceOptions(repo_url=f"file://{bare}", ref="main", path="policies"), mirror.parent
    )
    reading = reader.read()
    assert reading.report is not None and reading.report.state is not None
    assert reading.report.revision == git(work, "rev-parse", "HEAD") != first
    assert [p.memory_mb for p in reading.report.state.profiles] == [2, 1]


def ssh_key(directory: Path, name: str) -> tuple[Path, str]:
    key = directory / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True
    )
    return key, (directory / f"{name}.pub").read_text().strip()


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen is not installed")
def test_signed_commits_verify_and_others_are_refused(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    policies = repo_with_policies(repo)
    keys = tmp_path / "keys"
    keys.mkdir()
    good, good_pub = ssh_key(keys, "good")
    bad, _ = ssh_key(keys, "bad")
    signers = keys / "allowed_signers"
    signers.write_text(f"t@example.invalid {good_pub}\n")

    unsigned = git(repo, "rev-parse", "HEAD")
    assert verify_commit(repo, unsigned, signers) == f"commit {unsigned[:12]} is not signed"

    def signed_commit(key: Path, message: str) -> str:
        (policies / "a.yaml").write_text(profile("a", memory_mb=len(message)))
        git(repo, "add", "-A")
        git(
            repo,
            "-c",
            "gpg.format=ssh",
            "-c",
            f"user.signingkey={key}",
            "commit",
            "-qS",
            "-m",
            message,
        )
        return git(repo, "rev-parse", "HEAD")

    trusted = signed_commit(good, "signed by good")
    assert verify_commit(repo, trusted, signers) is None
    stranger = signed_commit(bad, "signed by a stranger")
    problem = verify_commit(repo, stranger, signers)
    assert problem is not None and "not signed by an allowed signer" in problem

    reader = make_reader(policies, SourceOptions(allowed_signers=signers), None)
    reading = reader.read()
    assert reading.report is not None and reading.report.state is None
    assert "not signed by an allowed signer" in reading.report.errors[0].message
