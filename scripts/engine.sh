#!/usr/bin/env bash
# Make sure a Docker engine answers: install Debian's docker.io (and what the lab needs:
# debootstrap to build test-host images, ssh, a C compiler for the simulator's shim) when
# missing, start dockerd when it is not running.
set -euo pipefail

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v ssh >/dev/null 2>&1 || need+=(openssh-client)
# The GPU simulator builds its uname shim on this machine before test hosts boot.
command -v cc >/dev/null 2>&1 || need+=(gcc libc6-dev)
# debootstrap checks the trixie (Debian 13) image against this keyring's trixie key.
[ -e /usr/share/keyrings/debian-archive-trixie-stable.gpg ] || need+=(debian-archive-keyring)
if ((${#need[@]})); then
  echo "engine: installing ${need[*]} from Debian's archive"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
fi

# Every systemd test host takes several inotify instances; the kernel's default of 128 per
# user runs out at about a dozen hosts, and then systemd in a new host hangs at boot
# ("Failed to create inotify object: Too many open files").
if [ "$(cat /proc/sys/fs/inotify/max_user_instances)" -lt 8192 ]; then
  sysctl -q -w fs.inotify.max_user_instances=8192
fi
if [ "$(cat /proc/sys/fs/inotify/max_user_watches)" -lt 1048576 ]; then
  sysctl -q -w fs.inotify.max_user_watches=1048576
fi

if docker info >/dev/null 2>&1; then
  exit 0
fi
if [ "$(ps -o comm= -p 1)" = systemd ]; then
  systemctl start docker
else
  echo "engine: starting dockerd (log: /var/log/gpuprov-dockerd.log)"
  setsid dockerd >/var/log/gpuprov-dockerd.log 2>&1 < /dev/null &
fi
for _ in $(seq 1 60); do
  docker info >/dev/null 2>&1 && exit 0
  sleep 1
done
echo "engine: dockerd did not answer within 60 s; see /var/log/gpuprov-dockerd.log" >&2
exit 1
