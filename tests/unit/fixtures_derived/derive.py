"""Derive host fixtures from the real 2x H200 capture (tests/recorded/fixtures/real/).

Each variant starts from the real raw outputs and changes what a different host would show:
other PCI ids and counts, NVSwitches on the bus, another driver, no driver, faults. Formats
come from the real capture; values are modelled on the reference tables, not captured.
Run `python tests/unit/fixtures_derived/derive.py` to rewrite the directories beside this
file; tests/unit/test_parsers_derived.py fails when the committed files drift from it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REAL = HERE.parents[1] / "recorded" / "fixtures" / "real" / "h200x2-ubuntu2404-580"

Raw = dict[str, str]

SMI_FILES = (
    "nvidia-smi.txt",
    "nvidia-smi-L.txt",
    "nvidia-smi-version.txt",
    "nvidia-smi-query-gpu.csv",
    "nvidia-smi-q.txt",
    "nvidia-smi-q.xml",
    "nvidia-smi-topo-m.txt",
    "nvidia-smi-nvlink-s.txt",
    "nvidia-smi-nvlink-e.txt",
    "nvidia-smi-mig-lgip.txt",
    "nvidia-smi-mig-lgipp.txt",
    "nvidia-smi-mig-lgi.txt",
    "nvidia-smi-mig-lcip.txt",
)
# Validation outputs, not detection: not carried into the variants.
NOT_FACTS = (
    "nccl-tests-all_reduce_perf.txt",
    "measure-gemm-hbm.txt",
    "measure-torch-allreduce.txt",
    "torch-info.txt",
    "nvidia-smi-q.xml",
)


def real() -> Raw:
    return {p.name: p.read_text() for p in sorted(REAL.iterdir()) if p.name not in NOT_FACTS}


def ok(body: str, code: int = 0) -> str:
    return body.rstrip("\n") + f"\n# exit={code}\n"


@dataclass(frozen=True)
class Gpu:
    address: str  # "0000:18:00.0"
    device: int
    name: str
    uuid: str
    memory_mib: int
    compute_cap: str
    arch: str
    gen: int  # PCIe generation (current = max unless degraded)
    width: int = 16
    numa: int = 0
    subsys: int = 0x10DE
    power_w: int = 700
    cur_gen: int | None = None
    cur_width: int | None = None


@dataclass(frozen=True)
class Host:
    gpus: tuple[Gpu, ...]
    nvswitch_ids: tuple[tuple[str, int], ...] = ()  # (address, device id)
    driver: str | None = "580.159.04"
    open_modules: bool = True
    cuda: str = "13.0"
    nvlinks_per_gpu: int = 18
    link_speed: str = "26.562"
    mig_capable: bool = True
    os_release: str | None = None
    uname: str | None = None


_SPEED = {3: "8.0 GT/s PCIe", 4: "16.0 GT/s PCIe", 5: "32.0 GT/s PCIe"}


def sysfs_line(
    addr: str,
    vendor: int,
    device: int,
    cls: int,
    sv: int,
    sd: int,
    link: tuple[str, str, str, str],
    numa: int,
    driver: str,
) -> str:
    cs, cw, ms, mw = link
    return (
        f"{addr} vendor=0x{vendor:04x} device=0x{device:04x} class=0x{cls:06x} "
        f"subsystem_vendor=0x{sv:04x} subsystem_device=0x{sd:04x} "
        f'current_link_speed="{cs}" current_link_width={cw} max_link_speed="{ms}" '
        f"max_link_width={mw} numa_node={numa} driver={driver}"
    )


def sysfs(host: Host) -> str:
    lines = [
        sysfs_line("0000:00:00.0", 0x8086, 0x09A2, 0x060000, 0x8086, 0, ("", "", "", ""), 0, "")
    ]
    driver = "nvidia" if host.driver else ""
    for addr, dev in host.nvswitch_ids:
        link = ("8.0 GT/s PCIe", "2", "8.0 GT/s PCIe", "2")
        lines.append(sysfs_line(addr, 0x10DE, dev, 0x068000, 0x10DE, 0x1796, link, 0, driver))
    for g in host.gpus:
        link = (
            _SPEED[g.cur_gen or g.gen],
            str(g.cur_width or g.width),
            _SPEED[g.gen],
            str(g.width),
        )
        lines.append(
            sysfs_line(
                g.address, 0x10DE, g.device, 0x030200, 0x10DE, g.subsys, link, g.numa, driver
            )
        )
    return ok("\n".join(sorted(lines)))


def smi_bus(addr: str) -> str:
    return "0000" + addr.upper().replace("0000:", "0000:", 1)


def query_csv(host: Host, real_csv: str, overrides: dict[int, dict[str, str]]) -> str:
    header = real_csv.splitlines()[0]
    names = [h.split(" [")[0] for h in header.split(", ")]
    rows = [header]
    for i, g in enumerate(host.gpus):
        mig = "Disabled" if host.mig_capable else "[N/A]"
        values = {
            "index": str(i),
            "name": g.name,
            "pci.bus_id": smi_bus(g.address),
            "pci.device_id": f"0x{g.device:04X}10DE",
            "pci.sub_device_id": f"0x{g.subsys:04X}10DE",
            "uuid": g.uuid,
            "serial": f"16537240{i:05d}",
            "driver_version": host.driver or "",
            "vbios_version": "96.00.A5.00.1A",
            "memory.total": f"{g.memory_mib} MiB",
            "mig.mode.current": mig,
            "mig.mode.pending": mig,
            "persistence_mode": "Enabled",
            "ecc.mode.current": "Enabled",
            "ecc.mode.pending": "Enabled",
            "ecc.errors.uncorrected.volatile.total": "0",
            "compute_cap": g.compute_cap,
            "power.limit": f"{g.power_w:.2f} W",
            "clocks.max.sm": "1980 MHz",
            "clocks.current.sm": "345 MHz",
            "pcie.link.gen.current": str(g.cur_gen or g.gen),
            "pcie.link.width.current": str(g.cur_width or g.width),
            "pcie.link.gen.max": str(g.gen),
            "pcie.link.width.max": str(g.width),
            "retired_pages.pending": "[N/A]" if g.arch != "Volta" else "No",
            "remapped_rows.pending": "No" if g.arch != "Volta" else "[N/A]",
            "remapped_rows.failure": "No" if g.arch != "Volta" else "[N/A]",
            "clocks_event_reasons.active": "0x0000000000000001",
            "temperature.gpu": "34",
        }
        values.update(overrides.get(i, {}))
        rows.append(", ".join(values[n] for n in names))
    return ok("\n".join(rows))


def _set(section: list[str], path: tuple[str, ...], new: str) -> None:
    """Set the value of the leaf at `path` (keys by indentation) in a -q GPU section."""
    depth, start = 0, 0
    for key in path:
        indent = 4 * (depth + 1)
        for i in range(start, len(section)):
            line = section[i]
            at_depth = len(line) - len(line.lstrip()) == indent
            if at_depth and line[indent:].split(" :")[0].strip() == key:
                start, depth = i + 1, depth + 1
                break
        else:
            raise KeyError(path)
    line = section[start - 1]
    section[start - 1] = line.split(" : ", 1)[0] + " : " + new


def smi_q(host: Host, real_q: str, overrides: dict[int, dict[tuple[str, ...], str]]) -> str:
    lines = real_q.split("\n")
    first = next(i for i, ln in enumerate(lines) if ln.startswith("GPU 0000"))
    second = next(i for i, ln in enumerate(lines) if ln.startswith("GPU 0000") and i > first)
    template = lines[first:second]
    head = "\n".join(lines[:first])
    head = re.sub(r"(Driver Version\s+: ).*", rf"\g<1>{host.driver}", head)
    head = re.sub(r"(CUDA Version\s+: ).*", rf"\g<1>{host.cuda}", head)
    head = re.sub(r"(Attached GPUs\s+: ).*", rf"\g<1>{len(host.gpus)}", head)
    out = [head]
    for i, g in enumerate(host.gpus):
        s = list(template)
        s[0] = f"GPU {smi_bus(g.address)}"
        bus, dev = g.address.split(":")[1], g.address.split(":")[2].split(".")[0]
        fields = {
            ("Product Name",): g.name,
            ("Product Architecture",): g.arch,
            ("Serial Number",): f"16537240{i:05d}",
            ("GPU UUID",): g.uuid,
            ("Minor Number",): str(i),
            ("PCI", "Bus"): f"0x{bus.upper()}",
            ("PCI", "Device"): f"0x{dev.upper()}",
            ("PCI", "Device Id"): f"0x{g.device:04X}10DE",
            ("PCI", "Bus Id"): smi_bus(g.address),
            ("PCI", "Sub System Id"): f"0x{g.subsys:04X}10DE",
            ("FB Memory Usage", "Total"): f"{g.memory_mib} MiB",
            ("GSP Firmware Version",): host.driver or "N/A",
            ("GPU Virtualization Mode", "Virtualization Mode"): "None",
        }
        if not host.mig_capable:
            fields[("MIG Mode", "Current")] = "N/A"
            fields[("MIG Mode", "Pending")] = "N/A"
        fields.update(overrides.get(i, {}))
        for path, new in fields.items():
            _set(s, path, new)
        out.append("\n".join(s))
    return "\n".join(out) + "\n# exit=0\n"  # the trailer the probe writes after each capture


def smi_list(host: Host) -> str:
    return ok("\n".join(f"GPU {i}: {g.name} (UUID: {g.uuid})" for i, g in enumerate(host.gpus)))


def nvlink_s(host: Host, inactive: frozenset[tuple[int, int]] = frozenset()) -> str:
    lines = []
    for i, g in enumerate(host.gpus):
        lines.append(f"GPU {i}: {g.name} (UUID: {g.uuid})")
        for link in range(host.nvlinks_per_gpu):
            state = "<inactive>" if (i, link) in inactive else f"{host.link_speed} GB/s"
            lines.append(f"\t Link {link}: {state}")
    return ok("\n".join(lines))


def nvlink_e(host: Host, errors: dict[tuple[int, int, str], int] | None = None) -> str:
    errors = errors or {}
    lines = []
    for i, g in enumerate(host.gpus):
        lines.append(f"GPU {i}: {g.name} (UUID: {g.uuid})")
        for link in range(host.nvlinks_per_gpu):
            for counter in ("Replay Errors", "Recovery Errors", "CRC Errors"):
                lines.append(f"\t Link {link}: {counter}: {errors.get((i, link, counter), 0)}")
            lines.append("")
    return ok("\n".join(lines))


def topo(host: Host) -> str:
    n = len(host.gpus)
    cols = "\t".join(f"GPU{i}" for i in range(n))
    lines = [f"\t\x1b[4m{cols}\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m"]
    for i, g in enumerate(host.gpus):
        cells = []
        for j, h in enumerate(host.gpus):
            if i == j:
                cells.append(" X ")
            elif host.nvlinks_per_gpu:
                cells.append(f"NV{host.nvlinks_per_gpu}")
            else:
                cells.append("NODE" if g.numa == h.numa else "SYS")
        cpus = "0-47" if g.numa == 0 else "48-95"
        lines.append(f"GPU{i}\t" + "\t".join(cells) + f"\t{cpus}\t{g.numa}\t\tN/A")
    legend = REAL_RAW["nvidia-smi-topo-m.txt"].split("\n\n", 1)[1]
    return "\n".join(lines) + "\n\n" + legend


def smi_table(host: Host) -> str:
    real_table = REAL_RAW["nvidia-smi.txt"].split("\n")
    top = real_table[:8]
    top[2] = (
        f"| NVIDIA-SMI {host.driver:<22} Driver Version: {host.driver:<14} "
        f"CUDA Version: {host.cuda:<9}|"
    )
    sep = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
    rows = []
    for i, g in enumerate(host.gpus):
        mig = "Disabled" if host.mig_capable else "N/A"
        rows += [
            f"| {i:>3}  {g.name:<31}On  |   {smi_bus(g.address)} Off |{'0':>21} |",
            f"| N/A   34C    P0            {98:>3}W / {g.power_w:>4}W |"
            f"{'0MiB / ' + str(g.memory_mib) + 'MiB':>23} |      0%      Default |",
            f"|                                         |                        |{mig:>21} |",
            sep,
        ]
    tail_start = next(i for i, ln in enumerate(real_table) if ln.startswith("| Processes"))
    return "\n".join(top + rows + [""] + real_table[tail_start - 1 :])


def info_file(host: Host) -> str:
    blocks = []
    for i, g in enumerate(host.gpus):
        blocks.append(
            f"== /proc/driver/nvidia/gpus/{g.address}\n"
            f"Model: \t\t {g.name}\nIRQ:   \t\t {41 + i}\nGPU UUID: \t {g.uuid}\n"
            f"Video BIOS: \t 96.00.a5.00.1a\nBus Type: \t PCIe\nDMA Size: \t 52 bits\n"
            f"DMA Mask: \t 0xfffffffffffff\nBus Location: \t {g.address}\n"
            f"Device Minor: \t {i}\nGPU Firmware: \t {host.driver}\nGPU Excluded:\t No"
        )
    return ok("\n".join(blocks))


def nvrm(host: Host) -> str:
    if host.open_modules:
        return (
            f"NVIDIA UNIX Open Kernel Module for x86_64  {host.driver}  Release Build  "
            "(dvs-builder@U16-I3-B03-4-3)  Tue Sep  9 20:37:28 UTC 2025"
        )
    return f"NVIDIA UNIX x86_64 Kernel Module  {host.driver}  Tue Sep  9 20:37:28 UTC 2025"


def build(host: Host, raw: Raw) -> Raw:
    """A host with a loaded driver: every nvidia-smi output regenerated for `host`."""
    out = dict(raw)
    out["sysfs-pci-devices.txt"] = sysfs(host)
    if host.os_release:
        out["os-release.txt"] = ok(host.os_release)
    if host.uname:
        out["uname-r.txt"] = ok(host.uname)
    if host.driver is None:
        for name in (*SMI_FILES, "proc-driver-nvidia-version.txt"):
            out.pop(name, None)
        out.pop("proc-driver-nvidia-gpus-information.txt", None)
        out["lsmod.txt"] = ok(
            "nvme 61440 2 - Live 0xffffffffc0200000\nvirtio_net 73728 0 - Live 0xffffffffc0100000"
        )
        out["dmesg-nvidia.txt"] = ok("")
        return out
    out["proc-driver-nvidia-version.txt"] = ok(
        f"NVRM version: {nvrm(host)}\n"
        "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)"
    )
    out["proc-driver-nvidia-gpus-information.txt"] = info_file(host)
    out["dmesg-nvidia.txt"] = ok(
        "[    0.553226] nvidia: loading out-of-tree module taints kernel.\n"
        f"[    0.624561] NVRM: loading {nvrm(host)}"
    )
    major, minor = host.driver.split(".")[:2]
    out["nvidia-smi-version.txt"] = ok(
        f"NVIDIA-SMI version  : {host.driver}\nNVML version        : {major}.{minor}\n"
        f"DRIVER version      : {host.driver}\nCUDA Version        : {host.cuda}"
    )
    out["nvidia-smi.txt"] = smi_table(host)
    out["nvidia-smi-L.txt"] = smi_list(host)
    out["nvidia-smi-query-gpu.csv"] = query_csv(host, raw["nvidia-smi-query-gpu.csv"], {})
    out["nvidia-smi-q.txt"] = smi_q(host, raw["nvidia-smi-q.txt"], {})
    out["nvidia-smi-topo-m.txt"] = topo(host)
    out["nvidia-smi-nvlink-s.txt"] = nvlink_s(host)
    out["nvidia-smi-nvlink-e.txt"] = nvlink_e(host)
    if not host.mig_capable:
        for name in ("lgip", "lgipp", "lgi", "lcip"):
            out[f"nvidia-smi-mig-{name}.txt"] = ok("No MIG-supported devices found.", 6)
    return out


def uuid(prefix: str, i: int) -> str:
    return f"GPU-{prefix}{i:02x}0000-1111-2222-3333-{i:012x}"


HGX_ADDRS = (
    ("0000:18:00.0", 0),
    ("0000:2a:00.0", 0),
    ("0000:3a:00.0", 0),
    ("0000:5d:00.0", 0),
    ("0000:9a:00.0", 1),
    ("0000:ab:00.0", 1),
    ("0000:ba:00.0", 1),
    ("0000:db:00.0", 1),
)
UBUNTU_2204 = """PRETTY_NAME="Ubuntu 22.04.5 LTS"
NAME="Ubuntu"
VERSION_ID="22.04"
VERSION="22.04.5 LTS (Jammy Jellyfish)"
VERSION_CODENAME=jammy
ID=ubuntu
ID_LIKE=debian
UBUNTU_CODENAME=jammy"""
DEBIAN_12 = """PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"
NAME="Debian GNU/Linux"
VERSION_ID="12"
VERSION="12 (bookworm)"
VERSION_CODENAME=bookworm
ID=debian
HOME_URL="https://www.debian.org/"
SUPPORT_URL="https://www.debian.org/support"
BUG_REPORT_URL="https://bugs.debian.org/\""""


