"""Desired state from YAML: parse, validate against ``schemas/``, resolve to domain objects."""

from gridctl.config.loading import LoadReport, check_directory, load_directory
from gridctl.config.schemas import KIND_SCHEMAS, fill_defaults, load_schema, validator

__all__ = [
    "KIND_SCHEMAS",
    "LoadReport",
    "check_directory",
    "fill_defaults",
    "load_directory",
    "load_schema",
    "validator",
]
