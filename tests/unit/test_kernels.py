"""Kernel updates (issue 16): the probe's kernels.txt, the next boot, and what the plan says.

Fixtures: the derived hosts (tests/unit/fixtures_derived/, `derive.py` writes their
kernels.txt: an Ubuntu host whose newer kernel DKMS covered, a Debian host whose newer kernel
has no headers and no module), and hand-written probe lines for the boot-loader cases.
"""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

from orchestrator.catalog import default_catalog
from orchestrator.facts import HostFacts
from orchestrator.factsdir import load_dir
from orchestrator.parsers import names, parse_host
from orchestrator.parsers._text import ParseError
from orchestrator.parsers.kernels import parse_kernels, release_key
from orchestrator.plan import HostPlan, plan_host
from orchestrator.policy import load_policy

REPO = Path(__file__).resolve().parents[2]
DERIVED = REPO / "tests" / "unit" / "fixtures_derived"
DEBIAN = "l40sx4-debian12-535"  # 535.261.03 proprietary loaded, 6.1.0-42-amd64 pending
UBUNTU = "h100x8-nvswitch4-ubuntu2204-550"  # 550.127.05 open, 5.15.0-1073-aws covered
# Debian's packaged driver at the loaded release: the plan keeps it (no change)
KEEP: dict[str, object] = {
    "nvidia_driver_source": "distribution",
    "nvidia_driver_version": "535.261.03",
    "nvidia_driver_flavour": "proprietary",
}


def facts_of(host: str, **files: str) -> HostFacts:
    raw = dict(load_dir(DERIVED)[host])
    raw.update({k.replace("_", "-") + ".txt": v for k, v in files.items()})
    return parse_host(host, raw)


def plan(facts: HostFacts, **policy: object) -> HostPlan:
    return plan_host(facts, load_policy(facts.host, policy), default_catalog())


def kernel_lines(p: HostPlan) -> list[str]:
    return [n for n in (*p.warnings, *p.blockers) if "kernel" in n and "next boot" in n]


def test_release_order_is_sort_v() -> None:
    releases = ["6.1.0-9-amd64", "6.1.0-57-amd64", "6.1.0-50-amd64", "5.15.0-1073-aws"]
    out = subprocess.run(
        ["sort", "-V"], input="\n".join(releases), capture_output=True, text=True, check=True
    )
    assert sorted(releases, key=release_key) == out.stdout.split()


def test_debian_pending_kernel_without_module() -> None:
    ks = facts_of(DEBIAN).kernels
    assert ks is not None
    assert ks.running == "6.1.0-41-amd64"
    assert (ks.default, ks.default_from) == ("6.1.0-42-amd64", "grub.cfg")
    assert [k.release for k in ks.pending] == ["6.1.0-42-amd64"]
    running, pending = ks.kernel("6.1.0-41-amd64"), ks.kernel("6.1.0-42-amd64")
    assert running is not None and pending is not None
    assert running.has_module("535.261.03") and running.has_module("535")
    assert not running.has_module("535.309.01")
    assert not pending.has_module("") and not pending.headers


def test_plan_warns_when_the_next_boot_has_no_module() -> None:
    p = plan(facts_of(DEBIAN), **KEEP)
    assert not p.roles[0].change  # the loaded 535.261.03 is kept
    (warning,) = kernel_lines(p)
    assert warning.startswith(
        "next boot: kernel 6.1.0-42-amd64 (grub.cfg; running 6.1.0-41-amd64) has no NVIDIA "
        "module for driver 535.261.03: the host would come back without its GPUs"
    )
    assert "provision apply" in warning
    assert not p.blockers


def test_plan_blocks_a_driver_change_that_would_leave_it_so() -> None:
    p = plan(facts_of(DEBIAN), nvidia_driver_source="cuda", nvidia_driver_version="580.159.04")
    assert p.roles[0].change
    assert p.blocked
    (blocker,) = [b for b in p.blockers if "next boot" in b]
    assert "kernel 6.1.0-42-amd64 (grub.cfg) has no headers" in blocker
    assert "fix: install linux-headers-6.1.0-42-amd64" in blocker


def test_covered_kernels_plan_clean() -> None:
    f = facts_of(UBUNTU)
    assert f.kernels is not None and f.kernels.default == "5.15.0-1073-aws"
    p = plan(f)
    assert not [n for n in (*p.warnings, *p.blockers) if "kernel" in n.lower()]


def test_a_change_with_headers_everywhere_is_not_blocked() -> None:
    p = plan(facts_of(UBUNTU), nvidia_driver_version="580.159.04")
    assert p.roles[0].change
    assert not [b for b in p.blockers if "kernel" in b]


def test_module_removed_by_hand_is_seen_even_with_dkms_records() -> None:
    # dkms keeps its tree entry when the .ko under /lib/modules is deleted
    text = (
        "running 6.1.0-50-amd64\n"
        "kernel 6.1.0-50-amd64 vmlinuz=no headers=yes\n"
        "module 6.1.0-50-amd64 /lib/modules/6.1.0-50-amd64/updates/dkms/nvidia-current.ko "
        "version=535.261.03 signer=-\n"
        "kernel 6.1.0-57-amd64 vmlinuz=yes headers=yes\n"
        "dkms nvidia-current 535.261.03 6.1.0-50-amd64 x86_64\n"
        "dkms nvidia-current 535.261.03 6.1.0-57-amd64 x86_64\n# exit=0\n"
    )
    ks = parse_kernels(text)
    assert (ks.default, ks.default_from) == ("6.1.0-57-amd64", "newest installed")
    pending = ks.kernel("6.1.0-57-amd64")
    assert pending is not None and pending.dkms and not pending.has_module("535.261.03")
    f = dataclasses.replace(facts_of(DEBIAN), kernels=ks)
    (warning,) = kernel_lines(plan(f, **KEEP))
    assert "kernel 6.1.0-57-amd64 (newest installed; running 6.1.0-50-amd64)" in warning