def hgx(
    tag: str,
    device: int,
    name: str,
    memory_mib: int,
    compute_cap: str,
    arch: str,
    gen: int,
    subsys: int,
    power_w: int = 700,
    *,
    count: int = 8,
) -> tuple[Gpu, ...]:
    """`count` GPUs of one model at the HGX board's addresses (and NUMA nodes), uuids from
    `tag`."""
    model = (memory_mib, compute_cap, arch, gen)
    return tuple(
        Gpu(a, device, name, uuid(tag, i), *model, numa=n, subsys=subsys, power_w=power_w)
        for i, (a, n) in enumerate(HGX_ADDRS[:count])
    )


def h100x8() -> Raw:
    host = Host(
        gpus=hgx("a1", 0x2330, "NVIDIA H100 80GB HBM3", 81559, "9.0", "Hopper", 5, 0x16C1),
        nvswitch_ids=(
            ("0000:05:00.0", 0x22A3),
            ("0000:06:00.0", 0x22A3),
            ("0000:07:00.0", 0x22A3),
            ("0000:08:00.0", 0x22A3),
        ),
        driver="550.127.05",
        cuda="12.4",
        os_release=UBUNTU_2204,
        uname="5.15.0-1072-aws",
    )
    raw = build(host, real())
    raw["nvidia-smi-mig-lgip.txt"] = lgip_for(
        raw["nvidia-smi-mig-lgip.txt"], len(host.gpus), H100_80GB
    )
    raw["nvidia-smi-mig-lgipp.txt"] = lgipp_for(raw["nvidia-smi-mig-lgipp.txt"], len(host.gpus))
    # Kernel update, covered: a newer -aws kernel with its headers; DKMS built the open module
    # for it as it was installed (the CUDA repository's nvidia-dkms-550-open).
    raw["kernels.txt"] = ok(
        "running 5.15.0-1072-aws\n"
        + "".join(
            f"kernel {k} vmlinuz=yes headers=yes\n"
            f"module {k} /lib/modules/{k}/updates/dkms/nvidia.ko version=550.127.05 "
            "signer=-\n"
            for k in ("5.15.0-1072-aws", "5.15.0-1073-aws")
        )
        + "dkms nvidia 550.127.05 5.15.0-1072-aws x86_64\n"
        "dkms nvidia 550.127.05 5.15.0-1073-aws x86_64\n"
        "grub default=0\n"
        "grub linux /boot/vmlinuz-5.15.0-1073-aws\n"
    )
    return raw


