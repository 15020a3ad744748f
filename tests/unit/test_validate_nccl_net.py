"""Which network NCCL ran over in the multi-node all-reduce (orchestrator/validate/nccl_net.py,
the payload's NCCL log and its CPU stand-in; issue 47).

Facts are the parsed host captures of tests/unit/test_fabric.py (a p5 with 32 EFA devices and
the plugin; the shaped 8-HCA InfiniBand host). NCCL's log lines are written in NCCL's own
layout ("<host>:<pid>:<tid> [<dev>] NCCL INFO <message>", NVIDIA/nccl src/debug.cc) with the
messages multinode.yaml records from NCCL's and aws-ofi-nccl's code."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest
from test_fabric import PLUGIN, efa_rdma, host, shaped

from orchestrator.validate import multinode as mn
from orchestrator.validate import nccl_net

NET = nccl_net.load_nccl_net()
EFA = host(efa=32, rdma=efa_rdma())
IB = host(rdma=shaped("rdma-ib.txt"))
PLAIN = host()
payload = importlib.import_module("orchestrator.validate.payload.gpucheck.multinode")


def log(*networks: str) -> list[str]:
    return [f"n1:4242:4242 [0] {NET.using_line}{name}" for name in networks]


def seen(*networks: str) -> tuple[str, ...]:
    return nccl_net.networks_in_log(log(*networks), NET)


def test_the_names_and_line_are_ncclss_and_the_plugins() -> None:
    assert NET.using_line == "NCCL INFO Using network "
    assert NET.expected == {"efa": ("Libfabric", "AWS Libfabric"), "infiniband": ("IB",)}
    assert NET.socket == "Socket" and NET.log_env["NCCL_DEBUG"] == "INFO"
    assert seen("IB", "IB", "Socket") == ("IB", "Socket")
    assert nccl_net.networks_in_log(["NCCL INFO NET/OFI Selected provider is efa"], NET) == ()


def test_each_fabric_host_points_nccl_at_its_fabric() -> None:
    efa = nccl_net.host_net(EFA, NET)
    assert efa.kind == "efa" and efa.env["LD_LIBRARY_PATH"] == os.path.dirname(PLUGIN)
    assert efa.env["NCCL_DEBUG"] == "INFO" and efa.env["NCCL_DEBUG_SUBSYS"] == "INIT,NET"
    ib = nccl_net.host_net(IB, NET)
    assert ib.kind == "infiniband"
    assert ib.env["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_ib{n}" for n in range(8))
    plain = nccl_net.host_net(PLAIN, NET)
    assert plain.kind == "" and set(plain.env) == {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS"}


def test_sockets_on_a_fabric_host_fail_in_one_line() -> None:
    ib = nccl_net.judge("n1", nccl_net.host_net(IB, NET), seen("Socket"), NET)
    assert ib.status == "fail" and "\n" not in ib.diagnosis
    assert ib.diagnosis.startswith("n1: NCCL ran over TCP sockets (NET/Socket), not the ")
    assert "InfiniBand HCAs (NET/IB" in ib.diagnosis and "ACTIVE port" in ib.diagnosis
    efa = nccl_net.judge("n1", nccl_net.host_net(EFA, NET), seen("Socket"), NET)
    assert efa.status == "fail" and "the EFA plugin (NET/Libfabric" in efa.diagnosis
    assert os.path.dirname(PLUGIN) in efa.diagnosis


def test_the_expected_network_passes_and_plain_hosts_are_not_judged() -> None:
    assert nccl_net.judge("n1", nccl_net.host_net(IB, NET), seen("IB"), NET).status == "pass"
    efa = nccl_net.host_net(EFA, NET)
    assert nccl_net.judge("n1", efa, seen("Libfabric"), NET).status == "pass"
    assert nccl_net.judge("n1", efa, seen("AWS Libfabric"), NET).status == "pass"
    other = nccl_net.judge("n1", nccl_net.host_net(IB, NET), seen("IBext_v8"), NET)
    assert other.status == "warn" and "NET/IBext_v8" in other.diagnosis
    plain = nccl_net.host_net(PLAIN, NET)
    assert nccl_net.judge("n1", plain, seen("Socket"), NET).status == "pass"
    assert nccl_net.judge("n1", efa, None, NET).status == "warn"


def test_the_spec_carries_the_fabric_env_and_the_log_line() -> None:
    found = [mn.HostAddresses("a", "m-a", (mn.Interface("eth0", "10.0.0.2", "255.0.0.0"),), 9)]
    found.append(mn.HostAddresses("b", "m-b", (mn.Interface("eth0", "10.0.0.3", "255.0.0.0"),), 9))
    settings = mn.load_settings()
    plan = mn.plan_run(found, {"a": 8, "b": 8}, "nccl", settings)
    env = nccl_net.host_net(IB, NET).env
    spec = mn.host_spec(plan, "b", settings, env, NET.using_line)["multinode"]
    assert spec["env"]["NCCL_IB_HCA"].startswith("=mlx5_ib0,")
    assert spec["env"]["NCCL_SOCKET_IFNAME"] == settings.nccl_socket_ifname
    assert spec["log_line"] == NET.using_line


def test_merged_runs_keep_each_hosts_log_lines() -> None:
    found = [mn.HostAddresses(h, f"m-{h}", (mn.Interface("eth0", ip, "255.0.0.0"),), 9)
             for h, ip in (("a", "10.0.0.2"), ("b", "10.0.0.3"))]  # fmt: skip
    settings = mn.load_settings()
    plan = mn.plan_run(found, {"a": 2, "b": 2}, "gloo", settings)
    docs = {
        "a": {"results": [], "sweep": [], "nccl_log_lines": log("IB")},
        "b": {"results": [], "sweep": [], "nccl_log_lines": log("Socket")},
    }
    runs = {h: mn.HostRun(h, 0, d) for h, d in docs.items()}
    outcome = mn.merge_runs(plan, runs, settings)
    assert nccl_net.networks_in_log(outcome.net_lines["b"] or (), NET) == ("Socket",)
    lost = mn.merge_runs(plan, {**runs, "b": mn.HostRun("b", 255, None)}, settings)
    assert lost.net_lines["b"] is None


def _sysfs(root: Path, states: dict[str, str]) -> Path:
    for name, state in states.items():
        port = root / name / "ports" / "1"
        port.mkdir(parents=True)
        (port / "state").write_text(state + "\n")
    return root


def test_the_stand_in_names_the_network_nccl_would_take(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NCCL's order (src/plugin/net.cc): a plugin on the library path, its IB where a
    named HCA has an ACTIVE port (src/transport/net_ib/init.cc), else Socket."""
    stand_in = nccl_net.stand_in(NET)
    sysfs = _sysfs(tmp_path / "ib", {"mlx5_ib0": "4: ACTIVE", "mlx5_ib1": "4: ACTIVE"})
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    monkeypatch.setenv("NCCL_IB_HCA", "=mlx5_ib0,mlx5_ib1")
    assert payload.stand_in_network(stand_in, str(sysfs)) == "IB"
    down = _sysfs(tmp_path / "down", {"mlx5_ib0": "1: DOWN", "mlx5_ib1": "1: DOWN"})
    assert payload.stand_in_network(stand_in, str(down)) == "Socket"
    monkeypatch.setenv("NCCL_IB_HCA", "=mlx5_ib7")
    assert payload.stand_in_network(stand_in, str(sysfs)) == "Socket"
    lib = tmp_path / "ofi"
    lib.mkdir()
    (lib / "libnccl-net.so").write_text("")
    monkeypatch.setenv("LD_LIBRARY_PATH", f"/nonexistent:{lib}")
    assert payload.stand_in_network(stand_in, str(down)) == "Libfabric"


def test_the_payload_writes_and_collects_nccls_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NCCL_DEBUG_FILE", raising=False)
    assert payload.start_nccl_log({}) is None
    where = payload.start_nccl_log({"NCCL_DEBUG": "INFO"})
    assert where is not None and os.environ["NCCL_DEBUG_FILE"].endswith("nccl.%h.%p")
    payload.stand_in_log("Socket", NET.using_line)
    payload.stand_in_log("Socket", NET.using_line)  # a second rank's line: one kept
    lines = payload.collect_nccl_log(where, NET.using_line)
    assert nccl_net.networks_in_log(lines, NET) == ("Socket",) and len(lines) == 1
    assert not os.path.exists(where)
