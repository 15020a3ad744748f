"""The multi-node all-reduce: this host's share of the ranks of one collective across hosts.

The orchestrator plans the run (orchestrator/validate/multinode.py) and starts this payload on
every host at once with the host's slice of the ranks (`spec["multinode"]`): global ranks
`rank_base .. rank_base + count - 1`, the rendezvous address and port of the first host, the
backend (NCCL on GPUs, gloo on the CPU in the lab) and, for NCCL, the GPU of each local rank.
Each local rank is one worker process (workers.run_workers: its messages, its deadline, the
kill of what is left), and every rank runs the same exact-value sweep as the single-node
check (allreduce.allreduce_sweep), so a wrong sum is seen wherever it happens.

NCCL's own log says which network it took ("Using network <name>"): where the orchestrator
asks for it (NCCL_DEBUG in the spec's env), `start_nccl_log` points NCCL_DEBUG_FILE at a
directory of this run and `collect_nccl_log` sends back the lines naming the network. The CPU
stand-in (gloo, the lab) writes that line itself, naming the network NCCL would take on this
host (`stand_in_network`), so the lab's fabric hosts are judged the same way.

`addresses()` is the step before: what this host is (machine id, boot id) and its IPv4
interfaces, plus a TCP port free here now, for the rendezvous (standard library only: it runs
before anyone knows whether torch is there).
"""

from __future__ import annotations

import fcntl
import glob
import os
import shutil
import socket
import struct
import tempfile
from typing import Any

from .allreduce import allreduce_sweep
from .workers import Reporter

PHASES = ("start", "torch_import", "rendezvous", "allreduce_sweep", "done")
SIOCGIFADDR = 0x8915  # <linux/sockios.h>
SIOCGIFNETMASK = 0x891B


def worker(
    local: int, count: int, spec: dict[str, Any], port: int, conn: Any, t0: float, go: Any
) -> None:
    """One rank (run_workers' target signature; `port` is unused: the rendezvous port is the
    first host's, in the spec)."""
    del count, port, go  # the multi-node spec carries the world; no peer copies to wait for
    mn = spec["multinode"]
    rank = int(mn["rank_base"]) + local
    rep = Reporter(conn, local, t0)
    try:
        rep.phase("torch_import")
        import datetime

        import torch
        import torch.distributed as dist

        if mn["backend"] == "nccl":
            device = torch.device("cuda", int(mn["gpus"][local]))
            torch.cuda.set_device(device)
        else:
            device = torch.device("cpu")
            torch.set_num_threads(1)  # one core per rank: the lab's hosts share a few
        rep.phase("rendezvous")
        # The store waits longer than a collective op: hosts finish importing torch at
        # different times (tens of seconds apart on a loaded machine); once every rank has
        # joined, an op that waits on a vanished peer raises after collective_timeout_s.
        store = dist.TCPStore(
            str(mn["master_addr"]),
            int(mn["master_port"]),
            int(mn["world"]),
            rank == 0,
            timeout=datetime.timedelta(seconds=float(mn["rendezvous_timeout_s"])),
        )
        dist.init_process_group(
            mn["backend"],
            store=store,
            rank=rank,
            world_size=int(mn["world"]),
            timeout=datetime.timedelta(seconds=float(mn["collective_timeout_s"])),
        )
        if mn["backend"] != "nccl":
            stand_in_log(stand_in_network(mn.get("stand_in") or {}), mn.get("log_line") or "")
        rep.phase("allreduce_sweep")
        allreduce_sweep(
            torch,
            dist,
            rank,
            int(mn["world"]),
            spec["allreduce"],
            rep.point if local == 0 else None,
            device=device,
        )
        dist.destroy_process_group()
        rep.phase("done")
        rep.done("")
    except Exception as exc:  # a worker must always answer, or the parent waits for nothing
        rep.done(f"{type(exc).__name__}: {exc}")


