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
        lines.append(
            f"{h.name} ansible_host=127.0.0.1 ansible_port={h.port} "
            f"gpuprov_lab_os={h.os} gpuprov_lab_profile={h.profile}"
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


# The driver role takes NVIDIA-only packages (fabric manager, nscq) from its CUDA
# repository variables: in the lab, that is the test-double repository.
DRIVER_FROM_DOUBLES = """\
# The driver role's NVIDIA-only packages (fabric manager, nscq) come from there.
nvidia_driver_cuda_repo_url: "{{ gpuprov_lab_cuda_repo_url }}/"
nvidia_driver_cuda_repo_key: "{{ gpuprov_lab_repo_key_url }}"
"""


def render_lab_vars(lab: str, gateway: str, repo_vars: Mapping[str, object] | None) -> str:
    if repo_vars:
        repo_block = yaml.safe_dump(
            dict(repo_vars), sort_keys=True, default_flow_style=False, width=4096
        )
        if {"gpuprov_lab_cuda_repo_url", "gpuprov_lab_repo_key_url"} <= set(repo_vars):
            repo_block += DRIVER_FROM_DOUBLES
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

# Debian's own nvidia-driver packages (non-free): no NVIDIA repository is
# reachable from the lab.
nvidia_driver_source: distribution
# The proprietary kernel modules: Debian 13's open 550.163.01 does not build
# against trixie's current kernel, and the open build of Debian 12's 535.261.03
# takes over 20 minutes on 2 cores (docs/debian-nvidia-packages.md). Both
# flavours are real DKMS builds.
nvidia_driver_flavour: proprietary
# Debian's docker.io: Docker's repository is not reachable from the lab either.
docker_source: distribution

# --- Local apt repository of test doubles (tests/lab/aptrepo/) --------------
# Written from the repository's own lab_policy(): where the signed local
# repository of stand-ins for nvidia-container-toolkit,
# nvidia-fabricmanager-<branch> and libnvidia-nscq-<branch> is served.
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
