"""The lab inventory: parsed by ansible-core itself, with lab policy beside it."""

from __future__ import annotations

from pathlib import Path

import yaml
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.vars.manager import VariableManager

from orchestrator.lab import labinventory

HOSTS = [
    labinventory.InventoryHost("t-deb13-1", 40101, "debian13", "p5.48xlarge"),
    labinventory.InventoryHost("t-deb12-1", 40100, "debian12", "p5.48xlarge"),
]


def write(tmp_path: Path) -> Path:
    fleet = tmp_path / "fleet_group_vars"
    fleet.mkdir()
    (fleet / "all.yml").write_text("---\ngpuprov_roles:\n  - nvidia_driver\n")
    return labinventory.write(
        tmp_path / "lab",
        "t",
        HOSTS,
        key=tmp_path / "lab" / "id_ed25519",
        known_hosts=tmp_path / "lab" / "known_hosts",
        gateway="172.18.0.1",
        fleet_group_vars=fleet,
    )


def test_ansible_reads_hosts_groups_and_connection_vars(tmp_path: Path) -> None:
    inventory = write(tmp_path)
    loader = DataLoader()
    manager = InventoryManager(loader=loader, sources=[str(inventory)])
    variables = VariableManager(loader=loader, inventory=manager)
    assert sorted(h.name for h in manager.get_hosts("gpu_nodes")) == ["t-deb12-1", "t-deb13-1"]
    assert sorted(h.name for h in manager.get_hosts("lab")) == ["t-deb12-1", "t-deb13-1"]
    hv = variables.get_vars(host=manager.get_host("t-deb13-1"))
    assert hv["ansible_host"] == "127.0.0.1"
    assert hv["ansible_port"] == 40101
    assert hv["ansible_user"] == "root"
    assert hv["gpuprov_lab_os"] == "debian13"
    assert hv["ansible_ssh_private_key_file"] == str((tmp_path / "lab" / "id_ed25519").resolve())
    known = (tmp_path / "lab" / "known_hosts").resolve()
    assert hv["ansible_ssh_common_args"] == f"-o UserKnownHostsFile={known}"
    # Fleet policy (linked) and lab policy (group `lab`) both apply.
    assert hv["gpuprov_roles"] == ["nvidia_driver"]
    assert hv["gpuprov_lab"] is True
    assert hv["gpuprov_lab_gateway"] == "172.18.0.1"
    assert hv["nvidia_driver_source"] == "distribution"
    assert hv["docker_source"] == "distribution"


def test_rewrite_keeps_one_link_per_fleet_file(tmp_path: Path) -> None:
    write(tmp_path)
    inventory = tmp_path / "lab" / "inventory.ini"
    (tmp_path / "fleet_group_vars" / "gpu_nodes.yml").write_text("---\n{}\n")
    labinventory.write(
        tmp_path / "lab",
        "t",
        HOSTS[:1],
        key=tmp_path / "lab" / "id_ed25519",
        known_hosts=tmp_path / "lab" / "known_hosts",
        gateway="172.18.0.1",
        fleet_group_vars=tmp_path / "fleet_group_vars",
    )
    group_vars = tmp_path / "lab" / "group_vars"
    assert sorted(p.name for p in group_vars.iterdir()) == ["all.yml", "gpu_nodes.yml", "lab.yml"]
    assert (group_vars / "all.yml").is_symlink()
    assert "t-deb13-1" in inventory.read_text()
    assert "t-deb12-1" not in inventory.read_text()


def test_inventory_says_gpus_are_simulated(tmp_path: Path) -> None:
    assert "SIMULATED" in write(tmp_path).read_text()


def test_lab_vars_pass_yamllint(tmp_path: Path) -> None:
    from yamllint import linter  # type: ignore[import-untyped]
    from yamllint.config import YamlLintConfig  # type: ignore[import-untyped]

    text = labinventory.render_lab_vars("a" * 31, "172.18.0.1", None)
    problems = list(linter.run(text, YamlLintConfig("extends: default")))
    assert problems == []


def test_driver_role_takes_nvidia_packages_from_the_test_double_repository(
    tmp_path: Path,
) -> None:
    repo = {
        "gpuprov_lab_cuda_repo_url": "http://172.17.0.1:8089/cuda/repos/debian12/x86_64",
        "gpuprov_lab_repo_key_url": "http://172.17.0.1:8089/gpgkey",
    }
    text = labinventory.render_lab_vars("t", "10.213.0.1", repo)
    data = yaml.safe_load(text)
    assert data["gpuprov_lab_cuda_repo_url"] == repo["gpuprov_lab_cuda_repo_url"]
    assert data["nvidia_driver_cuda_repo_url"] == "{{ gpuprov_lab_cuda_repo_url }}/"
    assert data["nvidia_driver_cuda_repo_key"] == "{{ gpuprov_lab_repo_key_url }}"
    without = yaml.safe_load(labinventory.render_lab_vars("t", "10.213.0.1", None))
    assert "nvidia_driver_cuda_repo_url" not in without


def test_debian_hosts_take_the_archive_double_only_when_the_repository_serves_it() -> None:
    repo = {
        "gpuprov_lab_cuda_repo_url": "http://172.17.0.1:8089/cuda/repos/debian12/x86_64",
        "gpuprov_lab_repo_key_url": "http://172.17.0.1:8089/gpgkey",
    }
    real = yaml.safe_load(labinventory.render_lab_vars("t", "10.213.0.1", repo))
    assert "nvidia_driver_debian_mirror" not in real  # GPUPROV_LAB_DEBIAN_ARCHIVE=real
    double = {**repo, "gpuprov_lab_debian_mirror_url": "http://172.17.0.1:8089/debian"}
    data = yaml.safe_load(labinventory.render_lab_vars("t", "10.213.0.1", double))
    assert data["nvidia_driver_debian_mirror"] == "{{ gpuprov_lab_debian_mirror_url }}"
    assert data["nvidia_driver_debian_mirror_key"] == "{{ gpuprov_lab_repo_key_url }}"