def _ioctl_ipv4(sock: socket.socket, request: int, name: str) -> str | None:
    try:
        packed = fcntl.ioctl(sock.fileno(), request, struct.pack("256s", name[:15].encode()))
    except OSError:
        return None  # no IPv4 address on this interface
    return socket.inet_ntoa(packed[20:24])


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def addresses() -> dict[str, Any]:
    """This host's identity, IPv4 interfaces (name, address, netmask) and a free TCP port."""
    interfaces = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _index, name in socket.if_nameindex():
            addr = _ioctl_ipv4(sock, SIOCGIFADDR, name)
            if addr is not None:
                mask = _ioctl_ipv4(sock, SIOCGIFNETMASK, name) or "255.255.255.255"
                interfaces.append({"name": name, "address": addr, "netmask": mask})
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        port = int(probe.getsockname()[1])
    return {
        "machine_id": _read("/etc/machine-id"),
        "boot_id": _read("/proc/sys/kernel/random/boot_id"),
        "hostname": socket.gethostname(),
        "interfaces": interfaces,
        "free_port": port,
        "pid": os.getpid(),
    }


# --- NCCL's log of the network it took ------------------------------------------------------


def start_nccl_log(env: dict[str, str]) -> str | None:
    """Where NCCL asked for its INFO log (NCCL_DEBUG in the spec's env): a directory of this
    run for NCCL_DEBUG_FILE (%h hostname, %p pid: one file per rank process)."""
    if not env.get("NCCL_DEBUG"):
        return None
    path = tempfile.mkdtemp(prefix="gpuprov-nccl-log.")
    os.environ["NCCL_DEBUG_FILE"] = os.path.join(path, "nccl.%h.%p")
    return path


def collect_nccl_log(path: str, needle: str, limit: int = 64) -> list[str]:
    """The distinct lines of the ranks' logs that contain `needle`; the directory removed."""
    found: dict[str, None] = {}
    try:
        for name in sorted(glob.glob(os.path.join(path, "nccl.*"))):
            with open(name, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    if needle and needle in line and len(found) < limit:
                        found[line.rstrip("\n").split(" ", 1)[-1]] = None
    except OSError:
        pass
    shutil.rmtree(path, ignore_errors=True)
    return list(found)


def _active_hcas(root: str = "/sys/class/infiniband") -> list[str]:
    out = []
    for dev in sorted(glob.glob(os.path.join(root, "*"))):
        for state in glob.glob(os.path.join(dev, "ports", "*", "state")):
            try:
                with open(state, encoding="utf-8") as fh:
                    if "ACTIVE" in fh.read():
                        out.append(os.path.basename(dev))
                        break
            except OSError:
                continue
    return out


def stand_in_network(stand_in: dict[str, Any], root: str = "/sys/class/infiniband") -> str:
    """The network NCCL would take on this host, for the CPU stand-in. NCCL's order: an
    external net plugin, then its own IB, then Socket (NVIDIA/nccl src/plugin/net.cc); a
    plugin library (`stand_in["plugin_libraries"]`, named `plugin_name`) on the library
    path; IB where an HCA that NCCL_IB_HCA allows has an ACTIVE port (NCCL's IB skips the
    others); else Socket."""
    for directory in filter(None, os.environ.get("LD_LIBRARY_PATH", "").split(":")):
        for lib in stand_in.get("plugin_libraries") or ():
            if os.path.exists(os.path.join(directory, str(lib))):
                return str(stand_in.get("plugin_name") or "plugin")
    allowed = os.environ.get("NCCL_IB_HCA", "").lstrip("=")
    names = [n for n in allowed.split(",") if n]
    active = _active_hcas(root)
    if any(not names or n in names for n in active):
        return str(stand_in.get("ib_name") or "IB")
    return str(stand_in.get("socket_name") or "Socket")


def stand_in_log(network: str, needle: str) -> None:
    """Writes NCCL's line for the network, in NCCL's layout, where NCCL would write it."""
    path = os.environ.get("NCCL_DEBUG_FILE")
    if not path or not needle:
        return
    host, pid = socket.gethostname(), os.getpid()
    path = path.replace("%h", host).replace("%p", str(pid))
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(f"{host}:{pid}:{pid} [0] {needle}{network}\n")
