"""How the watched desired state is read: a commit of a git ref, or the working tree.

``CommitReader`` is the default: it follows a ref of a local repository (the
checked-out branch unless told otherwise) or of a remote one fetched into a bare
clone in the state directory, loads the tree of the commit the ref names through
git plumbing, optionally refuses commits without a good SSH signature, and
reports the working tree's uncommitted changes as "dirty working tree, not
applied". ``WorktreeReader`` is the old behaviour for local experiments: the
files on disk are the desired state, and every status says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from gridctl.config import check_directory
from gridctl.config.gitsource import (
    FETCHED_REF,
    Checkout,
    GitError,
    check_commit,
    fetch_remote,
    find_checkout,
    git_text,
    resolve_commit,
    symbolic_name,
    uncommitted_paths,
    verify_commit,
)
from gridctl.config.loading import YAML_SUFFIXES, LoadReport
from gridctl.errors import ConfigIssue

DIRTY_NOTE = "dirty working tree, not applied"
WORKTREE_NOTE = "working tree mode: uncommitted edits go live (local experiments only)"
MAX_SHOWN_PATHS = 32
DEFAULT_INTERVAL_SECONDS = 30.0


@dataclass(frozen=True)
class Reading:
    """One read of the source: the load report (None when nothing could be read, e.g. a
    failed fetch) and what status shows about the source beside it."""

    report: LoadReport | None
    details: dict[str, object]


class SourceReader(Protocol):
    label: str
    interval: float  # seconds between polls, besides file and ref events

    def read(self) -> Reading: ...

    def watch_paths(self) -> list[Path]: ...

    def wants(self, path: str) -> bool: ...

    def describe(self) -> dict[str, object]: ...


@dataclass
class WorktreeReader:
    """The files on disk are the desired state (``--worktree``)."""

    directory: Path
    label: str = "worktree"
    interval: float = DEFAULT_INTERVAL_SECONDS

    def read(self) -> Reading:
        return Reading(check_directory(self.directory), {"note": WORKTREE_NOTE})

    def watch_paths(self) -> list[Path]:
        return [self.directory]

    def wants(self, path: str) -> bool:
        return path.endswith(YAML_SUFFIXES) and "/.git/" not in path

    def describe(self) -> dict[str, object]:
        return {"directory": str(self.directory), "note": WORKTREE_NOTE}


@dataclass
class CommitReader:
    """The tree of the commit ``ref`` names, read through git plumbing.

    ``repo`` is a local repository's top level (``checkout`` set: its working tree is
    compared for dirty status) or the bare mirror of ``remote`` (fetched every read).
    """

    repo: Path
    ref: str
    prefix: str
    shown_root: str
    checkout: Checkout | None = None
    directory: Path | None = None  # the watched directory of a local checkout
    remote: str | None = None
    allowed_signers: Path | None = None
    label: str = "git"
    interval: float = DEFAULT_INTERVAL_SECONDS
    _git_dirs: list[Path] = field(default_factory=list)
    _cached: tuple[str, LoadReport] | None = None

    def __post_init__(self) -> None:
        if self.checkout is not None:
            for flag in ("--absolute-git-dir", "--git-common-dir"):
                try:
                    found = Path(git_text(self.repo, "rev-parse", flag))
                except GitError:
                    continue
                found = found if found.is_absolute() else self.repo / found
                if found.resolve() not in self._git_dirs:
                    self._git_dirs.append(found.resolve())

    def _ref_to_read(self) -> str:
        return FETCHED_REF if self.remote is not None else self.ref

    def read(self) -> Reading:
        details = self.describe()
        if self.remote is not None:
            try:
                fetch_remote(self.repo, self.remote, self.ref)
            except GitError as exc:
                details["error"] = f"fetch {self.remote} {self.ref}: {exc}"
                return Reading(None, details)
        try:
            commit = resolve_commit(self.repo, self._ref_to_read())
        except GitError:
            details["error"] = f"ref {self.ref} names no commit in {self.repo}"
            return Reading(None, details)
        details["commit"] = commit
        if self.checkout is not None:
            changed = uncommitted_paths(self.checkout, commit)
            details["working_tree"] = {
                "dirty": bool(changed),
                "paths": changed[:MAX_SHOWN_PATHS],
                "note": DIRTY_NOTE if changed else "clean",
            }
        if self._cached is not None and self._cached[0] == commit:
            return Reading(self._cached[1], details)  # same commit: the same tree
        report = self._load(commit)
        self._cached = (commit, report)
        return Reading(report, details)

    def _load(self, commit: str) -> LoadReport:
        if self.allowed_signers is not None:
            problem = verify_commit(self.repo, commit, self.allowed_signers)
            if problem is not None:
                issue = ConfigIssue(self.shown_root, 0, 0, message=f"rejected: {problem}")
                return LoadReport(self.shown_root, commit, False, 0, errors=[issue])
        try:
            return check_commit(self.repo, commit, self.prefix, self.shown_root)
        except GitError as exc:
            issue = ConfigIssue(self.shown_root, 0, 0, message=f"cannot read the commit: {exc}")
            return LoadReport(self.shown_root, commit, False, 0, errors=[issue])

    def watch_paths(self) -> list[Path]:
        if self.checkout is None:
            return []  # a remote is polled every interval
        # the watched directory (dirty status) and the git directories (ref moves), not the
        # whole top level: a repository may hold far more than its policies
        watched = [self.directory] if self.directory else []
        return watched + [
            d for d in self._git_dirs if not any(d.is_relative_to(w) for w in watched)
        ]

    def wants(self, path: str) -> bool:
        """Ref moves (HEAD, refs/, packed-refs) and YAML edits (for the dirty status)."""
        for git_dir in self._git_dirs:
            if path.startswith(str(git_dir) + "/"):
                rest = path[len(str(git_dir)) + 1 :]
                return rest in ("HEAD", "packed-refs") or rest.startswith("refs/")
        return path.endswith(YAML_SUFFIXES) and "/.git/" not in path

    def describe(self) -> dict[str, object]:
        where = self.remote or str(self.checkout.toplevel if self.checkout else self.repo)
        return {
            "repository": where,
            "ref": symbolic_name(self.repo, self.ref) if self.remote is None else self.ref,
            "path": self.prefix.rstrip("/") or ".",
            "verify_commits": self.allowed_signers is not None,
        }


@dataclass(frozen=True)
class SourceOptions:
    """How ``gridctl controller`` reads desired state (the CLI flags, in one place).

    ``worktree``: True follows the files on disk; False requires commits; None (the
    library default) follows commits when the directory is in a git repository and the
    working tree otherwise, labelled as such.
    """

    worktree: bool | None = None
    repo_url: str | None = None
    ref: str | None = None
    path: str = ""
    interval: float = DEFAULT_INTERVAL_SECONDS
    allowed_signers: Path | None = None


def make_reader(
    directory: Path | None, options: SourceOptions, state_dir: Path | None
) -> SourceReader:
    """The reader for a watched ``directory`` or a remote ``options.repo_url``; raises
    ``ValueError`` with an operator-facing message when the combination cannot work."""
    signers = options.allowed_signers
    if signers is not None and not signers.is_file():
        raise ValueError(f"--allowed-signers {signers}: no such file")
    if options.repo_url is not None:
        if state_dir is None:
            raise ValueError("--repo needs a state directory to clone into")
        prefix = options.path.strip("/")
        return CommitReader(
            repo=state_dir / "desired-repo.git",
            ref=options.ref or "HEAD",
            prefix=prefix + "/" if prefix else "",
            shown_root=f"{options.repo_url}//{prefix or '.'}",
            remote=options.repo_url,
            allowed_signers=signers,
            interval=options.interval,
        )
    if directory is None:
        raise ValueError("a watched directory or --repo is required")
    if options.worktree:
        if signers is not None:
            raise ValueError("--verify-commits needs commits: it cannot be used with --worktree")
        return WorktreeReader(directory, interval=options.interval)
    checkout = find_checkout(directory)
    if checkout is None:
        if options.worktree is False or signers is not None:
            raise ValueError(
                f"{directory} is not inside a git repository: commit it, or pass --worktree "
                "to follow the files on disk"
            )
        return WorktreeReader(directory, interval=options.interval)
    shown = str(directory).rstrip("/")
    return CommitReader(
        repo=checkout.toplevel,
        ref=options.ref or "HEAD",
        prefix=checkout.prefix,
        shown_root=shown,
        checkout=checkout,
        directory=directory,
        allowed_signers=signers,
        interval=options.interval,
    )


__all__ = [
    "DIRTY_NOTE",
    "WORKTREE_NOTE",
    "CommitReader",
    "Reading",
    "SourceOptions",
    "SourceReader",
    "WorktreeReader",
    "make_reader",
]
