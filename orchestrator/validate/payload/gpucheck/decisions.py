"""Pure decisions (unit-tested without torch)."""

from __future__ import annotations


def arch_covers(arch_list: list[str], cc: tuple[int, int]) -> tuple[str, str]:
    """Does the build carry code for compute capability `cc`? -> (status, diagnosis).

    sm_XY (native code) for the device passes; only PTX (compute_XY <= cc) warns, since the
    driver JIT-compiles it at start (slow, and it fails where the PTX is newer than the driver).
    """
    major, minor = cc
    native = f"sm_{major}{minor}"
    if native in arch_list or f"{native}a" in arch_list:
        return "pass", ""
    ptx = [a for a in arch_list if a.startswith("compute_") and _arch_cc(a) <= major * 10 + minor]
    build = " ".join(arch_list) or "none"
    if ptx:
        return "warn", (
            f"no native {native} kernels in this PyTorch build ({build}); it runs "
            f"from PTX {ptx[-1]} through the driver's JIT; use an image built for "
            f"{native}"
        )
    return "fail", (
        f"this PyTorch build has no kernels for {native} ({build}): every CUDA "
        f"kernel fails with 'no kernel image is available'; use an image whose "
        f"torch.cuda.get_arch_list() includes {native}"
    )


def _arch_cc(arch: str) -> int:
    digits = "".join(ch for ch in arch.split("_", 1)[-1] if ch.isdigit())
    return int(digits) if digits else 0


def cuda_vs_driver(build: str | None, driver: int | None) -> tuple[str, str, str]:
    """Is the image's CUDA build supported by the host driver? -> (status, value, diagnosis).

    `driver` is cuDriverGetVersion's integer (13000 for CUDA 13.0). A build newer than the
    driver within the same major version runs under minor-version compatibility (warn: PTX JIT
    and new APIs fail); a newer major version cannot run (fail: "driver too old").
    """
    if build is None:
        return (
            "fail",
            "cpu-only",
            (
                "this PyTorch is a CPU-only build (torch.version.cuda is "
                "None); use a CUDA build of PyTorch in the image"
            ),
        )
    if driver is None or driver <= 0:
        return "warn", f"build {build}", "could not read the driver's CUDA version"
    dmaj, dmin = driver // 1000, (driver % 1000) // 10
    bmaj, bmin = (int(p) for p in [*build.split("."), "0"][:2])
    value = f"build {bmaj}.{bmin}, driver {dmaj}.{dmin}"
    if (bmaj, bmin) <= (dmaj, dmin):
        return "pass", value, ""
    if bmaj == dmaj:
        return (
            "warn",
            value,
            (
                f"CUDA {bmaj}.{bmin} runs on a {dmaj}.{dmin} driver only "
                "through minor-version compatibility (PTX JIT and newer APIs "
                "fail); upgrade the driver or use an older image"
            ),
        )
    return (
        "fail",
        value,
        (
            f"the host driver supports CUDA {dmaj}.{dmin}, the image needs "
            f"{bmaj}.{bmin} (driver too old); upgrade the driver branch or use "
            f"an image built for CUDA {dmaj}.x"
        ),
    )


def busbw(algbw: float, ranks: int) -> float:
    """all_reduce bus bandwidth: algbw x 2(n-1)/n (nccl-tests' definition)."""
    return algbw * 2 * (ranks - 1) / ranks if ranks > 0 else 0.0


def sweep_sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes
