"""The lab's collector scopes leave Python's cycle collector as they found it."""

from __future__ import annotations

import gc

from gridctl.lab.collector import collector_paused


def test_pausing_restores_an_enabled_collector_and_keeps_a_disabled_one_off() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_an_error_inside_still_restores_the_collector() -> None:
    try:
        with collector_paused():
            raise RuntimeError("the run failed")
    except RuntimeError:
        pass
    assert gc.isenabled()
