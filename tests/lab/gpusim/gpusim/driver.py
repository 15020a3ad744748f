"""What driver the host has: detected from the files the driver role installed.

Installed = a built NVIDIA kernel module exists for the (simulated) running kernel; its
version and flavour come from DKMS's tree or the module's own .modinfo. The userspace side
(NVML, nvidia-smi) is detected from the package files. Nothing here is configured by hand.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from gpusim import yamlsubset
from gpusim.model import DATA_DIR
from gpusim.paths import Paths

_MODULE = re.compile(r"^nvidia(-current)?(-open)?\.ko(\.xz|\.gz|\.zst)?$")
_NVML = re.compile(r"^libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$")
_NVML_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu/nvidia/current",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu/nvidia/current",
    "/usr/lib64",
    "/usr/lib",
)
SMI_PACKAGE_PATHS = ("/usr/lib/nvidia/current/nvidia-smi", "/usr/bin/nvidia-smi")


@dataclass(frozen=True)
class InstalledModule:
    version: str  # "535.261.03"
    flavour: str  # "open" | "proprietary"
    path: Path
    compiler: str  # "GCC: (Debian 12.2.0-14) 12.2.0", "" when unknown


def kernel_release(paths: Paths) -> str:
    """The simulated running kernel: the file boot wrote, else the real one."""
    try:
        return paths.kernel_release_file.read_text().strip() or os.uname().release
    except FileNotFoundError:
        return os.uname().release


def _elf_sections(blob: bytes | None, path: Path, names: tuple[bytes, ...]) -> bytes:
    """The named sections of an ELF64 object (from memory, or read from ``path`` piecewise:
    a module built with debug info is 60+ MB, of which .modinfo is a few hundred bytes)."""
    with contextlib.ExitStack() as stack:
        if blob is None:
            handle = stack.enter_context(open(path, "rb"))

            def read(offset: int, size: int) -> bytes:
                handle.seek(offset)
                return handle.read(size)
        else:
            data = blob

            def read(offset: int, size: int) -> bytes:
                return data[offset : offset + size]

        header = read(0, 64)
        if header[:4] != b"\x7fELF" or header[4] != 2:  # not ELF64: search all of it
            return blob if blob is not None else path.read_bytes()
        (shoff,) = struct.unpack_from("<Q", header, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", header, 0x3A)
        table = read(shoff, shentsize * shnum)

        def section(index: int) -> tuple[int, int, int]:
            (name,) = struct.unpack_from("<I", table, index * shentsize)
            offset, size = struct.unpack_from("<QQ", table, index * shentsize + 0x18)
            return name, offset, size

        _, str_offset, str_size = section(shstrndx)
        strings = read(str_offset, str_size)
        found = b""
        for index in range(shnum):
            name_at, offset, size = section(index)
            name = strings[name_at : strings.index(b"\x00", name_at)]
            if name in names:
                found += b"\x00" + read(offset, size)
        return found


def _modinfo(path: Path) -> bytes:
    """The module's .modinfo and .comment sections (version=, license=, the compiler)."""
    import gzip  # here: most gpusim calls read no compressed module
    import lzma

    try:
        if path.name.endswith(".xz"):
            blob: bytes | None = lzma.decompress(path.read_bytes())
        elif path.name.endswith(".gz"):
            blob = gzip.decompress(path.read_bytes())
        elif path.name.endswith(".zst"):
            return b""  # no zstd in the stdlib before 3.14: fall back to DKMS's tree
        else:
            blob = None
        return _elf_sections(blob, path, (b".modinfo", b".comment"))
    except (OSError, lzma.LZMAError, EOFError, struct.error, ValueError):
        return b""


def _field(blob: bytes, name: bytes) -> str:
    match = re.search(rb"(?:^|\x00)" + name + rb"=([^\x00]*)", blob)
    return match.group(1).decode(errors="replace") if match else ""


def _dkms_version(paths: Paths, release: str) -> tuple[str, str]:
    """(version, dkms module name) of an NVIDIA module DKMS built for ``release``."""
    if not paths.dkms.is_dir():
        return "", ""
    for module_dir in sorted(paths.dkms.glob("nvidia*")):
        for version_dir in sorted(module_dir.iterdir()):
            if (version_dir / release).is_dir():
                return version_dir.name, module_dir.name
    return "", ""


def installed_module(paths: Paths) -> InstalledModule | None:
    release = kernel_release(paths)
    base = paths.lib_modules / release
    if not base.is_dir():
        return None
    found = sorted(p for p in base.rglob("nvidia*.ko*") if _MODULE.match(p.name))
    if not found:
        return None
    path = found[0]
    blob = _modinfo(path)
    dkms_version, dkms_name = _dkms_version(paths, release)
    version = _field(blob, b"version") or dkms_version
    if not version:
        return None
    licence = _field(blob, b"license")
    if licence:
        flavour = "proprietary" if licence == "NVIDIA" else "open"
    else:
        flavour = "open" if "open" in dkms_name or "open" in path.name else "proprietary"
    compiler = re.search(rb"GCC: \([^\x00]*", blob)
    return InstalledModule(version, flavour, path, compiler.group(0).decode() if compiler else "")


def nvml_version(paths: Paths) -> str | None:
    """Version of the installed libnvidia-ml.so.<version>, None when absent."""
    for directory in _NVML_DIRS:
        base = paths.at(directory)
        if not base.is_dir():
            continue
        for entry in base.iterdir():
            match = _NVML.match(entry.name)
            if match:
                return match.group(1)
    return None


def smi_package_installed(paths: Paths) -> bool:
    """The driver's userspace nvidia-smi is installed (not our shim in /usr/local/bin)."""
    return any(paths.at(p).exists() for p in SMI_PACKAGE_PATHS)


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


@functools.lru_cache(maxsize=8)
def cuda_version(driver_version: str) -> str:
    data = yamlsubset.load_path(DATA_DIR / "models.yaml")
    assert isinstance(data, dict)
    table = data["cuda_min_driver"]
    assert isinstance(table, dict)
    best = "N/A"
    for cuda, minimum in table.items():
        supported = _version_key(driver_version) >= _version_key(str(minimum))
        if supported and (best == "N/A" or _version_key(cuda) > _version_key(best)):
            best = cuda
    return best


def nvrm_line(module: InstalledModule) -> str:
    """The first line of /proc/driver/nvidia/version, in the real format per flavour."""
    if module.flavour == "open":
        return (
            f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {module.version}"
            "  Release Build  (gpusim@)  "
        )
    return f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {module.version}  Release Build  "


def gcc_line(module: InstalledModule) -> str:
    match = re.match(r"GCC: \((.*)\) (\S+)", module.compiler)
    if match:
        return f"GCC version:  gcc version {match.group(2)} ({match.group(1)}) "
    return "GCC version:  gcc version unknown "
