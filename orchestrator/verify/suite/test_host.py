"""Host-level facts: GPU count and the kernel log."""

from __future__ import annotations

import re
from typing import Any

import pytest

from orchestrator.verify.expect import Expectation
from orchestrator.verify.suite import hoststate

XID = re.compile(r"NVRM: Xid \(([^)]*)\): (\d+)")


def test_gpu_count_matches_detection(host: Any, expect: Expectation) -> None:
    on_bus = hoststate.sysfs_gpu_count(host)
    expected = expect.gpu_count if expect.gpu_count is not None else on_bus
    assert on_bus == expected, f"{on_bus} NVIDIA GPUs on the PCI bus, the plan detected {expected}"
    if not expect.has_role("nvidia_driver"):
        pytest.skip("no driver in this host's plan: nvidia-smi is not expected")
    seen = hoststate.smi_gpu_count(host)
    assert seen is not None, "nvidia-smi -L fails"
    assert seen == expected, (
        f"nvidia-smi sees {seen} GPUs, {expected} are on the PCI bus: a GPU fell off the bus "
        "or the driver failed to initialise one (see the kernel log)"
    )


def test_no_xid_since_boot(host: Any, expect: Expectation) -> None:
    result = host.run("dmesg 2>/dev/null || journalctl -k -b --no-pager -q")
    if result.rc != 0:
        pytest.skip("the kernel log cannot be read here (dmesg and journalctl both failed)")
    xids = [m.group(0) for m in XID.finditer(result.stdout)]
    assert not xids, f"Xid errors in the kernel log since boot: {xids[:5]}"
