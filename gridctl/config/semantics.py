"""Checks the schemas cannot express: uniqueness, cross-field and cross-document rules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from gridctl.config.yamlsource import SourceDocument
from gridctl.domain.profiles import DEFAULT_RUNTIME
from gridctl.errors import ConfigIssue

SECRET_QUERY_WORDS = ("token", "key", "sig", "secret", "password", "passwd", "auth", "credential")


@dataclass
class Checked:
    """A schema-valid document with its defaults applied."""

    source: SourceDocument
    kind: str
    name: str
    data: dict[str, Any]


def _issue(doc: Checked, pointer: str, message: str, *, key: bool = False) -> ConfigIssue:
    line, column = doc.source.position(pointer, key=key)
    return ConfigIssue(doc.source.file, line, column, doc.kind, doc.name, pointer, message)


def _warning(doc: Checked, pointer: str, message: str) -> ConfigIssue:
    issue = _issue(doc, pointer, message)
    return ConfigIssue(
        issue.file,
        issue.line,
        issue.column,
        issue.kind,
        issue.name,
        issue.pointer,
        issue.message,
        severity="warning",
    )


def source_credential_problem(source: str) -> str | None:
    """Why an artifact source URI is unacceptable, or None."""
    parts = urlsplit(source)
    if "@" in parts.netloc:
        return "artifact source must not embed credentials (user:password@host)"
    for key, _ in parse_qsl(parts.query, keep_blank_values=True):
        lowered = key.lower()
        if any(word in lowered for word in SECRET_QUERY_WORDS):
            return f"artifact source must not carry credentials in its query ({key!r})"
    return None


def check_profile(doc: Checked) -> list[ConfigIssue]:
    spec = doc.data["spec"]
    issues: list[ConfigIssue] = []
    if spec["min_replicas"] > spec["max_replicas"]:
        issues.append(
            _issue(
                doc,
                "/spec/min_replicas",
                f"min_replicas ({spec['min_replicas']}) is greater than max_replicas "
                f"({spec['max_replicas']})",
            )
        )
    if len(spec["pins"]) > spec["max_replicas"]:
        issues.append(
            _issue(
                doc,
                "/spec/pins",
                f"{len(spec['pins'])} pins exceed max_replicas ({spec['max_replicas']})",
            )
        )
    if spec["max_replicas"] and spec["min_failure_domains"] > spec["max_replicas"]:
        issues.append(
            _issue(
                doc,
                "/spec/min_failure_domains",
                f"min_failure_domains ({spec['min_failure_domains']}) can never be met with "
                f"max_replicas {spec['max_replicas']}",
            )
        )
    artifact = spec.get("artifact") or {}
    source = artifact.get("source")
    if source is not None:
        missing = [f for f in ("sha256", "size_mb") if f not in artifact]
        if missing:
            issues.append(
                _issue(
                    doc,
                    "/spec/artifact",
                    "artifact.source enables autonomous fetch and requires "
                    + " and ".join(missing),
                )
            )
        problem = source_credential_problem(source)
        if problem:
            issues.append(_issue(doc, "/spec/artifact/source", problem))
    if doc.name in spec["colocation_excludes"]:
        issues.append(_issue(doc, "/spec/colocation_excludes", "a model cannot exclude itself"))
    issues.extend(_split_issues(doc, spec))
    return issues


def _split_issues(doc: Checked, spec: dict[str, Any]) -> list[ConfigIssue]:
    split = spec.get("split")
    if split is None:
        return []
    issues: list[ConfigIssue] = []
    if split["max_stages"] > split["layers"]:
        issues.append(
            _issue(
                doc,
                "/spec/split/max_stages",
                f"split.max_stages ({split['max_stages']}) exceeds split.layers "
                f"({split['layers']}): every stage serves at least one layer",
            )
        )
    if DEFAULT_RUNTIME not in spec["runtimes"]:
        issues.append(
            _issue(
                doc,
                "/spec/split",
                f"split runs on {DEFAULT_RUNTIME}'s RPC backend, which runtimes does not list",
            )
        )
    return issues


def check_catalog(doc: Checked) -> list[ConfigIssue]:
    spec = doc.data["spec"]
    issues: list[ConfigIssue] = []
    seen: set[str] = set()
    for i, workload in enumerate(spec["workloads"]):
        if workload["name"] in seen:
            issues.append(
                _issue(doc, f"/spec/workloads/{i}/name", f"duplicate workload {workload['name']!r}")
            )
        seen.add(workload["name"])
    if spec["default_workload"] not in seen:
        issues.append(
            _issue(
                doc,
                "/spec/default_workload",
                f"default_workload {spec['default_workload']!r} is not in workloads",
            )
        )
    return issues


def check_fleet(doc: Checked) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    seen: set[str] = set()
    for i, host in enumerate(doc.data["spec"]["hosts"]):
        if host["host_id"] in seen:
            issues.append(
                _issue(doc, f"/spec/hosts/{i}/host_id", f"duplicate host_id {host['host_id']!r}")
            )
        seen.add(host["host_id"])
        if host["reserved_mb"] > host["capacity_mb"]:
            issues.append(
                _issue(
                    doc, f"/spec/hosts/{i}/reserved_mb", "reserved_mb is greater than capacity_mb"
                )
            )
    return issues


SINGLETON_KINDS = ("ControllerPolicy", "WorkloadCatalog")


def check_documents(docs: list[Checked]) -> tuple[list[ConfigIssue], list[ConfigIssue]]:
    """All cross-document errors and warnings of one directory."""
    errors: list[ConfigIssue] = []
    warnings: list[ConfigIssue] = []
    first: dict[tuple[str, str], Checked] = {}
    singleton: dict[str, Checked] = {}
    for doc in docs:
        key = (doc.kind, doc.name)
        if key in first:
            prior = first[key].source
            errors.append(
                _issue(
                    doc,
                    "/metadata/name",
                    f"duplicate {doc.kind} {doc.name!r} (first defined at "
                    f"{prior.file}:{first[key].source.position('/metadata/name')[0]})",
                )
            )
        else:
            first[key] = doc
        if doc.kind in SINGLETON_KINDS:
            if doc.kind in singleton:
                prior = singleton[doc.kind].source
                errors.append(
                    _issue(
                        doc,
                        "",
                        f"at most one {doc.kind} is allowed (another is at "
                        f"{prior.file}:{prior.line})",
                    )
                )
            else:
                singleton[doc.kind] = doc
        checker = {
            "ModelProfile": check_profile,
            "WorkloadCatalog": check_catalog,
            "Fleet": check_fleet,
        }.get(doc.kind)
        if checker:
            errors.extend(checker(doc))

    profiles = {d.name for d in docs if d.kind == "ModelProfile"}
    hosts = {h["host_id"] for d in docs if d.kind == "Fleet" for h in d.data["spec"]["hosts"]}
    catalog = singleton.get("WorkloadCatalog")
    workloads = {w["name"] for w in catalog.data["spec"]["workloads"]} if catalog else None
    for doc in docs:
        if doc.kind != "ModelProfile":
            continue
        spec = doc.data["spec"]
        for i, other in enumerate(spec["colocation_excludes"]):
            if other not in profiles:
                warnings.append(
                    _warning(
                        doc,
                        f"/spec/colocation_excludes/{i}",
                        f"colocation exclude names unknown model {other!r}",
                    )
                )
        if hosts:
            for i, pin in enumerate(spec["pins"]):
                if pin not in hosts:
                    warnings.append(
                        _warning(
                            doc,
                            f"/spec/pins/{i}",
                            f"pin names host {pin!r}, unknown to the fleets here",
                        )
                    )
        if workloads is not None:
            for workload in spec["workload_scores"]:
                if workload not in workloads:
                    warnings.append(
                        _warning(
                            doc,
                            f"/spec/workload_scores/{workload}",
                            f"workload {workload!r} is not in the catalog",
                        )
                    )
        for runtime in spec["runtime_memory_mb"]:
            if runtime not in spec["runtimes"]:
                warnings.append(
                    _warning(
                        doc,
                        f"/spec/runtime_memory_mb/{runtime}",
                        f"runtime {runtime!r} is not in runtimes",
                    )
                )
    return errors, warnings
