"""A local I/O error during a load names its cause in the receipt (the real-process drill
is tests/faults/test_artifact_faults.py::test_disk_full_on_the_artifact_directory)."""

from __future__ import annotations

import errno

from gridctl.errors import PermanentError
from gridctl.node.actuator import _load_failure_reason


def test_a_full_disk_is_insufficient_disk_and_other_io_is_local_io() -> None:
    assert _load_failure_reason(OSError(errno.ENOSPC, "No space left on device")) == (
        "insufficient_disk"
    )
    assert _load_failure_reason(OSError(errno.EDQUOT, "Disk quota exceeded")) == (
        "insufficient_disk"
    )
    assert _load_failure_reason(OSError(errno.EIO, "I/O error")) == "local_io"
    refused = PermanentError("checksum mismatch")
    refused.reason = "checksum_mismatch"  # type: ignore[attr-defined]
    assert _load_failure_reason(refused) == "checksum_mismatch"
    assert _load_failure_reason(PermanentError("x")) == "load_failed"
