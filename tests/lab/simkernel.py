"""Simulator preparation shared by the lab tests that build the driver with DKMS.

Not part of the product: present the kernel of the suite's point release (linux-headers-amd64
from "<codename>/main"), whose headers Debian's archive carries. Debian 12's packaged open
driver (535.261.03) does not build against bookworm-security's kernel 6.1.192
(pci_resize_resource gained an argument; seen in this lab's DKMS log), so the host runs the
point release's kernel, as a real bookworm host that installed 12.x did.
"""

from __future__ import annotations

SIMULATOR_KERNEL = r"""set -eu
apt-get update -qq
codename=$(. /etc/os-release; echo "$VERSION_CODENAME")
ver=$(apt-cache madison linux-headers-amd64 \
  | awk -F'|' -v s=" $codename/main " 'index($3, s) {gsub(/ /, "", $2); print $2; exit}')
abi=$(apt-cache show "linux-headers-amd64=$ver" \
  | sed -n 's/^Depends: linux-headers-\([^ ,]*\).*/\1/p' | head -n 1)
gpusim kernel "$abi" >/dev/null
# ... and keep the kernel metapackages at that release: this host has not taken the security
# suite's newer kernel, so the driver role's headers metapackage adds no second kernel whose
# DKMS build (Debian 13: Debian's real driver, 10-25 min) this test does not need; newer
# kernels are tests/lab/test_kernel_updates_lab.py's subject.
printf 'Package: linux-headers-amd64 linux-image-amd64\nPin: version %s\nPin-Priority: 1001\n' \
  "$ver" > /etc/apt/preferences.d/gpusim-point-release-kernel.pref
uname -r
"""
