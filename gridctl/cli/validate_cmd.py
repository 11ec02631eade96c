"""``gridctl validate``: schema and semantic checks of a desired-state directory."""

from __future__ import annotations

import argparse
import json
import sys

from gridctl.config import check_directory

DEFAULT_DIRECTORY = "policies"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "validate",
        help="check a desired-state directory against the schemas (exit 1 on error)",
        description=(
            "Load every *.yaml/*.yml document under DIR, validate each against the JSON Schema "
            "of its kind, then check rules across documents (unique names, replica bounds, "
            "artifact sources, one ControllerPolicy). Errors are printed as "
            "FILE:LINE:COL: Kind/name: /json/pointer: message. Loading is all-or-nothing."
        ),
    )
    parser.add_argument(
        "directory",
        nargs="?",
        default=DEFAULT_DIRECTORY,
        metavar="DIR",
        help=f"directory or single YAML file (default: {DEFAULT_DIRECTORY})",
    )
    parser.add_argument(
        "--json", action="store_true", help="print a machine-readable report instead of lines"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    report = check_directory(args.directory)
    if args.json:
        print(json.dumps(report.as_json(), indent=2))
        return 0 if report.valid else 1
    for issue in report.errors:
        print(issue.render(), file=sys.stderr)
    for warning in report.warnings:
        print(f"warning: {warning.render()}", file=sys.stderr)
    if report.valid:
        dirty = " (uncommitted changes)" if report.dirty else ""
        print(
            f"{report.path}: valid, {report.documents} documents, revision {report.revision}{dirty}"
        )
        return 0
    if report.documents:  # a path that holds no document was already named above
        print(
            f"{report.path}: invalid, {len(report.errors)} error(s) in {report.documents} "
            "documents",
            file=sys.stderr,
        )
    return 1
