"""Read-only helpers that ask a testinfra host about its state (one command each)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from orchestrator.verify.expect import upstream_version


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    held: bool

    @property
    def upstream(self) -> str:
        return upstream_version(self.version)


def packages(host: Any, patterns: tuple[str, ...]) -> dict[str, Package]:
    """Installed packages matching shell globs, with their version and hold state."""
    if host.exists("dpkg-query"):
        out = host.run(
            "dpkg-query -W -f '${Package}\\t${Version}\\t${db:Status-Abbrev}\\t${Status}\\n' "
            + " ".join(f"'{p}'" for p in patterns)
        ).stdout
        found: dict[str, Package] = {}
        for line in out.splitlines():
            parts = line.split("\t")
            if len(parts) != 4 or parts[2][:2] not in ("ii", "hi"):
                continue
            name, version, abbrev, status = parts
            found[name] = Package(name, version, abbrev.startswith("h") or "hold" in status)
        return found
    out = host.run(
        "rpm -qa --qf '%{NAME}\\t%{VERSION}-%{RELEASE}\\n' " + " ".join(f"'{p}'" for p in patterns)
    ).stdout
    locks = host.run("dnf versionlock list 2>/dev/null").stdout
    result = {}
    for line in out.splitlines():
        name, _, version = line.partition("\t")
        if name:
            result[name] = Package(name, version, name in locks)
    return result


def loaded_driver(host: Any) -> str:
    """The NVRM line of the loaded kernel module, '' when no nvidia module is loaded."""
    f = host.file("/proc/driver/nvidia/version")
    if not f.exists:
        return ""
    for line in f.content_string.splitlines():
        if line.startswith("NVRM version:"):
            return str(line)
    return ""


def smi_versions(host: Any) -> dict[str, str]:
    """`nvidia-smi --version` as a dict ('DRIVER version' -> '580.159.04'), {} without it."""
    if not host.exists("nvidia-smi"):
        return {}
    result = host.run("nvidia-smi --version")
    if result.rc != 0:
        return {}
    pairs = (line.split(":", 1) for line in result.stdout.splitlines() if ":" in line)
    return {k.strip(): v.strip() for k, v in pairs}


def smi_gpu_count(host: Any) -> int | None:
    result = host.run("nvidia-smi -L")
    if result.rc != 0:
        return None
    return sum(1 for line in result.stdout.splitlines() if line.startswith("GPU "))


def sysfs_gpu_count(host: Any) -> int:
    """NVIDIA display/3D controllers on the PCI bus (works without a driver)."""
    out = host.run(
        "for d in /sys/bus/pci/devices/*; do "
        'printf "%s %s\\n" "$(cat $d/vendor)" "$(cat $d/class)"; done'
    ).stdout
    count = 0
    for line in out.splitlines():
        vendor, _, klass = line.partition(" ")
        if vendor == "0x10de" and klass.startswith("0x03"):
            count += 1
    return count


def json_file(host: Any, path: str) -> tuple[dict[str, Any] | None, str]:
    """(parsed JSON object or None, error text) for a file on the host."""
    f = host.file(path)
    if not f.exists:
        return None, f"{path} does not exist"
    try:
        data = json.loads(f.content_string)
    except ValueError as exc:
        return None, f"{path} is not valid JSON: {exc}"
    if not isinstance(data, dict):
        return None, f"{path} holds {type(data).__name__}, not an object"
    return data, ""
