"""Build the lab's TEST DOUBLE of the AWS EFA installer: aws-efa-installer-<version>.tar.gz,
unpacking to ./aws-efa-installer/ with efa_installer.sh (tests/recorded/reference/fabric.yaml
efa.installer.tarball), a tiny DKMS module of ours named efa, and stand-ins for libfabric's
fi_info and the aws-ofi-nccl plugin. Every name, path and version comes from the reference
file (never from the efa role's variables); the tarball is byte-for-byte reproducible, so its
sha256 is what the lab's policy pins (the role's own pin is AWS's, which this double fails).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[3]
REFERENCE = REPO / "tests" / "recorded" / "reference" / "fabric.yaml"
PAYLOAD = Path(__file__).resolve().parent / "payload"
VERSION = "1.41.0"  # a version the reference pins and lists the components of


@dataclass(frozen=True)
class Installer:
    path: Path
    version: str
    module_version: str
    sha256: str


def _match(pattern: str, text: str, where: str) -> str:
    found = re.search(pattern, text)
    if not found:
        raise ValueError(f"{REFERENCE.name} {where}: no match for {pattern!r} in {text!r}")
    return found.group(1)


def substitutions(version: str = VERSION) -> dict[str, str]:
    ref: dict[str, Any] = yaml.safe_load(REFERENCE.read_text())
    efa = ref["efa"]
    installs = efa["installer"]["installs"]
    components = str(installs["example_component_versions"][version])
    env = efa["nccl_env"]
    # the installer's names; the NGC container builds' extra name is not the installer's
    net = str(env["NCCL_NET_PLUGIN"]["value"]).split("NGC builds")[0]
    plugin_text = f"{net} {env['NCCL_TUNER_PLUGIN']['value']}"
    libraries = sorted(set(re.findall(r"libnccl-[a-z-]+\.so\b", plugin_text)))
    fabrics = re.findall(
        r"'([a-z-]+)'",
        _match(r"\((fabric [^)]*)\)", efa["host_checks"]["libfabric"]["expect"], "libfabric"),
    )
    return {
        "@VERSION@": version,
        "@MODULE_VERSION@": _match(r"\befa-(\d+\.\d+\.\d+)-", components, "components"),
        "@DESCRIPTION@": _match(r"description '([^']+)'", installs["kernel_module"], "module"),
        "@MANIFEST@": str(installs["paths"]["manifest"]),
        "@MANIFEST_LINE@": _match(r"'(.+?)<version>'", installs["manifest_format"], "manifest"),
        "@LIBFABRIC@": str(installs["paths"]["libfabric"]).split()[0],
        "@OFI_NCCL@": _match(r"or (/\S+)/<", installs["paths"]["ofi_nccl"], "ofi_nccl"),
        "@PLUGIN_LIBRARIES@": " ".join(libraries),
        "@FABRICS@": " ".join(fabrics),
        "@LIMITS@": str(efa["installer"]["limits"]["file"]),
    }


def _render(text: str, subs: dict[str, str]) -> str:
    for key, value in subs.items():
        text = text.replace(key, value)
    left = re.findall(r"@[A-Z_]+@", text)
    if left:
        raise ValueError(f"unfilled placeholders {sorted(set(left))}")
    return text


def build(out_dir: Path, version: str = VERSION) -> Installer:
    subs = substitutions(version)
    out_dir.mkdir(parents=True, exist_ok=True)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        files = sorted(p for p in PAYLOAD.rglob("*") if p.is_file())
        for d in ("aws-efa-installer", "aws-efa-installer/dkms"):
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            tar.addfile(info)
        for f in files:
            data = _render(f.read_text(), subs).encode()
            info = tarfile.TarInfo(f"aws-efa-installer/{f.relative_to(PAYLOAD).as_posix()}")
            info.size, info.mtime = len(data), 0
            info.mode = 0o755 if f.name in ("efa_installer.sh", "fi_info") else 0o644
            tar.addfile(info, io.BytesIO(data))
    packed = io.BytesIO()
    with gzip.GzipFile(fileobj=packed, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())
    path = out_dir / f"aws-efa-installer-{version}.tar.gz"
    path.write_bytes(packed.getvalue())
    digest = hashlib.sha256(packed.getvalue()).hexdigest()
    return Installer(path, version, subs["@MODULE_VERSION@"], digest)
