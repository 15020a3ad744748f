"""The multi-node all-reduce: this host's share of the ranks of one collective across hosts.

The orchestrator plans the run (orchestrator/validate/multinode.py) and starts this payload on
every host at once with the host's slice of the ranks (`spec["multinode"]`): global ranks
`rank_base .. rank_base + count - 1`, the rendezvous address and port of the first host, the
backend (NCCL on GPUs, gloo on the CPU in the lab) and, for NCCL, the GPU of each local rank.
Each local rank is one worker process (workers.run_workers: its messages, its deadline, the
kill of what is left), and every rank runs the same exact-value sweep as the single-node
check (allreduce.allreduce_sweep), so a wrong sum is seen wherever it happens.

`addresses()` is the step before: what this host is (machine id, boot id) and its IPv4
interfaces, plus a TCP port free here now, for the rendezvous (standard library only: it runs
before anyone knows whether torch is there).
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
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
