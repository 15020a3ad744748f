#!/usr/bin/env bash
# The lab tests, in two groups that run at the same time, each with labs of its own
# (GPUPROV_LAB names them apart, GPUPROV_LAB_SUBNETS gives each group half of the lab
# network pool, so they never race for a /24). Most of a lab test's time is apt, dpkg, DKMS
# and SSH waiting on each other; two groups keep a 2-core machine busy (measured:
# docs/benchmarks.md). Each group's output is printed when it ends; the exit status is the
# first group's failure, if any.
#
#   scripts/lab-tests.sh            # make test runs it after the unit tests
#   scripts/lab-tests.sh -x -v      # extra pytest options go to both groups
set -uo pipefail
cd "$(dirname "$0")/.."
venv=${VENV:-.venv}
export PATH="$PWD/$venv/bin:$PATH"
logs=$(mktemp -d /tmp/gpuprov-lab-tests.XXXXXX)

# What both groups read, prepared once (built at the same time, they would race): the
# simulator's uname shim and kernel-release lookup, and the test-double repositories.
tests/lab/gpusim/build-shim >/dev/null
PYTHONPATH=tests/lab "$venv/bin/python" -m aptrepo build >/dev/null || exit 1

# Group a: the session lab's converged hosts (driver with DKMS, verify, runtime roles...).
# (Each group keeps the files' alphabetical order, the order of one serial run; the rerun
# test last, on the hosts test_verify_lab.py converged.)
a=(tests/lab/test_bastion_lab.py tests/lab/test_become_lab.py tests/lab/test_detect_lab.py
  tests/lab/test_gpusim_lab.py
  tests/lab/test_plan_precedence_lab.py tests/lab/test_role_docker.py
  tests/lab/test_role_nvidia_container_toolkit.py tests/lab/test_role_nvidia_driver.py
  tests/lab/test_validate_lab.py tests/lab/test_verify_lab.py tests/lab/test_wheel_lab.py
  tests/lab/test_without_provision_lab.py tests/lab/test_rerun_lab.py)
# Group b: tests that bring up labs of their own.
b=(tests/lab/test_aptrepo_replay_lab.py tests/lab/test_faults_lab.py tests/lab/test_kernel_updates_lab.py
  tests/lab/test_lab_engine.py tests/lab/test_nvlink5_lab.py tests/lab/test_role_dnf.py
  tests/lab/test_role_mig.py tests/lab/test_role_nvidia_driver_ubuntu.py
  tests/lab/test_upgrade_lab.py)
missing=()
for f in tests/lab/test_*.py; do
  [[ " ${a[*]} ${b[*]} " == *" $f "* ]] || missing+=("$f")
done
if ((${#missing[@]})); then
  echo "lab-tests: not in a group (add them to scripts/lab-tests.sh): ${missing[*]}" >&2
  exit 2
fi

own=${GPUPROV_LAB:+$GPUPROV_LAB-}
group() {
  local name=$1 subnets=$2
  shift 2
  GPUPROV_LAB="${own}$name" GPUPROV_LAB_SUBNETS="$subnets" \
    "$venv/bin/pytest" -q -p no:cacheprovider -m lab "$@" >"$logs/$name.log" 2>&1
}
start=$(date +%s)
group a 10.213.0.0/17 "${a[@]}" "$@" &
pid_a=$!
group b 10.213.128.0/17 "${b[@]}" "$@" &
pid_b=$!
rc_a=0 rc_b=0
wait "$pid_a" || rc_a=$?
wait "$pid_b" || rc_b=$?
for name in a b; do
  echo "=== lab tests, group $name"
  cat "$logs/$name.log"
done
echo "lab-tests: both groups done in $(( $(date +%s) - start )) s (group a exit $rc_a, group b exit $rc_b)"
rm -rf "$logs"
if ((rc_a)); then exit "$rc_a"; fi
exit "$rc_b"
