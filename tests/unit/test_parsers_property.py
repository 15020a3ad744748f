"""Every parser in orchestrator/parsers/ against random, truncated, binary and huge inputs.

A parser may return its typed result or raise ParseError; any other exception, or a run
longer than the time bound, is a bug (a hung `provision plan --facts` on a broken capture).
The seeds are the real 2x H200 captures (tests/recorded/fixtures/real/).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.parsers import ParseError, names, parse_host
from orchestrator.parsers.converged import parse_record, parse_records
from orchestrator.parsers.dcgm_diag import parse_dcgm_diag
from orchestrator.parsers.driver_version import parse_driver_version, parse_nvrm_line
from orchestrator.parsers.fabric import parse_fi_info, parse_ibstatus, parse_rdma
from orchestrator.parsers.infiniband import parse_infiniband_vpd, parse_pci_vpd
from orchestrator.parsers.kernel_log import parse_kernel_log
from orchestrator.parsers.kernels import parse_kernels
from orchestrator.parsers.mig import parse_lci, parse_lgi, parse_lgip, parse_lgipp
from orchestrator.parsers.nccl_tests import parse_nccl_tests
from orchestrator.parsers.nvlink import parse_nvlink_errors, parse_nvlink_status
from orchestrator.parsers.os_release import parse_os_release
from orchestrator.parsers.packages import parse_dpkg_query, parse_rpm_query
from orchestrator.parsers.proc_modules import parse_proc_modules
from orchestrator.parsers.reboot import parse_reboot_pending
from orchestrator.parsers.recovery import parse_recovery
from orchestrator.parsers.runtime import (
    parse_cdi_specs,
    parse_ctk_version,
    parse_daemon_json,
    parse_docker_info,
)
from orchestrator.parsers.secure_boot import parse_secure_boot
from orchestrator.parsers.services import parse_services
from orchestrator.parsers.smi_list import parse_smi_list
from orchestrator.parsers.smi_q import fabric_states, parse_smi_q, parse_tree
from orchestrator.parsers.smi_query_gpu import parse_query_gpu
from orchestrator.parsers.smi_version import parse_smi_version
from orchestrator.parsers.sysfs_pci import parse_pci_line, parse_sysfs_pci
from orchestrator.parsers.topo import parse_topo

REAL = Path(__file__).resolve().parents[1] / "recorded" / "fixtures" / "real"
REAL_HOST = REAL / "h200x2-ubuntu2404-580"

# parser, the real capture that seeds it (None: no real capture of that tool)
PARSERS: dict[str, tuple[Callable[[str], Any], str | None]] = {
    "parse_driver_version": (parse_driver_version, names.PROC_DRIVER_VERSION),
    "parse_nvrm_line": (parse_nvrm_line, names.PROC_DRIVER_VERSION),
    "parse_kernel_log": (parse_kernel_log, names.KERNEL_LOG),
    "parse_lgip": (parse_lgip, names.SMI_MIG_LGIP),
    "parse_lgipp": (parse_lgipp, names.SMI_MIG_LGIPP),
    "parse_lgi": (parse_lgi, names.SMI_MIG_LGI),
    "parse_lci": (parse_lci, names.SMI_MIG_LGI),
    "parse_nccl_tests": (parse_nccl_tests, "nccl-tests-all_reduce_perf.txt"),
    "parse_nvlink_status": (parse_nvlink_status, names.SMI_NVLINK_S),
    "parse_nvlink_errors": (parse_nvlink_errors, names.SMI_NVLINK_E),
    "parse_os_release": (parse_os_release, names.OS_RELEASE),
    "parse_dpkg_query": (parse_dpkg_query, None),
    "parse_rpm_query": (parse_rpm_query, None),
    "parse_proc_modules": (parse_proc_modules, names.PROC_MODULES),
    "parse_docker_info": (parse_docker_info, None),
    "parse_daemon_json": (parse_daemon_json, None),
    "parse_cdi_specs": (parse_cdi_specs, None),
    "parse_ctk_version": (parse_ctk_version, None),
    "parse_secure_boot": (parse_secure_boot, None),
    "parse_infiniband_vpd": (parse_infiniband_vpd, None),
    # no real capture of these (tests/unit/data/fabric-shaped/ is shaped, not recorded)
    "parse_rdma": (parse_rdma, None),
    "parse_recovery": (parse_recovery, None),
    "parse_reboot_pending": (parse_reboot_pending, None),
    "parse_fi_info": (parse_fi_info, None),
    "parse_ibstatus": (parse_ibstatus, None),
    # dcgmi diag -j: JSON shapes from NVIDIA/DCGM's source (tests/recorded/reference/dcgm.yaml)
    "parse_dcgm_diag": (parse_dcgm_diag, None),
    "parse_pci_vpd": (parse_pci_vpd, None),
    "parse_kernels": (parse_kernels, None),
    "parse_services": (parse_services, None),
    "parse_smi_list": (parse_smi_list, names.SMI_L),
    "parse_tree": (parse_tree, names.SMI_Q),
    "fabric_states": (fabric_states, names.SMI_Q),
    "parse_smi_q": (parse_smi_q, names.SMI_Q),
    "parse_query_gpu": (parse_query_gpu, names.SMI_QUERY_GPU),
    "parse_smi_version": (parse_smi_version, names.SMI_VERSION),
    "parse_pci_line": (parse_pci_line, names.SYSFS_PCI),
    "parse_sysfs_pci": (parse_sysfs_pci, names.SYSFS_PCI),
    "parse_topo": (parse_topo, names.SMI_TOPO),
    "parse_host": (lambda text: parse_host("h", {names.SYSFS_PCI: text}), names.SYSFS_PCI),
    "parse_record": (lambda text: parse_record("docker", text, text), None),
    "parse_records": (
        lambda text: parse_records({"converged-mig.json": text, "converged-mig-live.txt": text}),
        None,
    ),
}

# CPU time of this process, not wall-clock: an oversubscribed machine does not make these fail.
BOUND_S = 2.0  # any one call on any input (catastrophic backtracking would pass it)
SCALE, RATIO = 10, 20  # linear: 10x the input within 20x the time


def _seed(name: str) -> str:
    file = PARSERS[name][1]
    if file is None or not (REAL_HOST / file).is_file():
        return ""
    return (REAL_HOST / file).read_text(encoding="utf-8", errors="replace")


def _cpu(name: str, text: str) -> float:
    parser = PARSERS[name][0]
    start = time.process_time()
    with contextlib.suppress(ParseError):
        parser(text)
    return time.process_time() - start


def _feed(name: str, text: str) -> None:
    took = _cpu(name, text)
    assert took < BOUND_S, f"{name} took {took:.2f} s of CPU on {len(text)} characters"


@pytest.mark.parametrize("name", sorted(n for n, (_, file) in PARSERS.items() if file))
def test_every_parser_is_linear(name: str) -> None:
    """10x the input within 20x the time (best of three each: the timer's noise). The base is
    the real capture 4 times over: one capture parses in about a millisecond, where a busy
    machine's timer noise alone broke the ratio (parse_smi_q: 0.001 s once, 0.035 s 10x)."""
    seed = "\n".join([_seed(name)] * 4)
    once = min(_cpu(name, seed) for _ in range(3))
    scaled = min(_cpu(name, "\n".join([seed] * SCALE)) for _ in range(3))
    assert scaled <= RATIO * once + 0.01, (
        f"{name}: {SCALE}x the input took {scaled:.3f} s, once {once:.3f} s: not linear"
    )


def test_every_parser_is_listed() -> None:
    """A new parse_* function must join the property test."""
    import importlib
    import pkgutil

    import orchestrator.parsers as pkg

    found = set()
    for mod in pkgutil.iter_modules(pkg.__path__):
        module = importlib.import_module(f"orchestrator.parsers.{mod.name}")
        found |= {
            n
            for n, obj in vars(module).items()
            if (n.startswith("parse_") or n == "fabric_states")
            and callable(obj)
            and getattr(obj, "__module__", "") == module.__name__
        }
    assert found <= set(PARSERS), f"not in the property test: {sorted(found - set(PARSERS))}"


# No example database: no .hypothesis/ directory in the checkout, each run draws afresh.
_FAST = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    database=None,
)


