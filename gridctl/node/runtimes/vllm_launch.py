"""The vLLM child's entry point: read the engine key from a file, then run vLLM's API server.

vLLM takes its API key from ``--api-key`` (argv, readable by every local user)
or from ``VLLM_API_KEY``. The node hands the key over the way it does to
``llama-server``: as ``--api-key-file FILE`` in argv, a file only this node's
children read. This script runs under the *vLLM* interpreter (its own
virtualenv, where gridctl is not installed), so it imports nothing from
gridctl: it reads the file, puts the key into its own environment and runs
``vllm.entrypoints.openai.api_server`` in this same process, whose argv (and so
its identity proof) stays what the node launched. ``--api-key-file`` in argv is
also what the node's orphan sweep and qualification's ownership step look for.

Usage: ``python vllm_launch.py --api-key-file FILE -- VLLM_ARGS...``
"""

from __future__ import annotations

import os
import runpy
import sys

SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def _leave_own_directory() -> None:
    """Python put this script's directory first on ``sys.path``; it holds gridctl's own
    ``vllm.py`` (the adapter), which would shadow the real ``vllm`` package."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]


def main(argv: list[str]) -> None:
    _leave_own_directory()
    if len(argv) < 3 or argv[0] != "--api-key-file" or argv[2] != "--":
        sys.exit("usage: vllm_launch.py --api-key-file FILE -- VLLM_ARGS...")
    with open(argv[1], encoding="utf-8") as key_file:
        key = key_file.read().strip()
    if not key:
        sys.exit(f"vllm_launch.py: the engine key file {argv[1]} is empty")
    os.environ["VLLM_API_KEY"] = key
    sys.argv = [SERVER_MODULE, *argv[3:]]
    runpy.run_module(SERVER_MODULE, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
