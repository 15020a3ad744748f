"""Host-wide checks (parent process)."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from typing import Any

from .decisions import arch_covers, cuda_vs_driver
from .results import Result, result


def parent_checks(torch: Any, spec: dict[str, Any]) -> tuple[list[Result], int]:
    out: list[Result] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        available = bool(torch.cuda.is_available())
    notes = "; ".join(str(w.message).strip() for w in caught)
    if not available:
        out.append(result("cuda_available", "fail", False, True, "", _no_cuda_diagnosis(notes)))
        return out, 0
    out.append(result("cuda_available", "pass", True, True, ""))

    count = int(torch.cuda.device_count())
    expected = spec.get("expected_count")
    mig = spec.get("mig_devices") or []
    if mig:
        out.append(
            result(
                "device_count",
                "skip",
                count,
                None,
                "GPUs",
                "MIG is on: CUDA enumerates MIG devices; see mig_devices",
            )
        )
    elif expected is None:
        out.append(result("device_count", "warn", count, None, "GPUs", "expected count unknown"))
    elif count == expected:
        out.append(result("device_count", "pass", count, expected, "GPUs"))
    else:
        out.append(
            result(
                "device_count",
                "fail",
                count,
                expected,
                "GPUs",
                (
                    f"PyTorch sees {count} GPUs, the host has {expected}; check "
                    "CUDA_VISIBLE_DEVICES, the container's --gpus/--device option, and "
                    "nvidia-smi -L on the host"
                ),
            )
        )

    build = torch.version.cuda
    driver = _driver_version()
    status, value, diag = cuda_vs_driver(build, driver)
    out.append(result("cuda_build_vs_driver", status, value, "build <= driver", "", diag))

    arch_list = list(torch.cuda.get_arch_list())
    want_name = spec.get("expected_name")
    want_cc = spec.get("expected_cc")
    for i in range(count):
        props = torch.cuda.get_device_properties(i)
        cc = (int(props.major), int(props.minor))
        name = str(props.name)
        if want_name and want_name not in name:
            out.append(
                result(
                    "device_name",
                    "fail",
                    name,
                    want_name,
                    "",
                    (
                        f"GPU {i} is {name!r}, the catalog expects {want_name!r} for this "
                        "host's PCI id; check the catalog entry and the GPUs the container "
                        "was given"
                    ),
                    i,
                )
            )
        else:
            out.append(result("device_name", "pass", name, want_name, "", "", i))
        cc_text = f"{cc[0]}.{cc[1]}"
        if want_cc and cc_text != want_cc:
            out.append(
                result(
                    "compute_capability",
                    "fail",
                    cc_text,
                    want_cc,
                    "",
                    (
                        f"GPU {i} reports compute capability {cc_text}, the catalog says "
                        f"{want_cc}; fix the catalog entry or check the GPU model"
                    ),
                    i,
                )
            )
        else:
            out.append(result("compute_capability", "pass", cc_text, want_cc, "", "", i))
        status, diag = arch_covers(arch_list, cc)
        out.append(
            result("arch_list", status, " ".join(arch_list), f"sm_{cc[0]}{cc[1]}", "", diag, i)
        )

    if mig:
        out.append(result("peer_access", "skip", None, None, "", "MIG is on (no peer access)"))
    else:
        out.extend(peer_checks(torch, count, bool(spec.get("nvlink"))))
    out.extend(mig_checks(mig))
    return out, count


def _driver_version() -> int | None:
    """cuDriverGetVersion from libcuda (the host's driver, also inside a container)."""
    import ctypes

    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int(0)
        if libcuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
            return None
    except OSError:
        return None
    return int(version.value)


def _no_cuda_diagnosis(notes: str) -> str:
    low = notes.lower()
    if "too old" in low:
        return (
            f"the host driver is too old for this image's CUDA ({notes}); upgrade the "
            "driver or use an image built for an older CUDA"
        )
    if "no nvidia driver" in low or "found no nvidia driver" in low:
        return (
            f"no NVIDIA driver reachable ({notes}); in a container: start it with --gpus "
            "all or --device nvidia.com/gpu=all; on the host: install and load the driver"
        )
    detail = f" ({notes})" if notes else ""
    return (
        "CUDA is not available to PyTorch" + detail + "; check nvidia-smi, "
        "CUDA_VISIBLE_DEVICES, and that the container was started with GPUs"
    )


def peer_checks(torch: Any, count: int, nvlink: bool) -> list[Result]:
    if count < 2:
        return [result("peer_access", "skip", None, None, "", "fewer than 2 GPUs")]
    missing = [
        f"{i}->{j}"
        for i in range(count)
        for j in range(count)
        if i != j and not torch.cuda.can_device_access_peer(i, j)
    ]
    pairs = count * (count - 1)
    value = f"{pairs - len(missing)}/{pairs} pairs"
    if not missing:
        return [result("peer_access", "pass", value, f"{pairs}/{pairs} pairs", "")]
    if not nvlink:
        return [
            result(
                "peer_access",
                "warn",
                value,
                "none required",
                "",
                "no peer access between some GPUs (PCIe host without NVLink: expected "
                f"on some platforms): {' '.join(missing)}",
            )
        ]
    return [
        result(
            "peer_access",
            "fail",
            value,
            f"{pairs}/{pairs} pairs",
            "",
            (
                f"no CUDA peer access {' '.join(missing)} on an NVLink host; check "
                "nvidia-smi topo -m and nvlink -s, the fabric state (nvidia-smi -q | grep -A2 "
                "Fabric), and that MIG is off (MIG disables peer access)"
            ),
        )
    ]


def mig_checks(mig_devices: list[str]) -> list[Result]:
    """Each expected MIG device must be usable alone (CUDA_VISIBLE_DEVICES=<MIG UUID>)."""
    if not mig_devices:
        return [result("mig_devices", "skip", None, None, "", "MIG is off on this host")]
    probe = (
        "import torch;x=torch.ones(256,256,device='cuda');"
        "print(torch.cuda.device_count(), int((x@x)[0,0].item()))"
    )
    bad = []
    for uuid in mig_devices:
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": uuid}
        try:
            proc = subprocess.run(
                [sys.executable, "-c", probe],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            ok = proc.returncode == 0 and proc.stdout.split() == ["1", "256"]
        except subprocess.TimeoutExpired:
            ok = False
        if not ok:
            bad.append(uuid)
    value = f"{len(mig_devices) - len(bad)}/{len(mig_devices)} usable"
    if not bad:
        return [result("mig_devices", "pass", value, f"{len(mig_devices)}/{len(mig_devices)}", "")]
    return [
        result(
            "mig_devices",
            "fail",
            value,
            f"{len(mig_devices)}/{len(mig_devices)}",
            "",
            (
                f"MIG devices not usable from CUDA: {' '.join(bad)}; check nvidia-smi -L and "
                "nvidia-smi mig -lgi/-lci (the layout may be missing after a reboot), and that the "
                "container was given the MIG devices"
            ),
        )
    ]
