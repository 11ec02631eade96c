"""Whatever text or documents arrive, the loader returns a state or raises ConfigError."""

from __future__ import annotations

import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gridctl.config import load_directory
from gridctl.domain import DesiredState
from gridctl.errors import ConfigError

KINDS = st.sampled_from(["ModelProfile", "ControllerPolicy", "WorkloadCatalog", "Fleet", "Bogus"])
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
FIELD_NAMES = st.sampled_from(
    [
        "memory_mb",
        "min_replicas",
        "max_replicas",
        "pins",
        "artifact",
        "sha256",
        "source",
        "size_mb",
        "workload_scores",
        "mode",
        "hosts",
        "host_id",
        "capacity_mb",
        "workloads",
        "name",
        "runtimes",
        "priority",
        "colocation_excludes",
        "extra",
    ]
)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(FIELD_NAMES, st.text(max_size=6)), children, max_size=5),
    ),
    max_leaves=20,
)
DOCUMENTS = st.fixed_dictionaries(
    {
        "apiVersion": st.sampled_from(["gridctl/v1", "gridctl/v2", 1]),
        "kind": KINDS,
        "metadata": st.one_of(
            st.fixed_dictionaries({"name": st.sampled_from(["a", "b", "", "x y", "m-1"])}), VALUES
        ),
        "spec": st.one_of(st.dictionaries(FIELD_NAMES, VALUES, max_size=8), VALUES),
    }
)

YAML_ALPHABET = st.sampled_from([*list(":-[]{}&*!|>'\"%@`#,? \n\tabc019.~="), "<<", "---", "..."])


def load_text(files: dict[str, str]) -> DesiredState | None:
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in files.items():
            (Path(tmp) / name).write_text(text, encoding="utf-8")
        try:
            return load_directory(tmp)
        except ConfigError as exc:
            assert exc.issues, "ConfigError without issues"
            return None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(YAML_ALPHABET, max_size=60).map("".join))
def test_random_yaml_text_only_raises_config_error(text: str) -> None:
    load_text({"random.yaml": text})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=200))
def test_random_unicode_text_only_raises_config_error(text: str) -> None:
    load_text({"random.yaml": text})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(DOCUMENTS, min_size=1, max_size=4))
def test_random_documents_only_raise_config_error(documents: list[dict]) -> None:
    text = yaml.safe_dump_all(documents, allow_unicode=True)
    state = load_text({"docs.yaml": text})
    if state is not None:
        assert state.documents == len(documents)


def test_hostile_yaml_constructs() -> None:
    hostile = {
        "alias.yaml": "a: &x [*x]\n",
        "laughs.yaml": "a: &a [1,1,1,1,1,1,1,1,1]\n"
        + "".join(
            f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n"
            for p, c in zip("abcdefgh", "bcdefghi", strict=True)
        ),
        "tag.yaml": "!!python/object:os.system {}\n",
        "deep.yaml": "[" * 5000 + "]" * 5000,
        "nan.yaml": "apiVersion: gridctl/v1\nkind: ModelProfile\nmetadata: {name: a}\n"
        "spec: {memory_mb: .nan}\n",
        "keys.yaml": "? [a, b]\n: 1\n",
    }
    for name, text in hostile.items():
        assert load_text({name: text}) is None, name
