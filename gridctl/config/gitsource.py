"""Desired state read from a git commit's tree through plumbing, never the working tree.

``git ls-tree`` lists the blobs under the watched path of one commit and
``git cat-file --batch`` reads them, so an uncommitted edit, a half-finished
``git pull`` or a torn checkout can never become the desired state: what loads
is exactly what was committed, and the revision is that commit's SHA.

The same module compares the working tree with the commit (``git status``) so
status can say "dirty working tree, not applied", verifies SSH commit
signatures against an allowed-signers file (``git verify-commit``), and keeps a
bare clone of a remote repository fresh (``git fetch``), the way a Flux
GitRepository does.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from gridctl.config.loading import MAX_FILE_BYTES, YAML_SUFFIXES, LoadReport, check_texts
from gridctl.errors import ConfigIssue

GIT_TIMEOUT_SECONDS = 30
FETCHED_REF = "refs/gridctl/desired"
MAX_DIRTY_PATHS = 32


class GitError(Exception):
    """A git command failed; the message is git's own first line, named by command."""


def git(repo: Path, *args: str, stdin: bytes | None = None) -> bytes:
    """Run ``git -C repo ARGS``; raises ``GitError`` with git's message on failure."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), *args],
            input=stdin,
            capture_output=True,
            timeout=GIT_TIMEOUT_SECONDS,
            check=False,
            env=env,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise GitError(f"git {args[0]}: {exc}") from exc
    if done.returncode != 0:
        message = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise GitError(f"git {args[0]}: {message[-1] if message else f'exit {done.returncode}'}")
    return done.stdout


def git_text(repo: Path, *args: str) -> str:
    return git(repo, *args).decode("utf-8", "replace").strip()


@dataclass(frozen=True)
class Checkout:
    """Where a watched directory lives in its repository."""

    toplevel: Path
    prefix: str  # the directory relative to the top level, "" or "a/b/"


def find_checkout(directory: Path) -> Checkout | None:
    """The repository holding ``directory``, or None when it is not in a git work tree."""
    try:
        if git_text(directory, "rev-parse", "--is-inside-work-tree") != "true":
            return None
        top = git_text(directory, "rev-parse", "--show-toplevel")
        prefix = git_text(directory, "rev-parse", "--show-prefix")
    except GitError:
        return None
    return Checkout(Path(top), prefix)


def resolve_commit(repo: Path, ref: str) -> str:
    """The commit SHA ``ref`` names now (``HEAD`` follows the checked-out branch)."""
    return git_text(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")


def symbolic_name(repo: Path, ref: str) -> str:
    """``refs/heads/main`` for ``HEAD`` on a branch, else ``ref`` itself."""
    if ref != "HEAD":
        return ref
    try:
        return git_text(repo, "symbolic-ref", "-q", "HEAD")
    except GitError:
        return "HEAD (detached)"


def _hidden(relative: PurePosixPath) -> bool:
    return any(part.startswith(".") for part in relative.parts)


def commit_files(repo: Path, commit: str, prefix: str) -> list[tuple[str, str, int, str]]:
    """``(relative path, blob id, size, mode)`` of the YAML blobs under ``prefix`` at ``commit``."""
    listing = git(repo, "ls-tree", "-r", "-z", "--long", "--full-tree", commit, "--", prefix or ".")
    found = []
    for entry in listing.split(b"\0"):
        if not entry:
            continue
        meta, _, name = entry.decode("utf-8", "replace").partition("\t")
        mode, kind, blob, size = meta.split()
        relative = PurePosixPath(name).relative_to(prefix) if prefix else PurePosixPath(name)
        if kind != "blob" or relative.suffix not in YAML_SUFFIXES or _hidden(relative):
            continue
        found.append((relative.as_posix(), blob, int(size) if size.isdigit() else 0, mode))
    return sorted(found)


def read_blobs(repo: Path, blobs: list[str]) -> list[bytes]:
    """The contents of ``blobs``, in order, through one ``git cat-file --batch``."""
    if not blobs:
        return []
    out = git(repo, "cat-file", "--batch", stdin=("\n".join(blobs) + "\n").encode())
    contents, at = [], 0
    for _ in blobs:
        header_end = out.index(b"\n", at)
        size = int(out[at:header_end].split()[2])
        start = header_end + 1
        contents.append(out[start : start + size])
        at = start + size + 1
    return contents


def check_commit(repo: Path, commit: str, prefix: str, shown_root: str) -> LoadReport:
    """Load the desired state committed under ``prefix`` at ``commit`` (never raises on bad
    YAML: errors name the file as it appears under ``shown_root``)."""
    files = commit_files(repo, commit, prefix)
    problems: list[ConfigIssue] = []
    wanted: list[tuple[str, str]] = []
    for relative, blob, size, mode in files:
        shown = f"{shown_root.rstrip('/')}/{relative}"
        if mode == "120000":
            problems.append(ConfigIssue(shown, 0, 0, message="a symbolic link is not loaded"))
        elif size > MAX_FILE_BYTES:
            problems.append(
                ConfigIssue(shown, 0, 0, message=f"file is larger than {MAX_FILE_BYTES} bytes")
            )
        else:
            wanted.append((shown, blob))
    texts: list[tuple[str, str]] = []
    for (shown, _blob), raw in zip(wanted, read_blobs(repo, [b for _, b in wanted]), strict=True):
        try:
            texts.append((shown, raw.decode("utf-8")))
        except UnicodeDecodeError as exc:
            problems.append(ConfigIssue(shown, 0, 0, message=f"file is not UTF-8: {exc.reason}"))
    if not files:
        where = prefix.rstrip("/") or "the repository root"
        problems.append(
            ConfigIssue(shown_root, 0, 0, message=f"commit {commit[:12]} has no YAML under {where}")
        )
    return check_texts(shown_root, texts, problems, lambda _docs: (commit, False))


def uncommitted_paths(checkout: Checkout, commit: str) -> list[str]:
    """Paths under the watched directory that differ from ``commit`` in the working tree
    (modified, removed or untracked), relative to the top level, sorted."""
    try:
        changed = git(
            checkout.toplevel, "diff", "--name-only", "-z", commit, "--", checkout.prefix or "."
        )
        untracked = git(
            checkout.toplevel,
            "ls-files",
            "-z",
            "--others",
            "--exclude-standard",
            "--",
            checkout.prefix or ".",
        )
    except GitError:
        return []
    names = {n.decode("utf-8", "replace") for n in (changed + b"\0" + untracked).split(b"\0") if n}
    return sorted(names)


def verify_commit(repo: Path, commit: str, allowed_signers: Path) -> str | None:
    """None when ``commit`` carries a good SSH signature by an allowed signer, else why not."""
    done = subprocess.run(
        [
            "git",
            "-C",
            str(repo),
            "-c",
            f"gpg.ssh.allowedSignersFile={allowed_signers}",
            "verify-commit",
            "--raw",
            commit,
        ],
        capture_output=True,
        timeout=GIT_TIMEOUT_SECONDS,
        check=False,
        env={**os.environ, "LC_ALL": "C"},
    )
    if done.returncode == 0:
        return None
    lines = [
        line.strip() for line in done.stderr.decode("utf-8", "replace").splitlines() if line.strip()
    ]
    signed = git(repo, "cat-file", "commit", commit).find(b"\ngpgsig ") >= 0
    if not signed:
        return f"commit {commit[:12]} is not signed"
    detail = lines[-1] if lines else f"git verify-commit exit {done.returncode}"
    return f"commit {commit[:12]} is not signed by an allowed signer: {detail}"


def fetch_remote(mirror: Path, url: str, ref: str) -> None:
    """Bring ``ref`` of ``url`` into the bare ``mirror`` (created on first use) as
    ``FETCHED_REF``; raises ``GitError`` when the remote cannot be read."""
    if not (mirror / "HEAD").exists():
        mirror.mkdir(parents=True, exist_ok=True)
        git(mirror, "init", "--quiet", "--bare")
    git(mirror, "fetch", "--quiet", "--no-tags", "--force", url, f"+{ref}:{FETCHED_REF}")


__all__ = [
    "FETCHED_REF",
    "Checkout",
    "GitError",
    "check_commit",
    "commit_files",
    "fetch_remote",
    "find_checkout",
    "git",
    "read_blobs",
    "resolve_commit",
    "symbolic_name",
    "uncommitted_paths",
    "verify_commit",
]
