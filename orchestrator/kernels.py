"""Kernel updates: will the kernel a host boots next have an NVIDIA module? (issue 16)

A newer kernel installed by unattended-upgrades (or a user) boots without `nvidia.ko` unless
something built or installed the module for it; the host then comes back without its GPUs.
From the kernels detection found (`HostFacts.kernels`) and the driver the plan keeps or
installs, this says, per host:

- a warning when the next boot (GRUB's default, else the newest installed kernel) has no
  module for the driver it keeps, or when other installed kernels have none;
- a blocker when a driver change would leave the next boot without one for sure: the module
  is built by DKMS and that kernel's headers are not installed (DKMS cannot build it);
- with Secure Boot on and DKMS: a blocker when the certificate the distribution's DKMS signs
  with is present but not enrolled (`mokutil --test-key`), the kernel would refuse the module.

Key paths are dkms's own (Debian's dkms 3.0.10-8+deb12u1, /usr/sbin/dkms: on Ubuntu
/var/lib/shim-signed/mok/MOK.priv + MOK.der, update-secureboot-policy's key; elsewhere
/var/lib/dkms/mok.key + mok.pub; `mok_signing_key`/`mok_certificate` in
/etc/dkms/framework.conf override both).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .facts import HostFacts, InstalledKernel, KernelState

# The certificate dkms signs with when framework.conf sets none (see the module docstring).
DKMS_CERT_UBUNTU = "/var/lib/shim-signed/mok/MOK.der"
DKMS_CERT_DEFAULT = "/var/lib/dkms/mok.pub"


@dataclass
class KernelNotes:
    warnings: list[str] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)


def headers_package(facts: HostFacts, release: str) -> str:
    """The package DKMS needs to build for one kernel release: Debian and Ubuntu's
    linux-headers-<release>; on rpm hosts (RHEL family, Amazon Linux) the kernel's -devel
    package, kernel-devel-<release> or kernel6.12-devel-<release> (the role's vars/<OS>.yml
    use the same patterns)."""
    ks = facts.kernels
    rpm_host = facts.os is not None and (facts.os.family == "redhat" or facts.os.id == "amzn")
    if rpm_host or (ks is not None and ks.rpm):
        return ks.devel_package(release) if ks is not None else f"kernel-devel-{release}"
    return f"linux-headers-{release}"


def dkms_certificate(facts: HostFacts) -> str:
    """The certificate the host's DKMS signs modules with: framework.conf's when the probe
    found one (listed first), else dkms's default for the distribution."""
    ks = facts.kernels
    default = DKMS_CERT_UBUNTU if facts.os is not None and facts.os.id == "ubuntu" else ""
    default = default or DKMS_CERT_DEFAULT
    if ks is not None and ks.mok and ks.mok[0][0] not in (DKMS_CERT_UBUNTU, DKMS_CERT_DEFAULT):
        return ks.mok[0][0]
    return default


def _driver(version: str) -> str:
    return version if "." in version else f"R{version}"


def _next_boot(ks: KernelState) -> InstalledKernel | None:
    return ks.kernel(ks.default) if ks.default and ks.default != ks.running else None


def kernel_notes(
    facts: HostFacts, *, target: str, change: bool, prebuilt: bool, manage: bool = True
) -> KernelNotes:
    """`target`: the driver the plan ends with (an exact version, or a bare branch);
    `change`: the plan installs or replaces the driver; `prebuilt`: the source may have
    prebuilt modules (Canonical's), so DKMS is only the fallback."""
    notes = KernelNotes()
    ks = facts.kernels
    if ks is None:
        return notes
    driver = _driver(target)
    nxt = _next_boot(ks)
    if nxt is not None and not change and not nxt.has_module(target):
        notes.warnings.append(
            f"next boot: kernel {nxt.release} ({ks.default_from}; running {ks.running}) has "
            f"no NVIDIA module for driver {driver}: the host would come back without its "
            "GPUs; fix: run `provision apply` (the driver role builds or installs the module "
            "for every installed kernel before any reboot), or do not reboot until then"
        )
    others = sorted(k.release for k in ks.pending if k is not nxt and not k.has_module(target))
    if others and not change:
        notes.warnings.append(
            f"installed kernels without an NVIDIA module for driver {driver}: "
            f"{', '.join(others)}; `provision apply` covers them (booting one by hand loses "
            "the GPUs)"
        )
    if change and not prebuilt and manage:
        if nxt is not None and not nxt.headers:
            notes.blockers.append(
                f"the driver change would leave the next boot without GPUs: kernel "
                f"{nxt.release} ({ks.default_from}) has no headers, so DKMS cannot build "
                f"driver {driver} for it; fix: install {headers_package(facts, nxt.release)} (or "
                "remove that kernel), then run again"
            )
        no_headers = sorted(k.release for k in ks.pending if k is not nxt and not k.headers)
        if no_headers:
            notes.warnings.append(
                f"DKMS cannot build driver {driver} for installed kernels without headers: "
                f"{', '.join(no_headers)} (booting one loses the GPUs); fix: install "
                f"{', '.join(headers_package(facts, r) for r in no_headers)} or remove them"
            )
    if facts.secure_boot and not prebuilt and (change or nxt is not None):
        _secure_boot(facts, ks, notes)
    return notes


def _secure_boot(facts: HostFacts, ks: KernelState, notes: KernelNotes) -> None:
    cert = dkms_certificate(facts)
    state = dict(ks.mok).get(cert)
    if state == "not-enrolled":
        notes.blockers.append(
            f"Secure Boot is on and DKMS signs modules with {cert}, which is not enrolled "
            "(mokutil --test-key): every kernel would refuse the module; fix: `mokutil "
            f"--import {cert}`, confirm the enrolment in the MOK manager at the next boot "
            "(console), then run again"
        )
    elif state is None:
        notes.warnings.append(
            f"Secure Boot is on and DKMS signs modules with {cert}, which is not on the host "
            "yet: set nvidia_driver_dkms_signing_key/cert to an enrolled key pair (the role "
            "installs it there and checks the enrolment)"
        )
    elif state == "unknown":
        notes.warnings.append(
            f"Secure Boot is on: whether {cert} is enrolled is unknown (mokutil missing or "
            "unclear); the role checks it with mokutil --test-key before building"
        )
