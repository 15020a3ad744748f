#!/usr/bin/env bash
# A stand-in for the NVIDIA Container Toolkit on the lent GPU machine ONLY (see docs/device.md):
# that machine has no toolkit and its Docker (Debian 12's docker.io 20.10) predates CDI, so
# `docker run --gpus all` cannot work there. Put this first on PATH as `docker`: it passes every
# command to the real docker ($GPUPROV_REAL_DOCKER) unchanged, except that in `docker run` it
# replaces `--gpus all` with what the toolkit's CDI spec would inject on this host: every
# /dev/nvidia* device node, the driver's libraries (/usr/local/nvidia, read-only, on the image's
# library path) and nvidia-smi. It writes that list, as a CDI-style spec, to $GPUPROV_SHIM_SPEC.
set -u
real=${GPUPROV_REAL_DOCKER:?set GPUPROV_REAL_DOCKER to the real docker binary}
if [ "${1:-}" != run ]; then exec "$real" "$@"; fi
shift
inject=()
spec=${GPUPROV_SHIM_SPEC:-/tmp/gpuprov-shim-cdi.json}
devices=()
for dev in /dev/nvidia* /dev/nvidia-caps/*; do
  [ -c "$dev" ] && devices+=("$dev")
done
args=()
while [ $# -gt 0 ]; do
  if [ "$1" = --gpus ] && [ "${2:-}" = all ]; then
    for dev in "${devices[@]}"; do inject+=(--device "$dev:$dev"); done
    inject+=(-v /usr/local/nvidia:/usr/local/nvidia:ro)
    inject+=(-e LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib)
    inject+=(-e NVIDIA_VISIBLE_DEVICES=all)
    shift 2
    continue
  fi
  args+=("$1")
  shift
done
{
  printf '{"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "note": "written by bench/docker-gpus-shim.sh", "devices": [{"name": "all", "containerEdits": {"deviceNodes": ['
  sep=""
  for dev in "${devices[@]}"; do printf '%s{"path": "%s"}' "$sep" "$dev"; sep=", "; done
  printf ']}}], "containerEdits": {"mounts": [{"hostPath": "/usr/local/nvidia", "containerPath": "/usr/local/nvidia", "options": ["ro", "bind"]}], "env": ["LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib"]}}\n'
} > "$spec"
echo "docker-gpus-shim: --gpus all -> ${#devices[@]} device nodes + /usr/local/nvidia (ro)" >&2
exec "$real" run "${inject[@]}" "${args[@]}"
