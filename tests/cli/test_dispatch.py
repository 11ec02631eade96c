"""A command line naming one command builds only that command's parser, and that parser
is exactly the one the whole command line has for it."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from gridctl.cli.main import COMMAND_OWNERS, build_parser


def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_every_registered_command_is_owned_by_the_module_that_registers_it() -> None:
    assert sorted(commands(build_parser())) == sorted(COMMAND_OWNERS)
    for name, module in COMMAND_OWNERS.items():
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        importlib.import_module(module).register(sub)
        assert name in sub.choices, f"{module} does not register {name!r}"


@pytest.mark.parametrize("name", sorted(COMMAND_OWNERS))
def test_one_commands_parser_is_the_whole_parsers(name: str) -> None:
    whole = commands(build_parser())[name]
    alone = build_parser(name)
    assert sorted(commands(alone)) == sorted(
        n for n, owner in COMMAND_OWNERS.items() if owner == COMMAND_OWNERS[name]
    )
    assert commands(alone)[name].format_help() == whole.format_help()


def test_a_node_process_does_not_import_the_controller_or_the_lab() -> None:
    probe = (
        "import sys\n"
        "from gridctl.cli.main import build_parser\n"
        "build_parser('node')\n"
        "print(sorted(m for m in sys.modules if m.startswith(('gridctl.controller.serving',"
        " 'gridctl.lab'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]"


def test_no_command_and_an_unknown_one_still_list_every_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from gridctl.cli.main import main

    assert main([]) == 2
    listed = capsys.readouterr().out
    assert all(name in listed for name in COMMAND_OWNERS)
    with pytest.raises(SystemExit):
        main(["no-such-command"])
    refused = capsys.readouterr().err
    assert "invalid choice" in refused and "controller" in refused and "node" in refused
