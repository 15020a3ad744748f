#!/bin/sh
# bench/fleet-hosts.sh: TEST DOUBLE for bench/bench_fleet.py. Runs inside ONE container of the
# lab image and starts N light SSH-only test hosts in it: each host is an sshd in a mount and
# UTS namespace of its own, on its own address of the lab network, with the lab's GPU
# simulator (tests/lab/gpusim, mounted at /opt/gpusim) booted in that namespace. Every GPU
# fact such a host shows is SIMULATED. No systemd, no Docker inside: SSH, a shell and the
# simulator only.
#
#   fleet-hosts.sh SPEC     SPEC: lines "NAME ADDRESS PREFIX" (written by bench_fleet.py)
#
# Per host, /fleet/NAME/ (read-only, made on the control machine) holds its host key and
# sshd_config; /run/fleet/NAME/ (tmpfs) its simulated PCI tree, simulator state and shims.
set -eu

spec=$1
mkdir -p /run/sshd /run/fleet
chmod 0755 /run/sshd

start_host() {
    name=$1
    address=$2
    prefix=$3
    h=/run/fleet/$name
    mkdir -p "$h/pci" "$h/gpusim-state" "$h/bin" "$h/sbin" "$h/etc-gpusim" "$h/run-gpusim"
    cp /fleet/profile.yaml "$h/etc-gpusim/profile.yaml"
    # past 200 hosts an address holds several hosts, each on its own port (bench_fleet.py)
    ip -o addr show dev eth0 | grep -q " $address/" || ip addr add "$address/$prefix" dev eth0
    # the namespace's mounts are the host's view: its PCI bus, its /proc/driver and
    # /proc/modules (gpusim boot mounts those), its state, its PATH shims, its hostname
    unshare --mount --uts --propagation private -- sh -c '
        set -e
        h=$1
        hostname "$2"
        mount --bind "$h/pci" /sys/bus/pci/devices
        mount --bind "$h/etc-gpusim" /etc/gpusim
        mount --bind "$h/gpusim-state" /var/lib/gpusim
        mount --bind "$h/bin" /usr/local/bin
        mount --bind "$h/sbin" /usr/local/sbin
        mount --bind "$h/run-gpusim" /run/gpusim
        # the first boot alone: it writes the files the hosts share (/etc/ld.so.preload, that
        # later boots find done); then BOOTS at a time (lock slots), each a Python start
        flock "/run/fleet/boot.$3.lock" /opt/gpusim/boot >"$h/boot.log" 2>&1
        exec /usr/sbin/sshd -D -e -f "/fleet/$2/sshd_config" 2>"$h/sshd.log"
    ' fleet-host "$h" "$name" "$4" &
}
BOOTS=8

mkdir -p /etc/gpusim /var/lib/gpusim /run/gpusim /var/cache/gpusim
i=0
while read -r name address prefix; do
    [ -n "$name" ] || continue
    start_host "$name" "$address" "$prefix" $((i % BOOTS))
    if [ "$i" = 0 ]; then  # wait for the first boot (at most 5 minutes)
        n=0
        until grep -q "gpusim: boot" "/run/fleet/$name/boot.log" 2>/dev/null || [ $n -ge 300 ]; do
            sleep 1
            n=$((n + 1))
        done
    fi
    i=$((i + 1))
done <"$spec"
echo "fleet-hosts: started $(grep -c . "$spec") hosts"
wait
