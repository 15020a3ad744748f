#!/usr/bin/env bash
# gpuprov on a real GPU host, read-only: detection, planning, the whole pipeline in check
# mode (driver role in Ansible check mode, validation on the host, verification), the driver
# role's own check playbook, and MIG layouts validated against the GPUs' real -lgip/-lgipp.
# Never changes MIG, persistence, clocks, power, ECC; never resets a GPU.
#
# Used on the lent H200 machine (Ubuntu 24.04, driver 580, no Docker, no network) with the
# Python wheels gpuprov needs carried in .whl/ (see docs/device.md):
#   bash bench/device.sh            # writes its outputs to $OUT (default /tmp/gpuprov-device)
set -u
out=${OUT:-/tmp/gpuprov-device}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 ANSIBLE_NOCOLOR=1 TERM=dumb
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH="/tmp/site:$PWD" PATH="/tmp/site/bin:$PATH"
fi
inv=/tmp/gpuprov-device.yml
cat > "$inv" <<YAML
all:
  children:
    gpu_nodes:
      hosts:
        h200-device:
          ansible_connection: local
          ansible_python_interpreter: $(command -v python3)
          # No Docker and no network on this machine: the plan covers the driver only.
          gpuprov_roles: [nvidia_driver]
YAML
provision() { python3 -m orchestrator.cli "$@"; }
step() { echo; echo "=== $*"; }

step "nvidia-smi -L"; nvidia-smi -L
step "detect"; time provision detect -i "$inv" --save /tmp/gpuprov-facts
tar -C /tmp/gpuprov-facts -czf "$out/facts.tgz" .
step "detection benchmark: provision detect vs ansible -m setup on this host (connection local)"
python3 bench/bench_detect.py --inventory "$inv" --repeat 5 --json "$out/bench-detect.json"
step "plan"; time provision plan -i "$inv" --json > "$out/plan.json"; cat "$out/plan.json"
step "whole pipeline, check mode"
time provision -i "$inv" --check --report "$out/pipeline-check.json"
echo "exit=$?"
step "validate (on the host: no Docker here)"
time provision validate -i "$inv" --report "$out/validate.json"
echo "exit=$?"
step "verify (testinfra, connection local)"
time provision verify -i "$inv" --report "$out/verify.json"
echo "exit=$?"
step "check_driver playbook"
ansible-playbook -i localhost, -c local playbooks/check_driver.yml --check --diff
echo "exit=$?"
step "MIG layouts against the real GPUs (read-only)"
for layout in h200-mixed h200-all-3g h100-80gb-mixed; do
  echo "--- $layout"
  python3 -m orchestrator.mig_apply --config inventory/group_vars/all.yml --layout "$layout" check
  echo "exit=$?"
done
step "plan with -e (the planner plans with it; a contradiction is exit 2)"
provision plan -i "$inv" -e nvidia_driver_branch=580 --json > "$out/plan-e.json"
echo "exit=$? (580: agrees with the detected driver)"
provision plan -i "$inv" -e nvidia_driver_fabricmanager=true
echo "exit=$? (the fabric manager on a host without NVSwitch: contradicts the plan)"
step "the collection's playbooks (gpuprov.nvidia.validate / verify), connection local"
time ANSIBLE_SHOW_CUSTOM_STATS=True ansible-playbook -i "$inv" playbooks/validate.yml
echo "exit=$?"
time ANSIBLE_SHOW_CUSTOM_STATS=True ansible-playbook -i "$inv" playbooks/verify.yml
echo "exit=$?"
