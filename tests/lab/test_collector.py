"""The lab's collector scopes leave Python's cycle collector as they found it."""

from __future__ import annotations

import gc

from gridctl.lab.collector import collector_paused, existing_objects_frozen


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


def test_freezing_is_undone_on_exit_even_after_an_error() -> None:
    assert gc.get_freeze_count() == 0
    try:
        with existing_objects_frozen():
            assert gc.get_freeze_count() > 0
            raise RuntimeError("the run failed")
    except RuntimeError:
        pass
    assert gc.get_freeze_count() == 0


def test_a_callers_own_freeze_is_left_alone() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with existing_objects_frozen():
            assert gc.get_freeze_count() == frozen
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
