"""The lab's Ansible inventory: `.lab/<name>/inventory.ini` and its `group_vars/`.

Hosts are in `gpu_nodes` (what the site playbook targets) and in `lab` (lab policy).
Ansible loads the `group_vars/` beside an INI inventory, so the fleet policy of
`inventory/group_vars/` is linked in and `lab.yml` adds the lab's own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml


@dataclass(frozen=True)
class InventoryHost:
    name: str
    port: int
    os: str
    profile: str


def render_inventory(
    lab: str, hosts: Sequence[InventoryHost], *, key: Path, known_hosts: Path
) -> str:
    lines = [
        f"# Written by `provision lab up` for lab {lab!r}; rewritten on every `lab up`.",
        "# The GPUs on these hosts are SIMULATED (gpusim): no CUDA, no real NVLink.",
        "",
        "[gpu_nodes]",
    ]
    for h in sorted(hosts, key=lambda h: h.name):
        policy = "".join(f" {k}={v}" for k, v in DRIVER_POLICY_BY_OS.get(h.os, {}).items())
        lines.append(
            f"{h.name} ansible_host=127.0.0.1 ansible_port={h.port} "
            f"gpuprov_lab_os={h.os} gpuprov_lab_profile={h.profile}{policy}"
        )
    lines += ["", "[lab]"]
    lines += sorted(h.name for h in hosts)
    lines += [
        "",
        "[lab:vars]",
        "ansible_user=root",
        f"ansible_ssh_private_key_file={key.resolve()}",
        # Host keys were made by the lab and pinned here before the first connection.
        f"ansible_ssh_common_args='-o UserKnownHostsFile={known_hosts.resolve()}'",
        "",
    ]
    return "\n".join(lines)


# Lab policy per host OS, on the host's inventory line (it outranks group_vars). Debian 12
# hosts take the production path (the fleet's defaults: NVIDIA's CUDA repository, open
# modules, fabric manager; here the test-double repository of tests/lab/aptrepo). Debian 13
# hosts keep Debian's own packaged driver (550.163.01, proprietary: its open modules do not
# build against trixie's kernel), from the test double of Debian's archive
# (aptrepo/debianarchive.py), or with GPUPROV_LAB_DEBIAN_ARCHIVE=real from Debian's archive:
# then the lab's one real NVIDIA driver build (10-25 minutes of DKMS on 2 cores).
DRIVER_POLICY_BY_OS: dict[str, dict[str, str]] = {
    "debian13": {"nvidia_driver_source": "distribution", "nvidia_driver_flavour": "proprietary"},
}

# The driver role's CUDA repository variables: in the lab, the test-double repository
# (driver, fabric manager, nscq, pinning packages), signed with the lab's throwaway key,
# whose fingerprint is the one the role must find when it fetches the key on every run.
DRIVER_FROM_DOUBLES = """\
# The driver role's CUDA repository (driver, fabric manager, nscq) is that double.
nvidia_driver_cuda_repo_url: "{{ gpuprov_lab_cuda_repo_url }}/"
nvidia_driver_cuda_repo_key: "{{ gpuprov_lab_repo_key_url }}"
"""
# The driver role's Debian mirror (Debian 13 hosts: Debian's own driver) is the lab's test
# double of Debian's archive, re-signed with the lab's key, unless the lab runs the real one.
DEBIAN_FROM_DOUBLE = """\
# The driver role's Debian mirror (contrib, non-free, non-free-firmware) is that double.
nvidia_driver_debian_mirror: "{{ gpuprov_lab_debian_mirror_url }}"
nvidia_driver_debian_mirror_key: "{{ gpuprov_lab_repo_key_url }}"
"""
KEY_FINGERPRINT = """\
nvidia_driver_cuda_repo_key_fingerprints: ["{{ gpuprov_lab_repo_key_fingerprint }}"]
"""


def render_lab_vars(lab: str, gateway: str, repo_vars: Mapping[str, object] | None) -> str:
    if repo_vars:
        repo_block = yaml.safe_dump(
            dict(repo_vars), sort_keys=True, default_flow_style=False, width=4096
        )
        if {"gpuprov_lab_cuda_repo_url", "gpuprov_lab_repo_key_url"} <= set(repo_vars):
            repo_block += DRIVER_FROM_DOUBLES
            if "gpuprov_lab_repo_key_fingerprint" in repo_vars:
                repo_block += KEY_FINGERPRINT
        if {"gpuprov_lab_debian_mirror_url", "gpuprov_lab_repo_key_url"} <= set(repo_vars):
            repo_block += DEBIAN_FROM_DOUBLE
    else:
        repo_block = "# (none: tests/lab/aptrepo/ is not in this checkout)\n"
    return f"""\
---
# Lab policy, written by `provision lab up`. Applies to the lab's hosts only
# (group `lab`), on top of the fleet policy linked in beside this file.

# Marks a lab host: its GPUs are simulated (gpusim), and reports say so.
gpuprov_lab: true
gpuprov_lab_name: {lab}
# This machine as the test hosts reach it on the lab's own network (its
# gateway); the test-double repository below listens there too.
gpuprov_lab_gateway: {gateway}

# The driver: the fleet's policy (NVIDIA's CUDA repository, open modules) from
# the test-double repository below; Debian 13 hosts keep Debian's packaged
# driver (inventory.ini, per host).
# Debian's docker.io: Docker's repository is not reachable from the lab either.
docker_source: distribution

# --- Local apt repository of test doubles (tests/lab/aptrepo/) --------------
# Written from the repository's own lab_policy(): where the signed local
# repository of stand-ins (NVIDIA's CUDA repository for Debian: driver, fabric
# manager, nscq, pinning packages; the container toolkit) is served.
{repo_block}# --- end of the test-double repository settings -----------------------------
"""


def write(
    root: Path,
    lab: str,
    hosts: Sequence[InventoryHost],
    *,
    key: Path,
    known_hosts: Path,
    gateway: str,
    fleet_group_vars: Path,
    repo_vars: Mapping[str, object] | None = None,
) -> Path:
    """Write inventory.ini and group_vars/ under `root`; return the inventory path."""
    group_vars = root / "group_vars"
    group_vars.mkdir(parents=True, exist_ok=True)
    for old in group_vars.iterdir():
        if old.is_symlink():
            old.unlink()
    if fleet_group_vars.is_dir():
        for src in sorted(fleet_group_vars.iterdir()):
            if src.name != "lab.yml":
                (group_vars / src.name).symlink_to(src.resolve())
    (group_vars / "lab.yml").write_text(render_lab_vars(lab, gateway, repo_vars))
    inventory = root / "inventory.ini"
    inventory.write_text(render_inventory(lab, hosts, key=key, known_hosts=known_hosts))
    return inventory
