"""load_inventory through ansible-core: INI and YAML, children, group/host vars, limits, errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.errors import EXIT_BAD_INPUT, InventoryError
from orchestrator.inventory import known_hosts_files, load_inventory

ROOT = Path(__file__).resolve().parents[2]
HOME_KNOWN_HOSTS = os.path.expanduser("~/.ssh/known_hosts")

INI = """\
[h100]
gpu-01 ansible_host=10.0.0.11
gpu-02 ansible_host=10.0.0.12 ansible_port=2202

[l40s]
infer-01 ansible_host=infer-01.example.net ansible_user=admin

[gpu_nodes:children]
h100
l40s

[gpu_nodes:vars]
ansible_user=ubuntu
ansible_ssh_private_key_file=~/.ssh/fleet.pem
ansible_ssh_common_args='-o UserKnownHostsFile="/etc/gpuprov/known_hosts /tmp/second"'

[control]
localhost ansible_connection=local
"""

YAML = """\
all:
  children:
    gpu_nodes:
      hosts:
        node-a:
          ansible_host: 192.0.2.10
          ansible_port: 2222
          ansible_become: true
        node-b:
          ansible_host: 192.0.2.11
      vars:
        ansible_user: root
        ansible_ssh_extra_args: -oUserKnownHostsFile=/srv/lab/known_hosts
        gpuprov_driver_branch: "580"
        gpuprov_nccl_min_busbw: "{{ 400 + 31 }}"
