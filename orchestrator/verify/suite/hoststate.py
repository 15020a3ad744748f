"""Read-only helpers that ask a testinfra host about its state (one command each)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from orchestrator.facts import LoadedDriver
from orchestrator.mig_apply import Runner
from orchestrator.parsers.driver_version import parse_nvrm_line
from orchestrator.parsers.smi_list import ListedGpu, parse_smi_list
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
        name, _sep, version = line.partition("\t")
        if name:
            result[name] = Package(name, version, name in locks)
    return result


def loaded_driver(host: Any) -> LoadedDriver | None:
    """The loaded kernel module's version and flavour; None when no nvidia module is loaded."""
    f = host.file("/proc/driver/nvidia/version")
    if not f.exists:
        return None
    for line in f.content_string.splitlines():
        if line.startswith("NVRM version:"):
            return parse_nvrm_line(line)
    return None


def loaded_modules(host: Any) -> frozenset[str] | None:
    """Names of the loaded kernel modules; None where /proc/modules does not exist (a
    kernel without module support, or a container that hides it)."""
    f = host.file("/proc/modules")
    if not f.exists:
        return None
    return frozenset(line.split(" ", 1)[0] for line in f.content_string.splitlines() if line)


def smi_versions(host: Any) -> dict[str, str]:
    """`nvidia-smi --version` as a dict ('DRIVER version' -> '580.159.04'), {} without it."""
    if not host.exists("nvidia-smi"):
        return {}
    result = host.run("nvidia-smi --version")
    if result.rc != 0:
        return {}
    pairs = (line.split(":", 1) for line in result.stdout.splitlines() if ":" in line)
    return {k.strip(): v.strip() for k, v in pairs}


def smi_list(host: Any) -> tuple[ListedGpu, ...] | None:
    """`nvidia-smi -L` parsed (GPUs and their MIG devices); None when it fails."""
    result = host.run("nvidia-smi -L")
    if result.rc != 0:
        return None
    return parse_smi_list(result.stdout)


def smi_gpu_count(host: Any) -> int | None:
    listed = smi_list(host)
    return None if listed is None else len(listed)


def command_runner(host: Any) -> Runner:
    """A testinfra host as the `Runner` the MIG code takes: argv -> (exit, stdout + stderr)."""

    def run(argv: Sequence[str]) -> tuple[int, str]:
        result = host.run(" ".join(shlex.quote(a) for a in argv))
        return int(result.rc), str(result.stdout) + str(result.stderr)

    return run


def sysfs_gpu_count(host: Any) -> int:
    """NVIDIA display/3D controllers on the PCI bus (works without a driver)."""
    # one process for the whole bus: `grep -H` prints "DIR/vendor:0x10de", "DIR/class:0x0302.."
    out = host.run("cd /sys/bus/pci/devices && grep -H . -- */vendor */class 2>/dev/null").stdout
    seen: dict[str, dict[str, str]] = {}
    for line in out.splitlines():
        # "0000:00:06.0/vendor:0x10de": the PCI address holds colons too, so split at the
        # attribute's name (the real H200 host's bus showed it: 2026-12-01, docs/device.md)
        path, sep, value = line.partition("/vendor:")
        name = "vendor"
        if not sep:
            path, sep, value = line.partition("/class:")
            name = "class"
        if sep:
            seen.setdefault(path, {})[name] = value.strip()
    return sum(
        1
        for d in seen.values()
        if d.get("vendor") == "0x10de" and d.get("class", "").startswith("0x03")
    )


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


def cdi_device_names(host: Any, path: str) -> tuple[set[str] | None, str]:
    """(device names of a CDI spec, e.g. {"0", "0:1", "all", "GPU-..."}, or None; error text)."""
    f = host.file(path)
    if not f.exists:
        return None, f"no CDI spec at {path}: nvidia-ctk cdi generate --output={path}"
    try:
        spec = yaml.safe_load(f.content_string)
    except yaml.YAMLError as exc:
        return None, f"CDI spec {path} is not valid YAML: {exc}"
    devices = spec.get("devices") if isinstance(spec, dict) else None
    if not isinstance(devices, list):
        return None, f"CDI spec {path} has no devices list"
    return {str(d.get("name")) for d in devices if isinstance(d, dict)}, ""


@dataclass(frozen=True)
class DriverRecord:
    """What the nvidia_driver role wrote after installing (roles/nvidia_driver record.yml)."""

    version: str
    held: tuple[str, ...]


def driver_record(host: Any, path: str) -> DriverRecord | None:
    """The role's record, None when the driver was not installed by the role."""
    data, _unused = json_file(host, path)
    if data is None:
        return None
    held = data.get("held", [])
    return DriverRecord(
        str(data.get("version", "")),
        tuple(str(h) for h in held) if isinstance(held, list) else (),
    )


def smi_persistence(host: Any) -> dict[int, bool]:
    """GPU index -> persistence mode on, from `nvidia-smi --query-gpu`; {} when it fails."""
    result = host.run("nvidia-smi --query-gpu=index,persistence_mode --format=csv,noheader")
    if result.rc != 0:
        return {}
    out: dict[int, bool] = {}
    for line in result.stdout.splitlines():
        index, _sep, mode = line.partition(",")
        if index.strip().isdigit():
            out[int(index)] = mode.strip() == "Enabled"
    return out
