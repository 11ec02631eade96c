"""What hosts and operators named reaches the terminal escaped: an escape sequence in a
node's message, a transfer source or a router key's name is printed, never acted on."""

from __future__ import annotations

import argparse
import sqlite3
from pathlib import Path

import pytest

from gridctl.cli.token_cmd import run_router_ls
from gridctl.cli.up_cmd import Follower
from gridctl.membership import DATABASE, Membership
from gridctl.printable import lines, one_line

CLEAR_SCREEN = "\x1b[2J"


def test_one_line_escapes_controls_and_lone_surrogates_and_keeps_text() -> None:
    assert one_line(f"a{CLEAR_SCREEN}b\n\x07\x9b") == "a\\x1b[2Jb\\x0a\\x07\\x9b"
    assert one_line("bad \ud800 half") == "bad \\ud800 half"
    assert one_line("gemma-3 · ready ✓") == "gemma-3 · ready ✓"
    assert lines("two\nlines\t\x1b") == "two\nlines\t\\x1b"


def test_up_prints_node_messages_and_sources_escaped() -> None:
    doc = {
        "hosts": [
            {
                "host_id": "local-1",
                "residencies": [{"model_id": "gemma", "state": "ready"}],
                "transfers": [
                    {
                        "model_id": "gemma",
                        "artifact_sha256": "a" * 64,
                        "bytes_done": 5,
                        "bytes_total": 10,
                        "source": f"https://x{CLEAR_SCREEN}",
                    }
                ],
            }
        ],
        "history": [
            {
                "at": 1.0,
                "event": "load_failed",
                "model_id": "gemma",
                "host_id": "local-1",
                "message": f"engine said {CLEAR_SCREEN}\x1b]0;owned\x07",
            }
        ],
    }
    printed = Follower().follow(doc)
    assert printed and all("\x1b" not in line and "\x07" not in line for line in printed)
    assert any("engine said \\x1b[2J" in line for line in printed)
    assert any("https://x\\x1b[2J" in line for line in printed)


def test_router_ls_prints_a_stored_name_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    Membership(tmp_path).close()
    with sqlite3.connect(tmp_path / DATABASE) as db:  # a name stored before names were checked
        db.execute(
            "INSERT INTO router_keys(id, name, digest, created_at) VALUES (?, ?, ?, ?)",
            ("rk-1", f"team{CLEAR_SCREEN}", "d", 1.0),
        )
    assert run_router_ls(argparse.Namespace(state=tmp_path, json=False)) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "team\\x1b[2J" in out
