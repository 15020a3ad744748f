"""Kernel updates on rpm hosts (issue 16): the probe's `rpm` lines, the -devel package the
plan names, and the next boot from grubby.

The host: the real capture's outputs with the OS replaced by Rocky 9.4 / Amazon Linux 2023
(tests/unit/test_plan_os.py's p5()). Kernel releases: Rocky 9's 5.14.0-284.11.1.el9_2 and
5.14.0-284.30.1.el9_2 (their /boot/loader/entries listing in stackhpc/stackhpc-kayobe-config
PR #878); AL2023's 6.1.112-122.189.amzn2023 (a benchmark's system table, Amazon Linux
2023.6.20241010) and 6.12.80-106.156.amzn2023 (an EKS node's report), both public
transcripts; amazon-eks-ami's AL2023 driver script picks kernel6.12-devel for 6.12.*.
"""

from __future__ import annotations

from test_plan_os import AL2023, ROCKY_94, p5

from orchestrator.catalog import default_catalog
from orchestrator.facts import HostFacts
from orchestrator.kernels import kernel_notes
from orchestrator.parsers import parse_host
from orchestrator.parsers.kernels import parse_kernels
from orchestrator.plan import HostPlan, plan_host
from orchestrator.policy import load_policy

OLD = "5.14.0-284.11.1.el9_2.x86_64"
NEW = "5.14.0-284.30.1.el9_2.x86_64"


def rocky(kernels: str, os_release: str = ROCKY_94) -> HostFacts:
    raw = p5(os_release)
    raw["uname-r.txt"] = f"{OLD}\n# exit=0\n"
    raw["kernels.txt"] = kernels + "# exit=0\n"
    return parse_host("node", raw)


def plan(facts: HostFacts, **policy: object) -> HostPlan:
    return plan_host(facts, load_policy("node", policy), default_catalog())


# The pending kernel came in a dnf transaction without its kernel-devel (the hazard: dkms's
# kernel-install hook, dell/dkms redhat_kernel_install.d, runs when the kernel is installed).
PENDING_NO_DEVEL = (
    f"running {OLD}\n"
    f"kernel {OLD} vmlinuz=yes headers=yes\n"
    f"module {OLD} /lib/modules/{OLD}/extra/nvidia.ko.xz version=580.105.08 signer=-\n"
    f"dkms nvidia 580.105.08 {OLD} x86_64\n"
    f"kernel {NEW} vmlinuz=yes headers=no\n"
    f"grubby /boot/vmlinuz-{NEW}\n"
    f"rpm kernel {OLD}\nrpm kernel {NEW}\n"
    f"rpm kernel-core {OLD}\nrpm kernel-core {NEW}\nrpm kernel-devel {OLD}\n"
)


def test_rpm_lines_are_kept_with_their_release() -> None:
    ks = parse_kernels(PENDING_NO_DEVEL + "# exit=0\n")
    assert ("kernel-devel", OLD) in ks.rpm and ("kernel-core", NEW) in ks.rpm
    assert (ks.default, ks.default_from) == (NEW, "grubby")
    assert ks.devel_package(NEW) == f"kernel-devel-{NEW}"
    assert ks.devel_package("6.12.80-106.156.amzn2023.x86_64") == (
        "kernel-devel-6.12.80-106.156.amzn2023.x86_64"
    )  # no rpm line for that release: the plain kernel's name
    al = parse_kernels(
        "running 6.12.80-106.156.amzn2023.x86_64\n"
        "rpm kernel6.12 6.12.80-106.156.amzn2023.x86_64\n# exit=0\n"
    )
    assert al.devel_package("6.12.80-106.156.amzn2023.x86_64") == (
        "kernel6.12-devel-6.12.80-106.156.amzn2023.x86_64"
    )


def test_kept_driver_warns_for_the_grubby_default() -> None:
    """The driver the host keeps (no change): the next boot, grubby's default, has none."""
    notes = kernel_notes(rocky(PENDING_NO_DEVEL), target="580.105.08", change=False, prebuilt=False)
    assert notes.warnings[0].startswith(
        f"next boot: kernel {NEW} (grubby; running {OLD}) has no NVIDIA module for driver "
        "580.105.08: the host would come back without its GPUs"
    ), notes.warnings
    assert not notes.blockers


def test_driver_change_names_kernel_devel_not_linux_headers() -> None:
    p = plan(rocky(PENDING_NO_DEVEL), nvidia_driver_version="580.159.04")
    assert p.roles[0].change
    (blocker,) = [b for b in p.blockers if "next boot" in b]
    assert f"kernel {NEW} (grubby) has no headers" in blocker
    assert f"fix: install kernel-devel-{NEW} (or remove that kernel)" in blocker
    assert "linux-headers" not in blocker


def test_amazon_linux_612_names_its_own_devel_package() -> None:
    old, new = "6.1.112-122.189.amzn2023.x86_64", "6.12.80-106.156.amzn2023.x86_64"
    text = (
        f"running {old}\nkernel {old} vmlinuz=yes headers=yes\n"
        f"kernel {new} vmlinuz=yes headers=no\ngrubby /boot/vmlinuz-{new}\n"
        f"rpm kernel {old}\nrpm kernel-devel {old}\nrpm kernel6.12 {new}\n"
    )
    p = plan(rocky(text, AL2023), nvidia_driver_version="580.159.04")
    (blocker,) = [b for b in p.blockers if "next boot" in b]
    assert f"fix: install kernel6.12-devel-{new}" in blocker


def test_a_covered_rpm_host_plans_clean() -> None:
    text = PENDING_NO_DEVEL.replace(f"kernel {NEW} vmlinuz=yes headers=no", (
        f"kernel {NEW} vmlinuz=yes headers=yes\n"
        f"module {NEW} /lib/modules/{NEW}/extra/nvidia.ko.xz version=580.105.08 signer=-"
    )) + f"rpm kernel-devel {NEW}\n"  # fmt: skip
    p = plan(rocky(text), nvidia_driver_version="580.105.08")
    assert not [n for n in (*p.warnings, *p.blockers) if "kernel" in n.lower()], p.warnings
