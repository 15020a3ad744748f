"""MIG state: mode and GPU/compute instances as the planned layout asks, and CDI names them.

The layout is resolved against the GPUs' own `nvidia-smi mig -lgip/-lgipp` and compared with
`-lgi/-lci` by the MIG role's code (orchestrator.mig_apply), so the suite and the role agree
on what "converged" means.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from orchestrator.errors import GpuprovError
from orchestrator.mig import GpuLayout
from orchestrator.mig_apply import (
    GpuState,
    Options,
    desired_layouts,
    instances_converged,
    mode_converged,
    read_state,
)
from orchestrator.verify.expect import Expectation
from orchestrator.verify.suite import hoststate

FIX = "rerun `provision apply` (role mig), or on the host `gpuprov-mig apply`"


@dataclass(frozen=True)
class MigView:
    layout: str
    want: tuple[GpuLayout, ...]
    have: Mapping[int, GpuState]


@pytest.fixture
def planned_mig(expect: Expectation) -> Expectation:
    if expect.mig_layout is None:
        pytest.skip("MIG is not in this host's plan (mig_layout unset): MIG is left as it is")
    return expect


def _config(expect: Expectation) -> dict[str, object]:
    assert expect.mig is not None  # planned_mig skipped otherwise
    return expect.mig.document()


def _view(host: Any, expect: Expectation) -> MigView:
    layout = str(expect.mig_layout)
    run = hoststate.command_runner(host)
    try:
        have = read_state(run, expect.host)
        want = desired_layouts(run, expect.host, Options(layout, _config(expect)), have)
    except GpuprovError as exc:
        pytest.fail(f"cannot check MIG layout {layout!r}: {exc}", pytrace=False)
    return MigView(layout, want, have)


def _mode(value: bool | None) -> str:
    return "Enabled" if value else "N/A" if value is None else "Disabled"


def _counts(names: list[str]) -> str:
    if not names:
        return "none"
    return ", ".join(f"{n} x{names.count(n)}" for n in sorted(set(names)))


def test_mig_mode_as_planned(host: Any, planned_mig: Expectation) -> None:
    view = _view(host, planned_mig)
    wrong = []
    for want in view.want:
        have = view.have.get(want.index)
        if have is None:
            wrong.append(f"GPU {want.index} is in the layout but nvidia-smi does not list it")
        elif not mode_converged(want, have):
            wrong.append(
                f"GPU {want.index}: MIG mode {_mode(have.mig_current)} "
                f"(pending {_mode(have.mig_pending)}), layout wants {_mode(want.mig_enabled)}"
            )
    assert not wrong, (
        f"MIG mode differs from layout {view.layout!r}: {'; '.join(wrong)}. Fix: {FIX} "
        "(a pending mode change needs a GPU reset or a reboot)"
    )


def test_mig_instances_as_planned(host: Any, planned_mig: Expectation) -> None:
    view = _view(host, planned_mig)
    enabled = [w for w in view.want if w.mig_enabled]
    if not enabled:
        pytest.skip(f"layout {view.layout!r} enables MIG on no GPU: no instances to check")
    wrong = []
    for want in enabled:
        have = view.have.get(want.index)
        if have is None or instances_converged(want, have):
            continue  # a missing GPU is reported by test_mig_mode_as_planned
        gis = [i.name for i in have.instances]
        wanted = [i.profile for i in want.instances]
        if sorted(gis) != sorted(wanted):
            wrong.append(
                f"GPU {want.index}: GPU instances {_counts(gis)}, layout wants {_counts(wanted)}"
            )
            continue
        partial = [
            f"GI {gi.instance_id} ({gi.name}) has compute instances "
            f"{[c.name for c in have.compute if c.gpu_instance_id == gi.instance_id]}"
            for gi in have.instances
        ]
        wrong.append(
            f"GPU {want.index}: each GPU instance needs one compute instance spanning it; "
            + "; ".join(partial)
        )
    assert not wrong, f"MIG layout {view.layout!r} is not applied: {'; '.join(wrong)}. Fix: {FIX}"


def test_cdi_spec_lists_mig_devices(host: Any, planned_mig: Expectation) -> None:
    if not planned_mig.has_role("nvidia_container_toolkit"):
        pytest.skip("nvidia_container_toolkit is not in this host's plan: no CDI spec expected")
    view = _view(host, planned_mig)
    gpus = {w.index for w in view.want if w.mig_enabled}
    if not gpus:
        pytest.skip(f"layout {view.layout!r} enables MIG on no GPU: no MIG devices to list")
    listed = hoststate.smi_list(host)
    assert listed is not None, "nvidia-smi -L fails: cannot tell which MIG devices exist"
    devices = [f"{g.index}:{m.index}" for g in listed if g.index in gpus for m in g.mig_devices]
    assert devices, f"nvidia-smi -L lists no MIG device on GPUs {sorted(gpus)}. Fix: {FIX}"
    names, error = hoststate.cdi_device_names(host, planned_mig.cdi_spec)
    assert names is not None, error
    missing = [d for d in devices if d not in names]
    assert not missing, (
        f"CDI spec {planned_mig.cdi_spec} lacks MIG devices {missing} (written before the "
        "layout was applied): regenerate it with nvidia-ctk cdi generate "
        f"--output={planned_mig.cdi_spec}"
    )