# H200 profile -> (H100 80GB profile, memory GiB); same ids, SMs and placements.
H100_80GB = {
    "1g.18gb": ("1g.10gb", "9.75"),
    "1g.18gb+me": ("1g.10gb+me", "9.75"),
    "1g.35gb": ("1g.20gb", "19.62"),
    "2g.35gb": ("2g.20gb", "19.62"),
    "3g.71gb": ("3g.40gb", "39.50"),
    "4g.71gb": ("4g.40gb", "39.50"),
    "7g.141gb": ("7g.80gb", "79.25"),
}


def lgip_for(real_lgip: str, gpus: int, names: dict[str, tuple[str, str]]) -> str:
    lines = real_lgip.split("\n")
    block = lines[5:26]  # GPU 0's 7 profiles x 3 lines in the real table
    head, tail = lines[:5], ["# exit=0", ""]
    rows = []
    for i in range(gpus):
        for line in block:
            m = re.match(r"^\|   0  MIG (\S+)(\s+\d+\s+\d+/\d+\s+)(\S+)(.*)$", line)
            if m:
                name, mem = names[m[1]]
                pad = len(m[1]) - len(name)
                mem_pad = len(m[3]) - len(mem)
                line = f"|{i:>4}  MIG {name}{' ' * pad}{m[2]}{mem}{' ' * mem_pad}{m[4]}"
            rows.append(line)
    return "\n".join(head + rows + tail)


