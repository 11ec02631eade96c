"""Load a directory of YAML documents into one desired state, all or nothing.

Every document is validated against the schema of its kind, then checked
across documents; any error means no desired state is produced, and every
error names its file, line, column and JSON pointer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gridctl.config import resolving
from gridctl.config.revision import revision_of
from gridctl.config.schemas import (
    KIND_SCHEMAS,
    compiled_accepts,
    fill_defaults,
    load_schema,
    object_properties,
    validator,
)
from gridctl.config.semantics import Checked, check_documents
from gridctl.config.yamlsource import SourceDocument, escape_pointer_token, parse_yaml
from gridctl.domain import ControllerPolicy, DesiredState, WorkloadCatalog
from gridctl.errors import ConfigError, ConfigIssue

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError

MAX_FILE_BYTES = 8 * 1024 * 1024
YAML_SUFFIXES = (".yaml", ".yml")
MAX_MESSAGE = 300


@dataclass
class LoadReport:
    """What loading a directory found; ``state`` is None unless it is valid."""

    path: str
    revision: str
    dirty: bool
    documents: int
    errors: list[ConfigIssue] = field(default_factory=list)
    warnings: list[ConfigIssue] = field(default_factory=list)
    state: DesiredState | None = None

    @property
    def valid(self) -> bool:
        return not self.errors

    def as_json(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "path": self.path,
            "revision": self.revision,
            "dirty": self.dirty,
            "documents": self.documents,
            "errors": [e.as_json() for e in self.errors],
            "warnings": [w.as_json() for w in self.warnings],
        }


def yaml_files(root: Path) -> list[Path]:
    """YAML files under ``root`` (or ``root`` itself), hidden directories skipped, sorted."""
    if root.is_file():
        return [root]
    found = [
        p
        for p in root.rglob("*")
        if p.suffix in YAML_SUFFIXES
        and p.is_file()
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
    ]
    return sorted(found)


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _read(path: Path, shown: str) -> tuple[str | None, ConfigIssue | None]:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            return None, ConfigIssue(
                shown, 0, 0, message=f"file is larger than {MAX_FILE_BYTES} bytes"
            )
        return path.read_bytes().decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return None, ConfigIssue(shown, 0, 0, message=f"file is not UTF-8: {exc.reason}")
    except OSError as exc:
        return None, ConfigIssue(shown, 0, 0, message=f"cannot read file: {exc.strerror}")


def _identity(doc: SourceDocument) -> tuple[str, str]:
    data = doc.data if isinstance(doc.data, dict) else {}
    kind = data.get("kind")
    metadata = data.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return (kind if isinstance(kind, str) else "", name if isinstance(name, str) else "")


def _pointer(path: Any) -> str:
    return "".join("/" + escape_pointer_token(str(token)) for token in path)


def _schema_issues(doc: SourceDocument, kind: str, name: str, relative: str) -> list[ConfigIssue]:
    """Every schema error of ``doc``, each at its line; none when the compiled validator
    accepts it (its acceptance is ``jsonschema``'s, see ``schemas.compiled``)."""
    if compiled_accepts(relative, doc.data):
        return []
    issues: list[ConfigIssue] = []

    def add(pointer: str, message: str, *, key: bool = False) -> None:
        line, column = doc.position(pointer, key=key)
        if len(message) > MAX_MESSAGE:
            message = message[: MAX_MESSAGE - 3] + "..."
        issues.append(ConfigIssue(doc.file, line, column, kind, name, pointer, message))

    errors = sorted(validator(relative).iter_errors(doc.data), key=lambda e: list(map(str, e.path)))
    for error in errors:
        _explain(error, add, load_schema(relative)["$id"])
    return issues


def _explain(error: ValidationError, add: Any, base_uri: str) -> None:
    pointer = _pointer(error.absolute_path)
    instance = error.instance
    if error.validator in ("additionalProperties", "unevaluatedProperties") and isinstance(
        instance, dict
    ):
        schema = error.schema if isinstance(error.schema, dict) else {}
        known = {name for name, _, _ in object_properties(schema, base_uri)}
        unknown = [k for k in instance if k not in known] or list(instance)
        for key in unknown:
            add(f"{pointer}/{escape_pointer_token(key)}", f"unknown field {key!r}", key=True)
        return
    if error.validator == "required" and isinstance(instance, dict):
        for missing in error.validator_value:  # type: ignore[union-attr]
            if missing not in instance:
                add(
                    f"{pointer}/{escape_pointer_token(missing)}",
                    f"missing required field {missing!r}",
                )
        return
    add(pointer, error.message)


def _check_document(doc: SourceDocument) -> tuple[Checked | None, list[ConfigIssue]]:
    kind, name = _identity(doc)
    if not isinstance(doc.data, dict):
        return None, [
            ConfigIssue(doc.file, doc.line, doc.column, message="a document must be a mapping")
        ]
    if not kind:
        line, column = doc.position("/kind")
        return None, [
            ConfigIssue(doc.file, line, column, "", name, "/kind", "missing required field 'kind'")
        ]
    relative = KIND_SCHEMAS.get(kind)
    if relative is None:
        line, column = doc.position("/kind")
        known = ", ".join(sorted(KIND_SCHEMAS))
        return None, [
            ConfigIssue(
                doc.file,
                line,
                column,
                kind,
                name,
                "/kind",
                f"unknown kind {kind!r}; expected one of {known}",
            )
        ]
    issues = _schema_issues(doc, kind, name, relative)
    if issues:
        return None, issues
    return Checked(doc, kind, name, fill_defaults(doc.data, relative)), []


def _build_state(checked: list[Checked], revision: str, dirty: bool) -> DesiredState:
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for doc in checked:
        by_kind.setdefault(doc.kind, []).append(doc.data)
    profiles = sorted(
        (resolving.profile_from_document(d) for d in by_kind.get("ModelProfile", [])),
        key=lambda p: p.name,
    )
    policies = by_kind.get("ControllerPolicy", [])
    catalogs = by_kind.get("WorkloadCatalog", [])
    fleets = sorted(
        (resolving.fleet_from_document(d) for d in by_kind.get("Fleet", [])),
        key=lambda f: f.name,
    )
    return DesiredState(
        revision=revision,
        dirty=dirty,
        profiles=tuple(profiles),
        policy=resolving.policy_from_document(policies[0]) if policies else ControllerPolicy(),
        catalog=resolving.catalog_from_document(catalogs[0]) if catalogs else WorkloadCatalog(),
        fleets=tuple(fleets),
        documents=len(checked),
    )


def check_texts(
    shown_root: str,
    texts: list[tuple[str, str]],
    problems: list[ConfigIssue],
    revise: Callable[[list[Any]], tuple[str, bool]],
) -> LoadReport:
    """Check YAML ``texts`` (shown name, text) read from one source, all or nothing.

    ``problems`` are the files that could not be read; ``revise`` names the revision
    from the canonical documents (raw texts when invalid), so a working tree and a
    commit's tree load through exactly the same checks.
    """
    errors = list(problems)
    sources: list[SourceDocument] = []
    raw_texts: list[str] = []
    for shown, text in texts:
        raw_texts.append(shown + "\n" + text)
        documents, issues = parse_yaml(text, shown)
        errors.extend(issues)
        sources.extend(documents)

    checked: list[Checked] = []
    for doc in sources:
        result, issues = _check_document(doc)
        errors.extend(issues)
        if result is not None:
            checked.append(result)
    cross_errors, warnings = check_documents(checked)
    errors.extend(cross_errors)

    if errors:
        revision, dirty = revise(raw_texts)
        return LoadReport(
            shown_root, revision, dirty, len(sources), sorted(errors), sorted(warnings)
        )
    revision, dirty = revise([d.data for d in checked])
    state = _build_state(checked, revision, dirty)
    return LoadReport(shown_root, revision, dirty, len(checked), [], sorted(warnings), state)


def check_directory(path: str | Path) -> LoadReport:
    """Load and check ``path`` (a directory or one file) as it is on disk; never raises."""
    root = Path(path)
    shown_root = _display(root.resolve()) if root.is_absolute() else str(path)
    if not root.exists():
        issue = ConfigIssue(shown_root, 0, 0, message="no such file or directory")
        return LoadReport(shown_root, "", True, 0, errors=[issue])
    problems: list[ConfigIssue] = []
    texts: list[tuple[str, str]] = []
    for file in yaml_files(root):
        shown = _display(file) if root.is_absolute() else str(file)
        text, problem = _read(file, shown)
        if problem:
            problems.append(problem)
            continue
        assert text is not None
        texts.append((shown, text))
    directory = root if root.is_dir() else root.parent
    return check_texts(shown_root, texts, problems, lambda docs: revision_of(directory, docs))


def load_directory(path: str | Path) -> DesiredState:
    """The desired state declared under ``path``; raises ``ConfigError`` listing every error."""
    report = check_directory(path)
    if report.state is None:
        raise ConfigError(report.errors, report.warnings)
    return report.state
