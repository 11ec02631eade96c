"""``gridctl node start --vllm-python PATH``: the vLLM interpreter named on the command
line, checked before the daemon starts and passed on by a detached start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gridctl.cli.main import build_parser
from gridctl.cli.node_cmd import _config, _start_flags
from gridctl.errors import GridctlError

ROOT = Path(__file__).resolve().parents[2]


def start_args(state: Path, *extra: str) -> list[str]:
    return [
        "node",
        "start",
        "--host-id",
        "h",
        "--controller",
        "http://127.0.0.1:1",
        "--token-file",
        str(state / "token"),
        "--state-dir",
        str(state),
        *extra,
    ]


def test_an_executable_interpreter_reaches_the_node_config(tmp_path: Path) -> None:
    args = build_parser("node").parse_args(start_args(tmp_path, "--vllm-python", sys.executable))
    config = _config(args)
    assert config.vllm_python == Path(sys.executable).absolute()
    flags = _start_flags(args)  # a detached start hands it to the daemon it spawns
    assert flags[flags.index("--vllm-python") + 1] == str(Path(sys.executable).absolute())


def test_without_the_flag_the_environment_decides(tmp_path: Path) -> None:
    args = build_parser("node").parse_args(start_args(tmp_path))
    assert _config(args).vllm_python is None
    assert "--vllm-python" not in _start_flags(args)


@pytest.mark.parametrize("kind", ["missing", "directory", "not-executable"])
def test_a_path_that_cannot_run_is_refused_naming_the_flag(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "python"
    if kind == "directory":
        target.mkdir()
    elif kind == "not-executable":
        target.write_text("#!/bin/sh\n")
        target.chmod(0o644)
    args = build_parser("node").parse_args(start_args(tmp_path, "--vllm-python", str(target)))
    with pytest.raises(GridctlError, match=r"--vllm-python .*: not an executable file"):
        _config(args)


def test_the_command_exits_1_with_the_reason_and_starts_nothing(tmp_path: Path) -> None:
    state = tmp_path / "state"
    done = subprocess.run(
        [sys.executable, "-m", "gridctl", *start_args(state, "--vllm-python", "/nonexistent/py")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done
    assert "--vllm-python /nonexistent/py: not an executable file" in done.stderr
    assert not (state / "node.pid").exists() and not list(state.glob("**/*.sqlite3"))
