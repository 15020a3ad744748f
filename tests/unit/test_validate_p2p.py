"""Per-pair P2P copy judgment and NUMA selection, from the real `nvidia-smi topo -m` capture
(2x H200, NV18) and from pair figures around the Azure floor."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from payloadpkg import load_payload

from orchestrator.factsdir import load_host
from orchestrator.parsers import names
from orchestrator.validate import runner
from orchestrator.validate.p2p import PairCopy, check_p2p, nvlink_pairs

REAL = Path(__file__).resolve().parents[2] / "tests/recorded/fixtures/real/h200x2-ubuntu2404-580"
gpucheck = load_payload()
TOPO = dict(load_host(REAL))[names.SMI_TOPO]


def all_pairs(n: int, gbs: float = 380.0, **slow: float) -> list[PairCopy]:
    """Every ordered pair at `gbs`; slow={"1-2": 120.0} sets one pair."""
    return [PairCopy(i, j, slow.get(f"{i}-{j}", gbs)) for i in range(n) for j in range(n) if i != j]


def nvswitch(n: int) -> dict[tuple[int, int], int]:
    return {(i, j): 18 for i in range(n) for j in range(n) if i != j}


def test_nvlink_pairs_from_the_real_topology() -> None:
    assert nvlink_pairs(TOPO) == {(0, 1): 18, (1, 0): 18}


def test_healthy_nvlink_pairs_pass_the_floor() -> None:
    results = check_p2p(all_pairs(2), 2, nvlink_pairs(TOPO), 335.0, host="h")
    assert [(r.gpu, r.status, r.value, r.limit) for r in results] == [
        (0, "pass", 380.0, 335.0),
        (1, "pass", 380.0, 335.0),
    ]


def test_one_slow_link_is_named_as_a_link() -> None:
    results = check_p2p(
        all_pairs(8, **{"2-5": 150.0, "5-2": 151.0}), 8, nvswitch(8), 335.0, host="h"
    )
    bad = [r for r in results if r.status == "fail"]
    assert [r.gpu for r in bad] == [2, 5]
    assert "bad link(s): GPU 2 <-> GPU 5" in bad[0].diagnosis
    assert "GPU 2 -> GPU 5 150.0 GB/s (NV18, below the floor 335.0 GB/s)" in bad[0].diagnosis


def test_a_gpu_slow_with_every_peer_is_named_as_the_gpu() -> None:
    slow = {f"{3}-{j}": 100.0 for j in range(8) if j != 3} | {
        f"{j}-{3}": 100.0 for j in range(8) if j != 3
    }
    results = check_p2p(all_pairs(8, **slow), 8, nvswitch(8), 335.0, host="h")
    assert all(
        "bad GPU(s) or their NVLinks: GPU 3" in r.diagnosis for r in results if r.status == "fail"
    )
    assert {r.gpu for r in results if r.status == "fail"} == set(range(8))


def test_without_a_floor_an_outlier_still_fails_and_the_rest_warn() -> None:
    results = check_p2p(all_pairs(4, **{"0-1": 200.0}), 4, nvswitch(4), None, host="h")
    status = {r.gpu: r.status for r in results}
    assert status == {0: "fail", 1: "warn", 2: "warn", 3: "warn"}
    assert "below 80% of the median nv pair 380.0" in results[0].diagnosis


def test_pcie_pairs_have_no_floor_and_only_warn() -> None:
    results = check_p2p(all_pairs(2, gbs=25.0), 2, {}, 335.0, host="h")
    assert {r.status for r in results} == {"warn"}
    assert "PCIe" in results[0].diagnosis


def test_no_pairs_measured_on_several_gpus_fails_and_one_gpu_skips() -> None:
    assert check_p2p([], 2, {}, 335.0, host="h")[0].status == "fail"
    assert check_p2p([], 1, {}, 335.0, host="h")[0].status == "skip"


# ---- NUMA selection -----------------------------------------------------------------------


def test_numa_affinity_from_the_real_topology() -> None:
    assert runner.numa_affinity(TOPO) == {
        "0": {"cpus": "0-31", "node": "0"},
        "1": {"cpus": "0-31", "node": "0"},
    }


def test_numa_affinity_of_a_host_without_topology() -> None:
    assert runner.numa_affinity(None) == {}
    assert runner.numa_affinity("# exit=9\n") == {}


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0-31", set(range(32))),
        ("0-3,8-9", {0, 1, 2, 3, 8, 9}),
        ("48-95,144-191", set(range(48, 96)) | set(range(144, 192))),
    ],
)
def test_cpu_lists(text: str, cpus: set[int]) -> None:
    assert gpucheck.numa.parse_cpulist(text) == cpus


def test_bind_numa_pins_to_the_gpus_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    pinned: list[set[int]] = []
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cpus: pinned.append(set(cpus)))
    monkeypatch.setattr(gpucheck.numa, "_prefer_node", lambda node: "")
    r = gpucheck.numa.bind_numa(1, {"1": {"cpus": "32-63", "node": "1"}})
    assert r["status"] == "pass" and r["value"] == "cpus 32-63, node 1"
    assert pinned == [set(range(32, 64))]


def test_bind_numa_outside_the_allowed_cpus_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    r = gpucheck.numa.bind_numa(0, {"0": {"cpus": "48-95", "node": "1"}})
    assert r["status"] == "warn" and "cpuset" in r["diagnosis"]
    assert gpucheck.numa.bind_numa(0, {})["status"] == "skip"


def test_the_spec_carries_numa_and_p2p_for_the_real_host() -> None:
    from orchestrator.catalog import default_catalog
    from orchestrator.parsers import parse_host
    from orchestrator.policy import load_policy

    raw = dict(load_host(REAL))
    t = runner.payload_target(
        parse_host("h200", raw), raw, default_catalog(), load_policy("h200", {})
    )
    assert t.spec["numa"]["1"] == {"cpus": "0-31", "node": "0"}
    assert t.spec["p2p"]["enabled"] is True
    assert t.nvlinks == {(0, 1): 18, (1, 0): 18}
    assert t.p2p_floor is not None and t.p2p_floor.floor == 335.0
