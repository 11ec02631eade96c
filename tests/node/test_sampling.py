"""The machine sample counts a split's stage servers as managed memory, not external."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gridctl.node.reports import HostFacts, external_use_mb
from gridctl.node.sampling import processes_rss_mb, sample_resources

# a child that holds about 64 MB resident, then waits for its stdin to close
HOLDER = (
    "import sys; block = bytearray(64 * 1024 * 1024); print('ready', flush=True); sys.stdin.read()"
)


def test_other_processes_are_managed_memory(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        held = processes_rss_mb([child.pid])
        assert held >= 64
        without = sample_resources(tmp_path, [])
        with_it = sample_resources(tmp_path, [], [child.pid])
        assert with_it.managed_rss_mb >= without.managed_rss_mb + 64
        # what the stage servers hold is subtracted from the machine's use, like an engine's
        facts = HostFacts(host_id="h", capacity_mb=with_it.total_mb)
        used = with_it.total_mb - with_it.available_mb
        assert external_use_mb(facts, with_it) == max(0, used - with_it.managed_rss_mb)
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)
    assert processes_rss_mb([child.pid]) == 0  # gone: counted as nothing
