"""The verification suite's pure parts: expectations from variables, JUnit folding."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrator.knobs import default_table
from orchestrator.verify.expect import expectation_from_vars, upstream_version
from orchestrator.verify.runner import (
    _reused_connections,
    merge_junit,
    parse_junit,
    processes_for,
    shards,
    suite_command,
)

DATA = Path(__file__).parent / "data"


def test_expectation_from_plan_vars() -> None:
    e = expectation_from_vars(
        "n1",
        {
            "gpuprov_roles": ["nvidia_driver"],
            "nvidia_driver_version": "535.261.03",
            "nvidia_driver_flavour": "open",
            "nvidia_driver_fabricmanager": True,
            "gpuprov_validation_expected_gpus": "8",
        },
    )
    assert e.has_role("nvidia_driver") and not e.has_role("docker")
    assert (e.driver_version, e.driver_flavour, e.fabricmanager, e.gpu_count) == (
        "535.261.03",
        "open",
        True,
        8,
    )


def test_expectation_defaults_without_plan() -> None:
    e = expectation_from_vars("n1", {})
    assert e.roles == ("nvidia_driver", "docker", "nvidia_container_toolkit")
    assert e.driver_version is None and e.fabricmanager is None
    assert e.gpu_count is None  # gpuprov_validation_expected_gpus: 0, every GPU on the bus
    table = default_table()  # the roles' own defaults, read from roles/*/defaults/main.yml
    assert e.cdi_spec == table["nvidia_container_toolkit_cdi_spec"].default
    assert e.driver_state_file == table["nvidia_driver_state_file"].default
    assert e.persistenced is table["nvidia_driver_persistenced"].default


def test_without_a_plan_ini_strings_read_as_the_role_reads_them() -> None:
    """issue 26: `bool("false")` made verify expect persistenced on; ansible-core (the
    role's argument_specs) reads "false" and "off" as False, "yes" as True, "8" as 8."""
    e = expectation_from_vars(
        "n1",
        {
            "nvidia_driver_persistenced": "false",
            "nvidia_driver_fabricmanager": "yes",
            "gpuprov_validation_expected_gpus": "8",
            "gpuprov_roles": "nvidia_driver,docker",
        },
    )
    assert (e.persistenced, e.fabricmanager, e.gpu_count) == (False, True, 8)
    assert e.roles == ("nvidia_driver", "docker")
    assert expectation_from_vars("n1", {"nvidia_driver_persistenced": "off"}).persistenced is False


@pytest.mark.parametrize(
    ("package", "upstream"),
    [
        ("535.261.03-1~deb12u1", "535.261.03"),
        ("1:580.159.04-0ubuntu1", "580.159.04"),
        ("580.159.04", "580.159.04"),
        ("1.17.8-1", "1.17.8"),
    ],
)
def test_upstream_version(package: str, upstream: str) -> None:
    assert upstream_version(package) == upstream


def test_parse_junit_folds_per_host_with_assertion_messages() -> None:
    results = parse_junit((DATA / "verify-junit-localhost.xml").read_text())
    assert list(results) == ["localhost"]
    by_name = {r.name: r for r in results["localhost"]}
    failed = by_name["verify.loaded_module_matches_plan"]
    assert failed.status == "fail"
    assert failed.diagnosis.startswith("no nvidia kernel module is loaded")
    assert by_name["verify.fabricmanager_iff_planned"].status == "pass"
    skipped = by_name["verify.dkms_module_built_for_running_kernel"]
    assert skipped.status == "skip" and "DKMS" in skipped.diagnosis


def test_suite_command_is_usable_directly(tmp_path: Path) -> None:
    cmd = suite_command(Path("inv.ini"), "gpu_nodes", tmp_path / "j.xml", None, workers=4)
    assert "--hosts=ansible://gpu_nodes" in cmd and "--ansible-inventory=inv.ini" in cmd
    assert cmd[-2:] == ["-n", "4"]


@pytest.mark.parametrize(
    ("hosts", "cpus", "processes"),
    [(1, 16, 1), (0, 4, 1), (2, 2, 1), (9, 2, 2), (500, 2, 2), (200, 64, 16)],
)
def test_processes_follow_the_host_count(hosts: int, cpus: int, processes: int) -> None:
    assert processes_for(hosts, cpus) == processes


def test_hosts_are_dealt_into_non_empty_shards() -> None:
    assert shards(["a", "b", "c"], 2) == [["a", "c"], ["b"]]
    assert shards(["a"], 4) == [["a"]]
    dealt = shards([f"h{i}" for i in range(500)], 16)
    assert len(dealt) == 16 and sorted(h for group in dealt for h in group) == sorted(
        f"h{i}" for i in range(500)
    )


def test_merged_junit_keeps_every_case_and_sums_the_counts() -> None:
    one = (
        '<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="0" tests="2" '
        'time="1.5"><testcase name="test_a[ansible://n1]"/><testcase name="test_b[ansible://n1]">'
        '<failure message="AssertionError: b is off">t</failure></testcase></testsuite>'
        "</testsuites>"
    )
    two = one.replace("n1", "n2").replace('time="1.5"', 'time="2.0"')
    merged = merge_junit([one, two])
    results = parse_junit(merged)
    assert sorted(results) == ["n1", "n2"]
    assert [r.status for r in results["n2"]] == ["pass", "fail"]
    assert 'tests="4"' in merged and 'failures="2"' in merged and 'time="2.000"' in merged


def test_parse_junit_reads_a_pytest_fail_message() -> None:
    xml = (
        '<testsuites><testsuite><testcase name="test_mig_mode_as_planned[ansible://n1]">'
        "<failure message=\"Failed: cannot check MIG layout 'x': n1: MIG layout 'x' is not "
        'defined">trace</failure></testcase></testsuite></testsuites>'
    )
    (result,) = parse_junit(xml)["n1"]
    assert result.name == "verify.mig_mode_as_planned" and result.status == "fail"
    assert result.diagnosis.startswith("cannot check MIG layout 'x'")


@pytest.mark.skipif(shutil.which("ssh") is None, reason="no OpenSSH client here")
def test_the_verify_playbooks_ssh_config_shares_one_connection_per_host(tmp_path: Path) -> None:
    """gpuprov.nvidia.verify gives testinfra's ssh a ControlPath (each command was a new SSH
    handshake: 100 fleet hosts took over 7 minutes); OpenSSH itself reads the file."""
    config = _reused_connections(tmp_path)
    seen = subprocess.run(
        ["ssh", "-G", "-F", str(config), "node-1"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert "controlmaster auto" in seen
    assert any(ln.startswith(f"controlpath {tmp_path}/cp/") for ln in seen), seen
    assert "controlpersist 15" in seen
    assert (tmp_path / "cp").stat().st_mode & 0o777 == 0o700
