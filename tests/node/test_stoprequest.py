"""A stop request set from a signal handler is seen, wherever the handler lands.

A signal handler runs in the main thread between two bytecodes of whatever that thread
is doing, including the stop loop's own wait. The trace function below sets the request
at one line event of a ``wait`` after another, so every place a handler could interrupt
is tried; each wait must return at once with the stop seen.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from types import FrameType
from typing import Any

from gridctl.node.stoprequest import StopRequest


def _line_events_of_one_wait() -> int:
    events = [0]

    def tracer(frame: FrameType, event: str, _arg: Any) -> Any:
        if event == "line":
            events[0] += 1
        return tracer

    stop = StopRequest(poll_seconds=0.001)
    sys.settrace(tracer)
    try:
        stop.wait(0.003)
    finally:
        sys.settrace(None)
    return events[0]


def _setting_at(stop: StopRequest, target: int) -> Any:
    """A trace function that sets ``stop`` at the ``target``-th line event, as a signal
    handler landing there would (the daemon's handler does just this)."""
    seen = [0]

    def tracer(frame: FrameType, event: str, _arg: Any) -> Any:
        if event == "line":
            seen[0] += 1
            if seen[0] == target:
                stop.set(signal.SIGTERM)
        return tracer

    return tracer


def test_a_stop_set_at_any_point_of_a_wait_ends_it_promptly() -> None:
    total = _line_events_of_one_wait()
    assert total > 5  # the wait really ran its loop under the tracer
    for target in range(1, total + 1):
        stop = StopRequest(poll_seconds=0.001)
        results: list[bool] = []

        def traced_wait(
            stop: StopRequest = stop, target: int = target, results: list[bool] = results
        ) -> None:
            sys.settrace(_setting_at(stop, target))
            try:
                results.append(stop.wait(30.0))
            finally:
                sys.settrace(None)

        # in a thread of its own, so a stop that deadlocks fails the test instead of
        # hanging it (a ``threading.Event`` does, at the fourth line event)
        waiter = threading.Thread(target=traced_wait, daemon=True)
        waiter.start()
        waiter.join(10.0)
        assert not waiter.is_alive(), f"deadlocked when set at line event {target}"
        assert results == [True], target
        assert stop.signum == signal.SIGTERM


def test_a_wait_without_a_stop_times_out_false() -> None:
    stop = StopRequest(poll_seconds=0.001)
    started = time.monotonic()
    assert stop.wait(0.02) is False
    assert time.monotonic() - started >= 0.02
    assert stop.is_set() is False and stop.signum is None


CHILD = textwrap.dedent(
    """
    import signal, sys
    from gridctl.node.stoprequest import StopRequest

    stop = StopRequest(poll_seconds=0.0002)
    count = [0]

    def on_signal(signum, _frame):
        count[0] += 1
        if count[0] >= int(sys.argv[1]):
            stop.set(signum)

    signal.signal(signal.SIGUSR1, on_signal)
    print("ready", flush=True)
    while not stop.wait(0.0005):
        pass
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # the sender stops only once we exit
    print("stopped", stop.signum, flush=True)
    """
)


def test_a_process_hammered_with_signals_in_its_wait_loop_still_stops() -> None:
    """Hundreds of signals land inside a tight wait loop; the last one stops it."""
    wanted = 400
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(wanted)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 60
        sent = 0
        while child.poll() is None and time.monotonic() < deadline:
            os.kill(child.pid, signal.SIGUSR1)
            sent += 1
            time.sleep(0.0005)
        out, _ = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0
    assert out.strip() == f"stopped {int(signal.SIGUSR1)}"
    assert sent >= wanted
