"""Simulator preparation shared by the lab tests that build the driver with DKMS.

Not part of the product: present the kernel of the suite's point release (linux-headers-amd64
from "<codename>/main"), whose headers Debian's archive carries. Debian 12's packaged open
driver (535.261.03) does not build against bookworm-security's kernel 6.1.192
(pci_resize_resource gained an argument; seen in this lab's DKMS log), so the host runs the
point release's kernel, as a real bookworm host that installed 12.x did. That kernel's image
package is a test double (no kernel, no modules), installed as a real host has its own.
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
# A real host runs a packaged kernel, so its image package is installed; these hosts run the
# control machine's kernel instead. A test double of linux-image-$abi stands in for it: the
# archive's name and version (apt-cache, as above), a control file and nothing else. Without
# it, trixie's linux-headers-$abi (Depends: linux-image-$abi (= version) | ...-unsigned)
# made the driver role's first converge install Debian's real image: 108 MB of modules the
# simulated kernel never loads, a depmod over 4,230 of them on each DKMS install and
# initramfs-tools with it (two 36 MB initramfs builds), on top of what the role does.
img_ver=$(apt-cache madison "linux-image-$abi" | awk -F'|' 'NR == 1 {gsub(/ /, "", $2); print $2}')
installed=$(dpkg-query -W -f='${db:Status-Abbrev}' "linux-image-$abi" 2>/dev/null || true)
if [ -n "$img_ver" ] && [ "${installed%% *}" != ii ]; then
  pkg=$(mktemp -d)
  mkdir -p "$pkg/DEBIAN"
  cat > "$pkg/DEBIAN/control" <<CONTROL
Package: linux-image-$abi
Version: $img_ver
Architecture: $(dpkg --print-architecture)
Maintainer: gpuprov lab <lab@gpuprov.invalid>
Section: kernel
Priority: optional
Description: test double: the simulated kernel's image package (no kernel, no modules)
 Not Debian's package. gpuprov's lab hosts run the control machine's kernel and present
 $abi (tests/lab/gpusim); this stands in for the image package a real host has installed.
CONTROL
  dpkg-deb --build --root-owner-group "$pkg" "$pkg.deb" >/dev/null
  dpkg -i "$pkg.deb" >/dev/null
  rm -rf "$pkg" "$pkg.deb"
fi
# ... and keep the kernel metapackages at that release: this host has not taken the security
# suite's newer kernel, so the driver role's headers metapackage adds no second kernel whose
# DKMS build (Debian 13: Debian's real driver, 10-25 min) this test does not need; newer
# kernels are tests/lab/test_kernel_updates_lab.py's subject.
printf 'Package: linux-headers-amd64 linux-image-amd64\nPin: version %s\nPin-Priority: 1001\n' \
  "$ver" > /etc/apt/preferences.d/gpusim-point-release-kernel.pref
uname -r
"""
