#!/usr/bin/env bash
# validate --multinode on the lent GPU machine, in its degenerate forms (one machine, no
# network to other hosts, no Docker): read-only for the GPUs, NVLS off as the single-host
# check runs it.
#   bash bench/device-multinode.sh        # results: $OUT/log.txt and $OUT/results.tgz
# 1. one inventory host, every GPU a rank (2 GPUs: 2 ranks over loopback);
# 2. two inventory names for the same machine (both ansible_connection=local): one GPU each,
#    two payloads as two "hosts", rendezvous over loopback.
# Needs, carried in .whl/: ansible-core's wheel (inventory parsing), as bench/device-validate.sh.
set -u
out=${OUT:-/tmp/gpuprov-device}
res=/tmp/gpuprov-results
mkdir -p "$out" "$res"
exec > >(tee -a "$out/log.txt") 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 ANSIBLE_NOCOLOR=1 TERM=dumb
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$PWD" PATH="/tmp/site/bin:$PATH"
py=$(command -v python3)
provision() { python3 -m orchestrator.cli "$@"; }
nvidia-smi -L
one=/tmp/gpuprov-multinode-one.yml two=/tmp/gpuprov-multinode-two.yml
printf 'all:\n  children:\n    gpu_nodes:\n      hosts:\n        device:\n          ansible_connection: local\n          ansible_python_interpreter: %s\n' "$py" > "$one"
printf 'all:\n  children:\n    gpu_nodes:\n      hosts:\n        device-a:\n          ansible_connection: local\n          ansible_python_interpreter: %s\n        device-b:\n          ansible_connection: local\n          ansible_python_interpreter: %s\n' "$py" "$py" > "$two"
for inv in "$one" "$two"; do
  name=$(basename "$inv" .yml)
  echo "=== $(date -u +%T) provision validate -i $inv --runtime host --multinode"
  start=$(date +%s)
  provision validate -i "$inv" --runtime host --multinode --report "$res/$name.json" \
    --junit "$res/$name.xml" > "$res/$name.txt" 2>&1
  echo "exit=$? wall $(( $(date +%s) - start )) s"
  grep -E '^multinode:' "$res/$name.txt"
  python3 - "$res/$name.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
for host, h in sorted(doc["hosts"].items()):
    for c in h["validation"]["checks"]:
        if "multinode" in c["name"]:
            print(f"{host} {c['name']:<28} {c['status']:<5} {c['value']} {c['diagnosis'][:300]}")
PY
done
tar -czf "$out/results.tgz" -C "$res" .