@pytest.mark.parametrize("name", sorted(PARSERS))
@_FAST
@given(text=st.text(max_size=400))
def test_random_text(name: str, text: str) -> None:
    _feed(name, text)


@pytest.mark.parametrize("name", sorted(PARSERS))
@_FAST
@given(data=st.binary(max_size=400))
def test_binary(name: str, data: bytes) -> None:
    _feed(name, data.decode("utf-8", errors="replace"))
    _feed(name, data.decode("latin-1"))


@pytest.mark.parametrize("name", sorted(PARSERS))
@_FAST
@given(cut=st.floats(min_value=0.0, max_value=1.0), noise=st.text(max_size=20))
def test_truncated_real_capture(name: str, cut: float, noise: str) -> None:
    seed = _seed(name)
    at = int(len(seed) * cut)
    _feed(name, seed[:at])
    _feed(name, seed[:at] + noise + seed[at:])


@pytest.mark.parametrize("name", sorted(PARSERS))
@pytest.mark.parametrize(
    "filler",
    [
        "a" * 80_000,  # one 80 kB word: the quadratic case of a key=value scanner
        "a=" * 40_000,
        '"' + "x " * 40_000,
        " " * 80_000,
        "|" * 80_000,
        "GPU 0: " + "x" * 80_000,
        "0000:00:01.0 " + "vendor=0x10de" * 6_000,
    ],
    ids=["word", "pairs", "quote", "spaces", "bars", "gpu", "pci"],
)
def test_huge_line(name: str, filler: str) -> None:
    _feed(name, filler + "\n")
    _feed(name, _seed(name) + filler)


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_many_lines(name: str) -> None:
    seed = _seed(name) or "x y z\n"
    _feed(name, seed * max(1, 400_000 // max(1, len(seed))))