def lgipp_for(real_lgipp: str, gpus: int) -> str:
    gpu0 = [ln for ln in real_lgipp.splitlines() if ln.startswith("GPU  0 ")]
    rows = [ln.replace("GPU  0 ", f"GPU {i:>2} ", 1) for i in range(gpus) for ln in gpu0]
    return ok("\n".join(rows))


def a100x8() -> Raw:
    host = Host(
        gpus=hgx("b2", 0x20B2, "NVIDIA A100-SXM4-80GB", 81920, "8.0", "Ampere", 4, 0x147F, 400),
        nvswitch_ids=tuple((f"0000:{0x0B + i:02x}:00.0", 0x1AF1) for i in range(6)),
        driver="535.216.01",
        open_modules=False,
        cuda="12.2",
        nvlinks_per_gpu=12,
        link_speed="25.000",
        os_release=UBUNTU_2204,
        uname="5.15.0-125-generic",
    )
    raw = build(host, real())
    # The real H200's MIG profile tables do not describe an A100: drop them.
    for name in ("lgip", "lgipp"):
        raw.pop(f"nvidia-smi-mig-{name}.txt")
    return raw


def l40s() -> Raw:
    host = Host(
        gpus=hgx(
            "c3", 0x26B9, "NVIDIA L40S", 46068, "8.9", "Ada Lovelace", 4, 0x1851, 350, count=4
        ),
        driver="535.261.03",
        open_modules=False,
        cuda="12.2",
        nvlinks_per_gpu=0,
        mig_capable=False,
        os_release=DEBIAN_12,
        uname="6.1.0-41-amd64",
    )
    raw = build(host, real())
    # No NVLink: nvidia-smi lists the GPUs and no links.
    raw["nvidia-smi-nvlink-s.txt"] = smi_list(host)
    raw["nvidia-smi-nvlink-e.txt"] = smi_list(host)
    # Kernel update, not covered: unattended-upgrades installed linux-image-6.1.0-42-amd64
    # (Debian's linux-image-amd64 does not pull headers), so DKMS built nothing for it, and
    # GRUB boots it next (entry 0 of the generated menu).
    raw["kernels.txt"] = ok(
        "running 6.1.0-41-amd64\n"
        "kernel 6.1.0-41-amd64 vmlinuz=yes headers=yes\n"
        "module 6.1.0-41-amd64 /lib/modules/6.1.0-41-amd64/updates/dkms/nvidia-current.ko "
        "version=535.261.03 signer=-\n"
        "kernel 6.1.0-42-amd64 vmlinuz=yes headers=no\n"
        "dkms nvidia-current 535.261.03 6.1.0-41-amd64 x86_64\n"
        "grub default=0\n"
        "grub linux /boot/vmlinuz-6.1.0-42-amd64\n"
    )
    return raw