@pytest.mark.parametrize(
    ("lines", "default", "source"),
    [
        # grubby names the default kernel on the RHEL family
        ("grubby /boot/vmlinuz-6.1.0-50-amd64\n", "6.1.0-50-amd64", "grubby"),
        # a saved entry (GRUB_DEFAULT=saved) names an older kernel: that one boots
        (
            "grubenv saved_entry=gnulinux-advanced-1234>gnulinux-6.1.0-50-amd64-advanced-1234\n"
            "grub default=saved\ngrub linux /boot/vmlinuz-6.1.0-57-amd64\n",
            "6.1.0-50-amd64",
            "grubenv",
        ),
        # a saved entry is ignored when the configuration does not boot the saved entry
        (
            "grubenv saved_entry=gnulinux-6.1.0-50-amd64-advanced-1234\ngrub default=0\n"
            "grub linux /boot/vmlinuz-6.1.0-57-amd64\n",
            "6.1.0-57-amd64",
            "grub.cfg",
        ),
        ("", "6.1.0-57-amd64", "newest installed"),
    ],
)
def test_next_boot(lines: str, default: str, source: str) -> None:
    text = (
        "running 6.1.0-50-amd64\nkernel 6.1.0-50-amd64 vmlinuz=yes headers=yes\n"
        "kernel 6.1.0-57-amd64 vmlinuz=yes headers=yes\n" + lines + "# exit=0\n"
    )
    ks = parse_kernels(text)
    assert (ks.default, ks.default_from) == (default, source)


def test_signer_with_spaces_and_mok_state() -> None:
    ks = parse_kernels(
        "running 6.8.0-1012-aws\nkernel 6.8.0-1012-aws vmlinuz=yes headers=yes\n"
        "module 6.8.0-1012-aws /lib/modules/6.8.0-1012-aws/updates/dkms/nvidia.ko.zst "
        "version=580.159.04 signer=gpuprov-dkms Secure Boot Module Signature key\n"
        "mok /var/lib/shim-signed/mok/MOK.der not-enrolled\n# exit=0\n"
    )
    (k,) = ks.installed
    assert k.modules[0].signer == "gpuprov-dkms Secure Boot Module Signature key"
    assert ks.mok == (("/var/lib/shim-signed/mok/MOK.der", "not-enrolled"),)


def test_secure_boot_with_an_unenrolled_dkms_key_blocks() -> None:
    text = facts_of(DEBIAN).kernels
    assert text is not None
    base = dataclasses.replace(facts_of(DEBIAN), secure_boot=True)
    for state, blocked in (("not-enrolled", True), ("enrolled", False)):
        ks = dataclasses.replace(text, mok=(("/var/lib/dkms/mok.pub", state),))
        p = plan(dataclasses.replace(base, kernels=ks), **KEEP)
        sb = [b for b in p.blockers if "mokutil" in b]
        assert bool(sb) == blocked, state
    assert "fix: `mokutil --import /var/lib/dkms/mok.pub`" in sb[0] if sb else True


def test_ubuntu_dkms_signs_with_the_shim_key() -> None:
    f = dataclasses.replace(facts_of(UBUNTU), secure_boot=True)
    assert f.kernels is not None
    ks = dataclasses.replace(f.kernels, mok=(("/var/lib/shim-signed/mok/MOK.der", "not-enrolled"),))
    p = plan(dataclasses.replace(f, kernels=ks), nvidia_driver_version="580.159.04")
    assert any("signs modules with /var/lib/shim-signed/mok/MOK.der" in b for b in p.blockers)


def test_a_broken_capture_is_a_detection_error_not_a_crash() -> None:
    f = facts_of(DEBIAN, kernels="running 6.1.0-41-amd64\nkernel 6.1.0-42-amd64 oops\n# exit=0\n")
    assert f.kernels is None
    assert any(e.startswith(names.KERNELS) for e in f.errors)
    with pytest.raises(ParseError):
        parse_kernels("kernel 6.1.0-42-amd64 vmlinuz=yes headers=yes\n# exit=0\n")


def test_the_probe_section_runs_under_posix_sh(tmp_path: Path) -> None:
    """The probe's kernels() on this machine, cut from the probe as the verify suite cuts it
    (the capture line became `bg cap kernels.txt kernels`; a cut before `cap` left `bg` and
    failed on the real H200): it parses, whatever is installed here."""
    from orchestrator.verify.suite.test_kernels import _kernels_section

    out = subprocess.run(
        ["sh", "-c", _kernels_section()], capture_output=True, text=True, check=True
    )
    ks = parse_kernels(out.stdout + "# exit=0\n")
    uname = subprocess.run(["uname", "-r"], capture_output=True, text=True, check=True)
    assert ks.running == uname.stdout.strip()
