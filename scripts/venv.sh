#!/usr/bin/env bash
# Create the project's virtual environment with the runtime and development dependencies, at
# the exact versions CI installs (constraints/), so a green CI is reproducible.
#
#   scripts/venv.sh [VENV]                 python3 (or $PYTHON); its constraints file:
#                                          Python 3.11 -> constraints/oldest.txt (ansible-core
#                                          2.19; 3.12 too: ansible-core 2.22 needs 3.13),
#                                          3.13 and later -> constraints/newest.txt (2.22)
#   GPUPROV_CONSTRAINTS=FILE scripts/venv.sh [VENV]   another constraints file
#   scripts/venv.sh --lock FILE [VENV]     resolve afresh within pyproject.toml's ranges (and
#                                          the ansible-core of $GPUPROV_ANSIBLE_CORE, e.g.
#                                          '==2.19.*'), then write the versions to FILE
set -euo pipefail
cd "$(dirname "$0")/.."
lock=
if [ "${1:-}" = "--lock" ]; then
  lock=${2:?usage: scripts/venv.sh --lock FILE [VENV]}
  shift 2
fi
venv=${1:-.venv}
python=${PYTHON:-python3}
"$python" -m venv "$venv"
pip=("$venv/bin/pip" --disable-pip-version-check)
"${pip[@]}" install -q -U pip
if [ -n "$lock" ]; then
  "${pip[@]}" install -q -e '.[dev]' ${GPUPROV_ANSIBLE_CORE:+"ansible-core$GPUPROV_ANSIBLE_CORE"}
  {
    echo "# Exact versions CI installs (scripts/venv.sh, .ci/run): Python $("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])'),"
    echo "# written by: scripts/venv.sh --lock $lock (docs/install.md)."
    "${pip[@]}" freeze --exclude-editable | grep -v '^gpuprov'
  } >"$lock"
  echo "venv: wrote $lock"
  exit 0
fi
minor=$("$venv/bin/python" -c 'import sys; print(sys.version_info[1])')
default=constraints/newest.txt
# ansible-core 2.22 (newest.txt) requires Python 3.13; 2.19 (oldest.txt) runs on 3.11 and 3.12
[ "$minor" -le 12 ] && default=constraints/oldest.txt
constraints=${GPUPROV_CONSTRAINTS:-$default}
"${pip[@]}" install -q -c "$constraints" -e '.[dev]'
echo "venv: $venv with ansible-core $("$venv/bin/python" -c "import ansible.release as r; print(r.__version__)") ($constraints)"
