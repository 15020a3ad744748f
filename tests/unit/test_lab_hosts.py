"""Lab hosts: names, profiles, container arguments and the status table (no Docker)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from _helpers import lab_host_spec as spec

from orchestrator.errors import BadInputError
from orchestrator.lab import container, engine, hosts, sysctl

REPO = Path(__file__).resolve().parents[2]
PROFILES = REPO / "tests" / "lab" / "profiles"


def pairs(args: list[str], flag: str) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args) if a == flag]


def test_lab_name_from_option_then_env_then_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUPROV_LAB", raising=False)
    assert hosts.lab_name(None) == "gpuprov"
    monkeypatch.setenv("GPUPROV_LAB", "driver")
    assert hosts.lab_name(None) == "driver"
    assert hosts.lab_name("mig") == "mig"


@pytest.mark.parametrize("bad", ["Upper", "-dash", "has space", "a" * 32, "dot.ted"])
def test_lab_name_unusable_in_container_names_is_bad_input(bad: str) -> None:
    with pytest.raises(BadInputError, match="not usable"):
        hosts.lab_name(bad)


def test_host_names_carry_lab_and_os() -> None:
    assert hosts.host_names("pytest", "debian13", 2) == ["pytest-deb13-1", "pytest-deb13-2"]


def test_profile_by_name_and_by_path(tmp_path: Path) -> None:
    assert hosts.resolve_profile("p5.48xlarge", PROFILES) == PROFILES / "p5.48xlarge.yaml"
    own = tmp_path / "mine.yaml"
    own.write_text("name: mine\n")
    assert hosts.resolve_profile(str(own), PROFILES) == own


def test_unknown_profile_lists_the_known_ones() -> None:
    with pytest.raises(BadInputError) as err:
        hosts.resolve_profile("p6.48xlarge", PROFILES)
    assert err.value.fix is not None and "p5.48xlarge" in err.value.fix


def test_container_cannot_load_kernel_modules_and_ssh_is_loopback_only(tmp_path: Path) -> None:
    args = container.create_args(spec(tmp_path))
    assert "--privileged" not in args
    assert pairs(args, "--cap-add") == ["ALL"]
    assert {"SYS_MODULE", "SYS_TIME"} <= set(pairs(args, "--cap-drop"))
    assert pairs(args, "--publish") == ["127.0.0.1:40022:22"]
    assert pairs(args, "--restart") == ["unless-stopped"]
    assert args[-1] == "gpuprov-lab/debian12:0123456789ab"


def test_container_mounts_for_systemd_docker_and_the_simulator(tmp_path: Path) -> None:
    gpusim = tmp_path / "gpusim"
    args = container.create_args(spec(tmp_path, gpusim))
    volumes = pairs(args, "--volume")
    assert "/sys/fs/cgroup:/sys/fs/cgroup:rw" in volumes
    assert "unit-deb12-1-docker:/var/lib/docker" in volumes
    assert "unit-deb12-1-pci:/sys/bus/pci/devices" in volumes
    assert f"{gpusim}:/opt/gpusim:ro" in volumes
    assert f"{tmp_path / 'profile.yaml'}:/etc/gpusim/profile.yaml:ro" in volumes
    assert not any(
        v.endswith(":/opt/gpusim:ro")
        for v in pairs(container.create_args(spec(tmp_path)), "--volume")
    )


def test_every_container_is_labelled_for_down_and_status(tmp_path: Path) -> None:
    labels = pairs(container.create_args(spec(tmp_path)), "--label")
    assert len(labels) == len({label.split("=")[0] for label in labels})
    assert "gpuprov.lab=unit" in labels
    assert "gpuprov.lab.port=40022" in labels
    assert "gpuprov.lab.profile=p5.48xlarge" in labels


def test_lab_host_from_container_labels() -> None:
    container = engine.Container(
        name="unit-deb13-1",
        state="running",
        labels={
            "gpuprov.lab": "unit",
            "gpuprov.lab.host": "unit-deb13-1",
            "gpuprov.lab.os": "debian13",
            "gpuprov.lab.profile": "l40s",
            "gpuprov.lab.port": "40100",
        },
        restart_count=0,
    )
    assert hosts.to_lab_host(container) == hosts.LabHost(
        "unit-deb13-1", "debian13", "l40s", 40100, "running"
    )


def test_status_table_says_gpus_are_simulated() -> None:
    table = hosts.render_status(
        "unit",
        [
            hosts.LabHost("unit-deb13-1", "debian13", "l40s", 40100, "exited"),
            hosts.LabHost("unit-deb12-1", "debian12", "p5.48xlarge", 40022, "running"),
        ],
    )
    lines = table.splitlines()
    assert lines[0].split() == ["HOST", "OS", "PROFILE", "(simulated", "GPUs)", "SSH", "STATE"]
    assert lines[1].split() == [
        "unit-deb12-1",
        "debian12",
        "p5.48xlarge",
        "127.0.0.1:40022",
        "running",
    ]
    assert lines[2].split()[-1] == "exited"
    assert "simulated" in lines[-1] and "2 host(s)" in lines[-1]


def test_status_of_an_empty_lab_says_how_to_start_one() -> None:
    assert "provision lab up --name unit" in hosts.render_status("unit", [])


def test_free_port_is_bindable_on_loopback() -> None:
    import socket

    port = hosts.free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_low_inotify_limits_stop_up_with_the_sysctl_fix() -> None:
    from orchestrator.errors import LabError

    sysctl.check_inotify({"max_user_instances": 8192, "max_user_watches": 1048576})
    with pytest.raises(LabError, match="max_user_instances=128") as err:
        sysctl.check_inotify({"max_user_instances": 128, "max_user_watches": 1048576})
    assert err.value.fix is not None
    assert "sysctl -w fs.inotify.max_user_instances=8192" in err.value.fix


def test_inotify_limits_are_read_from_proc(tmp_path: Path) -> None:
    (tmp_path / "max_user_instances").write_text("128\n")
    (tmp_path / "max_user_watches").write_text("8192\n")
    assert sysctl.inotify_limits(tmp_path) == {"max_user_instances": 128, "max_user_watches": 8192}


def test_down_forgets_exactly_its_hosts_cached_facts(tmp_path: Path) -> None:
    for name in ("s1_lab-deb12-1", "lab-deb12-2", "s1_other-lab-deb12-1", "s1_xlab-deb12-1"):
        (tmp_path / name).write_text("{}")
    gone = hosts.forget_facts(["lab-deb12-1", "lab-deb12-2"], tmp_path)
    assert sorted(p.name for p in gone) == ["lab-deb12-2", "s1_lab-deb12-1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s1_other-lab-deb12-1", "s1_xlab-deb12-1"]
    assert hosts.forget_facts(["lab-deb12-1"], tmp_path / "absent") == []


def test_cpu_shares_only_when_asked(tmp_path: Path) -> None:
    assert "--cpu-shares" not in container.create_args(spec(tmp_path))
    weighted = container.create_args(dataclasses.replace(spec(tmp_path), cpu_shares=512))
    assert pairs(weighted, "--cpu-shares") == ["512"]
    assert weighted[-1] == "gpuprov-lab/debian12:0123456789ab"  # the image stays last


@pytest.mark.parametrize("text", ["", "  "])
def test_cpu_shares_unset_is_dockers_default(text: str) -> None:
    assert hosts._cpu_shares(text) is None


@pytest.mark.parametrize("text", ["0", "1", "-5", "half", "1.5"])
def test_cpu_shares_refuses_what_is_no_weight(text: str) -> None:
    with pytest.raises(BadInputError) as err:
        hosts._cpu_shares(text)
    assert f"GPUPROV_LAB_CPU_SHARES={text!r}" in str(err.value)
    assert "fix: give a whole number of 2 or more" in str(err.value)


def test_cpu_shares_read_as_a_number() -> None:
    assert hosts._cpu_shares("512") == 512
