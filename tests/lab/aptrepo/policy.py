"""Role variables that point a lab's hosts at the test-double repository (group_vars/lab.yml)."""

from __future__ import annotations

import os

from aptrepo.debianarchive import ARCHIVE_DIR
from aptrepo.packages import TOOLKIT_VERSIONS
from aptrepo.serve import ServedRepo

# CUDA-style directory per host, chosen on the host (debian12 / debian13).
_CUDA_DIR = "compute/cuda/repos/{{ ansible_facts['distribution'] | lower }}"
_CUDA_DIR += "{{ ansible_facts['distribution_major_version'] }}/x86_64"
# GPUPROV_LAB_DEBIAN_ARCHIVE=real: Debian 13 hosts install Debian's real driver packages from
# Debian's archive (the real 550 DKMS build, 10-25 minutes on 2 cores: the extended tier);
# otherwise from the test double of the archive's contrib/non-free/non-free-firmware.
REAL_ARCHIVE_ENV = "GPUPROV_LAB_DEBIAN_ARCHIVE"


def lab_policy(repo: ServedRepo) -> dict[str, object]:
    """Variables for the lab's group_vars: the toolkit (and FM/nscq) from the test doubles.

    `gpuprov_lab_cuda_repo_url` / `gpuprov_lab_repo_key_url`: the double of NVIDIA's CUDA
    repository for the host's Debian release (compute/cuda/repos/debian12/x86_64, like
    NVIDIA's URL; its key file, e.g. 3bf863cc.pub, is there too): driver packages of 575, 580
    and 595 with Debian-style names, fabric manager / nscq per the 580 rename.

    `gpuprov_lab_debian_mirror_url`: the test double of Debian's archive (trixie's contrib,
    non-free, non-free-firmware driver packages, aptrepo/debianarchive.py), left out when
    GPUPROV_LAB_DEBIAN_ARCHIVE=real.
    """
    real = os.environ.get(REAL_ARCHIVE_ENV, "") == "real"
    archive = {} if real else {"gpuprov_lab_debian_mirror_url": f"{repo.base_url}/{ARCHIVE_DIR}"}
    return {
        **archive,
        "nvidia_container_toolkit_repo_base_url": repo.toolkit_base_url,
        "nvidia_container_toolkit_repo_key_url": repo.key_url,
        "nvidia_container_toolkit_version": TOOLKIT_VERSIONS[0],
        "gpuprov_lab_repo_key_url": repo.key_url,
        "gpuprov_lab_cuda_repo_url": f"{repo.base_url}/{_CUDA_DIR}",
    }