def v100() -> Raw:
    host = Host(
        gpus=hgx("d4", 0x1DB5, "Tesla V100-SXM2-32GB", 32768, "7.0", "Volta", 3, 0x1249, 300),
        driver="535.261.03",
        open_modules=False,
        cuda="12.2",
        nvlinks_per_gpu=6,
        link_speed="25.781",
        mig_capable=False,
        os_release=UBUNTU_2204,
        uname="5.15.0-125-generic",
    )
    return build(host, real())


def no_driver() -> Raw:
    """The real H200 host before any driver: GPUs only on the PCI bus."""
    raw = real()
    host = Host(
        gpus=tuple(
            Gpu(a, 0x2335, "NVIDIA H200", "", 143771, "9.0", "Hopper", 5, subsys=0x18BF, numa=-1)
            for a in ("0000:00:06.0", "0000:00:07.0")
        ),
        driver=None,
    )
    out = build(host, raw)
    # Keep the real VM's bus (virtio devices, no NUMA), only unbind the GPUs.
    out["sysfs-pci-devices.txt"] = raw["sysfs-pci-devices.txt"].replace("driver=nvidia", "driver=")
    return out


def unknown_id() -> Raw:
    """A GPU id the catalog cannot know (0x2ffe), no driver yet."""
    out = no_driver()
    out["sysfs-pci-devices.txt"] = out["sysfs-pci-devices.txt"].replace(
        "device=0x2335", "device=0x2ffe"
    )
    return out


