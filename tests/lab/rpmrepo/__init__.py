"""TEST DOUBLES of NVIDIA's CUDA rpm repositories (rhel9, amzn2023) and of EPEL's dkms.

Generated from tests/recorded/reference/packages.yaml (section `cuda_rpm`), never from a
role's vars: `model.py` reads the names, versions, epoch, release tags, module streams and
dependencies the reference records; `render.py` writes rpm spec files and the modulemd YAML
of the `nvidia-driver` module; `build.py` builds, signs and indexes them with real rpmbuild,
rpmsign, createrepo_c and modifyrepo_c on a lab host. The packages are empty: they exist so
that real dnf resolves, filters by module stream, installs and version-locks them.
"""

from __future__ import annotations
