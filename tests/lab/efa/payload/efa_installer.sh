#!/bin/sh
# TEST DOUBLE of the AWS EFA installer @VERSION@ (gpuprov tests/lab/efa, SIMULATED): generated
# from tests/recorded/reference/fabric.yaml, not AWS's installer. What it lays down follows
# efa.installer.installs there: the efa DKMS module (dkms from the distribution), libfabric's
# fi_info under @LIBFABRIC@/bin, the aws-ofi-nccl plugin under @OFI_NCCL@/<triplet> (Ubuntu's
# layout), the limits file unless --skip-limit-conf, and the manifest @MANIFEST@ with its
# "@MANIFEST_LINE@<version>" line. Options as efa.installer.flags names them.
set -eu
yes=0 skip_kmod=0 skip_limits=0 no_verify=0 minimal=0
for a in "$@"; do
    case $a in
    -y | --yes) yes=1 ;;
    -g | --enable-gdr) ;; # GDR is on by default since 1.14.0 (fabric.yaml efa.gpudirect)
    -k | --skip-kmod) skip_kmod=1 ;;
    --skip-limit-conf) skip_limits=1 ;;
    -n | --no-verify) no_verify=1 ;;
    --minimal) minimal=1 ;;
    -d | --debug-packages) ;;
    *)
        echo "efa_installer.sh (test double): unknown option $a" >&2
        exit 1
        ;;
    esac
done
if [ "$yes" != 1 ]; then
    echo "efa_installer.sh (test double): answer the questions with -y" >&2
    exit 1
fi
here=$(cd "$(dirname "$0")" && pwd)
echo "== EFA installer @VERSION@ (gpuprov TEST DOUBLE)"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q --no-install-recommends dkms >/dev/null
packages="efa-config efa-profile"
if [ "$skip_kmod" = 0 ]; then
    src=/usr/src/efa-@MODULE_VERSION@
    rm -rf "$src"
    mkdir -p "$src"
    cp "$here/dkms/"* "$src/"
    dkms status -m efa -v @MODULE_VERSION@ | grep -q . || dkms add -m efa -v @MODULE_VERSION@
    dkms install -m efa -v @MODULE_VERSION@ -k "$(uname -r)"
    modprobe efa
    packages="$packages efa-@MODULE_VERSION@"
fi
mkdir -p @LIBFABRIC@/bin
install -m 0755 "$here/fi_info" @LIBFABRIC@/bin/fi_info
packages="$packages libfabric-aws"
if [ "$minimal" = 0 ]; then
    lib=@OFI_NCCL@/$(uname -m)-linux-gnu
    mkdir -p "$lib"
    for f in @PLUGIN_LIBRARIES@; do
        printf 'gpuprov TEST DOUBLE of %s (aws-ofi-nccl): not a shared library\n' "$f" >"$lib/$f"
    done
    packages="$packages libnccl-ofi"
fi
# with or without -g, as EKS's --minimal -y run gets it (fabric.yaml efa.gpudirect)
packages="$packages efa-nv-peermem(simulated:no-module)"
if [ "$skip_limits" = 0 ]; then
    printf '# EFA installer (gpuprov TEST DOUBLE)\n* soft memlock unlimited\n* hard memlock unlimited\n' \
        >@LIMITS@
fi
mkdir -p "$(dirname @MANIFEST@)"
{
    echo "# gpuprov TEST DOUBLE of the EFA installer (simulated)"
    echo "@MANIFEST_LINE@@VERSION@"
    for p in $packages; do echo "$p"; done
} >@MANIFEST@
if [ "$no_verify" = 0 ]; then
    if ! @LIBFABRIC@/bin/fi_info -p efa -t FI_EP_RDM >/dev/null; then
        echo "efa_installer.sh (test double): fi_info lists no efa provider" >&2
        exit 1
    fi
fi
echo "== EFA installer @VERSION@ (gpuprov TEST DOUBLE): done"
