#!/usr/bin/env bash
# The README's main job, end to end on this machine: a 2-node p5.48xlarge lab on Debian 12
# (systemd test hosts whose GPUs are SIMULATED), then the whole `provision` pipeline on it
# (detect, plan, apply, validate, verify), ending in the per-host report. The driver takes
# the production path, the fleet's default plan for a p5: NVIDIA's CUDA repository (here the
# lab's signed TEST DOUBLE of NVIDIA's debian12 repository, tests/lab/aptrepo), R580, open
# modules, fabric manager; the plan names the packages it installs and holds.
#
#   ./scripts/demo.sh            # `make demo` runs it after `make setup`
#   GPUPROV_LAB=mine ./scripts/demo.sh --down   # another lab name; remove the lab at the end
#
# Exit code: provision's (0 every host ok, 1 some host failed, 2 bad input).
set -euo pipefail
cd "$(dirname "$0")/.."

down=0
for arg in "$@"; do
  case $arg in
    --down) down=1 ;;
    *) echo "usage: $0 [--down]" >&2; exit 2 ;;
  esac
done

venv=${VENV:-.venv}
# The closing table is wide; logs (no terminal) would otherwise wrap it at 80 columns.
export COLUMNS=${COLUMNS:-140}
provision="$venv/bin/provision"
lab=${GPUPROV_LAB:-gpuprov}
inventory=".lab/$lab/inventory.ini"
report="artifacts/demo-$lab-report.json"

"$provision" lab up --name "$lab" --profile p5.48xlarge --count 2 --os debian12
mkdir -p artifacts

rc=0
"$provision" --inventory "$inventory" --report "$report" || rc=$?

echo
echo "demo: provision exited $rc; JSON report: $report (the lab's GPUs are simulated)"
if ((down)); then
  "$provision" lab down --name "$lab"
else
  echo "demo: the lab is still up: '$provision lab status --name $lab';" \
    "remove it with '$provision lab down --name $lab'"
fi
exit "$rc"