"""


@pytest.fixture
def ini(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.ini"
    path.write_text(INI)
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "h100.yml").write_text("nvidia_driver_branch: '550'\nmig: [1, 2]\n")
    (tmp_path / "group_vars" / "all.yml").write_text("nvidia_driver_branch: '580'\n")
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "gpu-02.yml").write_text("nvidia_driver_branch: '535'\n")
    return path


def test_ini_hosts_groups_and_connection_settings(ini: Path) -> None:
    inv = load_inventory(ini)
    assert sorted(inv.names) == ["gpu-01", "gpu-02", "infer-01", "localhost"]  # Ansible's order
    assert inv.groups == ("control", "gpu_nodes", "h100", "l40s")
    a, b, infer, local = (inv.host(n) for n in ("gpu-01", "gpu-02", "infer-01", "localhost"))
    assert (a.address, a.port, a.user, a.connection) == ("10.0.0.11", 22, "ubuntu", "ssh")
    assert a.key_file == os.path.expanduser("~/.ssh/fleet.pem")
    assert a.groups == ("gpu_nodes", "h100")
    assert b.port == 2202
    assert (infer.address, infer.user) == ("infer-01.example.net", "admin")  # host beats group
    assert local.connection == "local" and local.address == "localhost"
    assert a.known_hosts[:2] == ("/etc/gpuprov/known_hosts", "/tmp/second")
    assert HOME_KNOWN_HOSTS in a.known_hosts
    assert local.known_hosts[0] == HOME_KNOWN_HOSTS
    assert not a.become


def test_group_vars_and_host_vars_precedence(ini: Path) -> None:
    inv = load_inventory(ini)
    assert inv.host("gpu-01").vars["nvidia_driver_branch"] == "550"  # group beats all
    assert inv.host("gpu-02").vars["nvidia_driver_branch"] == "535"  # host beats group
    assert inv.host("infer-01").vars["nvidia_driver_branch"] == "580"
    assert inv.host("gpu-01").vars["mig"] == [1, 2]
    assert type(inv.host("gpu-01").vars["nvidia_driver_branch"]) is str  # plain, not tagged
    assert "inventory_hostname" not in inv.host("gpu-01").vars


def test_yaml_inventory_with_templated_vars(tmp_path: Path) -> None:
    path = tmp_path / "lab.yml"
    path.write_text(YAML)
    inv = load_inventory(path)
    a, b = inv.hosts
    assert (a.name, a.address, a.port, a.user, a.become) == (
        "node-a",
        "192.0.2.10",
        2222,
        "root",
        True,
    )
    assert not b.become
    assert a.known_hosts[0] == "/srv/lab/known_hosts"
    assert a.vars["gpuprov_driver_branch"] == "580"
    assert a.vars["gpuprov_nccl_min_busbw"] == 431


@pytest.mark.parametrize(
    ("limit", "expected"),
    [
        ("h100", ("gpu-01", "gpu-02")),
        ("gpu_nodes:!l40s", ("gpu-01", "gpu-02")),
        ("infer-01,localhost", ("infer-01", "localhost")),
        ("gpu-0*", ("gpu-01", "gpu-02")),
        ("gpu_nodes[0]", ("gpu-01",)),
        ("h100:&gpu_nodes", ("gpu-01", "gpu-02")),
    ],
)
def test_limit_patterns(ini: Path, limit: str, expected: tuple[str, ...]) -> None:
    inv = load_inventory(ini, limit)
    assert sorted(inv.names) == sorted(expected)
    assert inv.limit == limit
    assert inv.groups == ("control", "gpu_nodes", "h100", "l40s")  # all groups, not only limited


def test_limit_matching_nothing_names_pattern_and_groups(ini: Path) -> None:
    with pytest.raises(InventoryError) as err:
        load_inventory(ini, "a100")
    text = str(err.value)
    assert "'a100'" in text and str(ini) in text
    assert "control, gpu_nodes, h100, l40s" in text
    assert err.value.exit_code == EXIT_BAD_INPUT


def test_missing_inventory(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="does not exist") as err:
        load_inventory(tmp_path / "nope.ini")
    assert str(tmp_path / "nope.ini") in str(err.value) and err.value.fix


@pytest.mark.parametrize(
    ("name", "text", "reason"),
    [
        ("bad.ini", "[gpu_nodes\nnode ansible_host=\n", "ini inventory"),
        ("bad.yml", "all:\n  hosts: [a, b\n", "YAML parsing failed"),
    ],
)
def test_malformed_inventory_names_path_and_reason(
    tmp_path: Path, name: str, text: str, reason: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InventoryError, match="could not be parsed") as err:
        load_inventory(path)
    assert str(path) in str(err.value) and reason in str(err.value)
    assert "ansible-inventory" in (err.value.fix or "")


def test_inventory_without_hosts(tmp_path: Path) -> None:
    path = tmp_path / "empty.ini"
    path.write_text("[gpu_nodes]\n")
    with pytest.raises(InventoryError, match="holds no hosts"):
        load_inventory(path)


def test_bad_port_names_host(tmp_path: Path) -> None:
    path = tmp_path / "port.ini"
    path.write_text("[g]\nn1 ansible_port=twenty-two\n")
    with pytest.raises(InventoryError, match="not a port number") as err:
        load_inventory(path)
    assert err.value.host == "n1"


def test_unsupported_connection(tmp_path: Path) -> None:
    path = tmp_path / "winrm.ini"
    path.write_text("[g]\nn1 ansible_connection=winrm\n")
    with pytest.raises(InventoryError, match="winrm"):
        load_inventory(path)


def test_known_hosts_options() -> None:
    assert known_hosts_files(
        {"ansible_ssh_common_args": "-o StrictHostKeyChecking=yes -o UserKnownHostsFile=~/kh"}
    )[0] == os.path.expanduser("~/kh")
    assert known_hosts_files({"ansible_ssh_extra_args": "-oUserKnownHostsFile=/a"})[0] == "/a"
    assert known_hosts_files({})[0] == HOME_KNOWN_HOSTS
    with pytest.raises(InventoryError, match="unbalanced quotes"):
        known_hosts_files({"ansible_ssh_common_args": "-o 'UserKnownHostsFile=/a"})


def test_shipped_example_inventory() -> None:
    inv = load_inventory(ROOT / "inventory" / "p5.ini")
    assert len(inv.hosts) == 4 and "gpu_nodes" in inv.groups
    node = inv.hosts[0]
    assert node.user == "ubuntu" and node.key_file is not None
    assert "mig_configs" in node.vars  # inventory/group_vars/all.yml is read


def test_variables_are_read_without_the_fact_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh fact-cache entry (as every playbook run leaves one, ansible.cfg's jsonfile cache)
    does not resolve a variable templated from a fact: the variables are those before facts are
    gathered, the same whether the entry is fresh or expired (the converged-skip digest)."""
    import ansible.constants as C
    from ansible.plugins.loader import cache_loader

    cache = tmp_path / "facts"
    monkeypatch.setenv("ANSIBLE_CACHE_PLUGIN_CONNECTION", str(cache))
    monkeypatch.setenv("ANSIBLE_CACHE_PLUGIN_TIMEOUT", "3600")
    monkeypatch.setattr(C, "CACHE_PLUGIN", "jsonfile")
    writer = cache_loader.get("jsonfile")
    writer.set("gpu-01", {"ansible_distribution": "Debian", "ansible_kernel": "6.1.0-18-amd64"})
    assert list(cache.iterdir()), "the test's cache entry was written"
    path = tmp_path / "hosts.ini"
    path.write_text(
        "[gpu_nodes]\ngpu-01 ansible_host=10.0.0.11\n\n[gpu_nodes:vars]\n"
        "nvidia_driver_cuda_repo_url=http://repo/{{ ansible_facts['distribution'] | lower }}/\n"
        "gpuprov_kernel_seen={{ ansible_kernel }}\n"
    )
    (host,) = load_inventory(path).hosts
    assert host.vars["nvidia_driver_cuda_repo_url"] == (
        "http://repo/{{ ansible_facts['distribution'] | lower }}/"
    )
    assert host.vars["gpuprov_kernel_seen"] == "{{ ansible_kernel }}"
    assert "ansible_distribution" not in host.vars
    assert C.CACHE_PLUGIN == "jsonfile"  # the setting is left as it was
