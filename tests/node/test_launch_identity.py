"""A child's identity is observed only once its exec has settled.

Right after ``Popen`` returns, ``/proc/PID/cmdline`` of a live child can read
empty for a moment; recording that would make the node refuse its own healthy
child as "exited at launch" (seen with ``llama-server`` about half the time
when nothing slowed the node down between launch and observation).
"""

from __future__ import annotations

import subprocess
import sys

from gridctl.node.processes import observe_launched_identity


def test_every_fresh_child_is_observed_with_the_argv_it_was_launched_with() -> None:
    argv = (sys.executable, "-c", "import time; time.sleep(30)")
    for _ in range(25):
        child = subprocess.Popen(argv, start_new_session=True)
        try:
            identity = observe_launched_identity(child.pid)
            assert identity is not None and identity.cmdline == argv
            assert identity.pid == child.pid
        finally:
            child.kill()
            child.wait(10)


def test_a_child_that_is_gone_has_no_identity() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(10)
    assert observe_launched_identity(child.pid, settle_seconds=0.2) is None