def faults() -> Raw:
    """The real H200 host with the faults validation must catch, one of each kind."""
    raw = real()
    host = Host(
        gpus=(
            Gpu(
                "0000:00:06.0",
                0x2335,
                "NVIDIA H200",
                "GPU-404dd017-98bf-f070-ceff-12f79a8cb0a0",
                143771,
                "9.0",
                "Hopper",
                5,
                numa=-1,
                subsys=0x18BF,
            ),
            Gpu(
                "0000:00:07.0",
                0x2335,
                "NVIDIA H200",
                "GPU-e11afe21-b50a-0dfa-6d85-b891d5fb40e6",
                143771,
                "9.0",
                "Hopper",
                5,
                numa=-1,
                subsys=0x18BF,
                cur_gen=4,
                cur_width=8,
            ),
        ),
    )
    raw["sysfs-pci-devices.txt"] = raw["sysfs-pci-devices.txt"].replace(
        "0000:00:07.0 vendor=0x10de device=0x2335 class=0x030200 subsystem_vendor=0x10de "
        'subsystem_device=0x18bf current_link_speed="32.0 GT/s PCIe" current_link_width=16',
        "0000:00:07.0 vendor=0x10de device=0x2335 class=0x030200 subsystem_vendor=0x10de "
        'subsystem_device=0x18bf current_link_speed="16.0 GT/s PCIe" current_link_width=8',
    )
    raw["nvidia-smi-query-gpu.csv"] = query_csv(
        host,
        raw["nvidia-smi-query-gpu.csv"],
        {
            0: {
                "ecc.errors.uncorrected.volatile.total": "2",
                "remapped_rows.pending": "Yes",
                "clocks_event_reasons.active": "0x0000000000000008",
            },
            1: {"persistence_mode": "Disabled", "remapped_rows.failure": "Yes"},
        },
    )
    raw["nvidia-smi-q.txt"] = smi_q(
        host,
        raw["nvidia-smi-q.txt"],
        {
            0: {
                ("ECC Errors", "Volatile", "DRAM Uncorrectable"): "2",
                ("ECC Errors", "Volatile", "SRAM Uncorrectable SEC-DED"): "1",
                ("Remapped Rows", "Pending"): "Yes",
                ("Remapped Rows", "Uncorrectable Error"): "2",
                ("Clocks Event Reasons", "Idle"): "Not Active",
                ("Clocks Event Reasons", "HW Slowdown"): "Active",
                ("GPU Virtualization Mode", "Virtualization Mode"): "Pass-Through",
            },
            1: {
                ("Fabric", "State"): "In Progress",
                ("Fabric", "Status"): "N/A",
                ("Persistence Mode",): "Disabled",
                ("Remapped Rows", "Remapping Failure Occurred"): "Yes",
                ("GPU Virtualization Mode", "Virtualization Mode"): "Pass-Through",
            },
        },
    )
    raw["nvidia-smi-nvlink-s.txt"] = nvlink_s(host, frozenset({(1, 3), (1, 4)}))
    raw["nvidia-smi-nvlink-e.txt"] = nvlink_e(
        host, {(0, 2, "Replay Errors"): 12, (1, 3, "CRC Errors"): 7}
    )
    raw["dmesg-nvidia.txt"] = ok(
        raw["dmesg-nvidia.txt"].rsplit("# exit=", 1)[0]
        + "[ 5120.331842] NVRM: Xid (PCI:0000:00:07): 79, pid=2154, name=python3, "
        "GPU has fallen off the bus.\n"
        "[ 5120.331901] NVRM: Xid (PCI:0000:00:06): 48, pid='<unknown>', name=<unknown>, "
        "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer "
        "at partition 6, subpartition 0."
    )
    raw["proc-uptime.txt"] = ok("6001.52 11890.07")
    return raw


MIG_LGI = """+-------------------------------------------------------+
| GPU instances:                                        |
| GPU   Name             Profile  Instance   Placement  |
|                          ID       ID       Start:Size |
|=======================================================|
{rows}
+-------------------------------------------------------+"""
MIG_LCIP = (
    "+"
    + "-" * 86
    + "+\n"
    + """| Compute instance profiles:                                                           |
| GPU     GPU       Name             Profile  Instances   Exclusive       Shared       |
|       Instance                       ID     Free/Total     SM       DEC   ENC   OFA  |
|         ID                                                          CE    JPEG       |
|======================================================================================|
{rows}
"""
    + "+"
    + "-" * 86
    + "+"
)
MIG_LCI = """+--------------------------------------------------------------------+
| Compute instances:                                                 |
| GPU     GPU       Name             Profile   Instance   Placement  |
|       Instance                       ID        ID       Start:Size |
|         ID                                                         |
|====================================================================|
{rows}
+--------------------------------------------------------------------+"""


def boxed(content: str, width: int) -> str:
    """A table row padded to the border's width, closed with "|"."""
    return content.ljust(width - 1)[: width - 1] + "|"


def mig() -> Raw:
    """GPU 0 of the real host in MIG mode with 3g.71gb + 2g.35gb + 1g.18gb x2 (modelled)."""
    raw = real()
    layout = (
        (9, "3g.71gb", 2, 0, 4, 60),
        (14, "2g.35gb", 3, 4, 2, 32),
        (19, "1g.18gb", 9, 6, 1, 16),
        (19, "1g.18gb", 10, 7, 1, 16),
    )
    lgi = [
        boxed(f"|   0  MIG {name:<13}{pid:>6}{gi:>9}{start:>11}:{size}", 57)
        for pid, name, gi, start, size, _ in layout
    ]
    raw["nvidia-smi-mig-lgi.txt"] = ok(MIG_LGI.format(rows="\n".join(lgi)))
    lcip, lci = [], []
    for _, name, gi, _, _, sm in layout:
        # each GPU instance holds one compute instance of its full size (`-cgi ... -C`):
        # CI profile id 0/1/2/3/4 for 1/2/3/4/7 compute slices, placement in compute slices
        slices = int(name.split("g.")[0])
        ci_profile = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}[slices]
        lcip.append(
            boxed(
                f"|   0  {gi:>5}       MIG {name:<14}{ci_profile:>5} {0:>6}/1 "
                f"{sm:>12}{slices:>10}{0:>6}{0:>6}",
                88,
            )
        )
        lcip.append(boxed(f"|{'':>68}{slices:>2}{slices:>6}", 88))
        lcip.append("+" + "-" * 86 + "+")
        lci.append(
            boxed(f"|   0  {gi:>5}       MIG {name:<14}{ci_profile:>6}{0:>10}{0:>11}:{slices}", 70)
        )
    raw["nvidia-smi-mig-lcip.txt"] = ok(MIG_LCIP.format(rows="\n".join(lcip[:-1])))
    raw["nvidia-smi-mig-lci.txt"] = ok(MIG_LCI.format(rows="\n".join(lci)))
    lgip = raw["nvidia-smi-mig-lgip.txt"]
    for pid, free in (
        (19, "0/7"),
        (20, "0/1"),
        (15, "0/4"),
        (14, "0/3"),
        (9, "0/2"),
        (5, "0/1"),
        (0, "0/1"),
    ):
        lgip = re.sub(rf"(\|   0  MIG \S+\s+{pid}\s+)\d+/\d+", rf"\g<1>{free}", lgip)
    raw["nvidia-smi-mig-lgip.txt"] = lgip
    raw["nvidia-smi-L.txt"] = ok(
        "GPU 0: NVIDIA H200 (UUID: GPU-404dd017-98bf-f070-ceff-12f79a8cb0a0)\n"
        + "\n".join(
            f"  MIG {name:<12}Device  {i}: (UUID: MIG-0a1b2c3d-0000-5000-8000-00000000000{i})"
            for i, (_, name, *_rest) in enumerate(layout)
        )
        + "\nGPU 1: NVIDIA H200 (UUID: GPU-e11afe21-b50a-0dfa-6d85-b891d5fb40e6)"
    )
    csv = raw["nvidia-smi-query-gpu.csv"].split("\n")
    csv[1] = csv[1].replace("143771 MiB, Disabled, Disabled", "143771 MiB, Enabled, Enabled")
    raw["nvidia-smi-query-gpu.csv"] = "\n".join(csv)
    return raw


VARIANTS: dict[str, Callable[[], Raw]] = {
    "h100x8-nvswitch4-ubuntu2204-550": h100x8,
    "a100x8-nvswitch6-ubuntu2204-535": a100x8,
    "l40sx4-debian12-535": l40s,
    "v100x8-ubuntu2204-535": v100,
    "h200x2-nodriver": no_driver,
    "unknown-id-nodriver": unknown_id,
    "h200x2-faults": faults,
    "h200x2-mig": mig,
}
REAL_RAW = real()


def render() -> dict[str, Raw]:
    return {name: make() for name, make in VARIANTS.items()}


def write(root: Path = HERE) -> None:
    for name, raw in render().items():
        target = root / name
        target.mkdir(exist_ok=True)
        for old in target.iterdir():
            old.unlink()
        for file, text in raw.items():
            (target / file).write_text(text)


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
