#!/usr/bin/env bash
# The wheel as a user installs it: build it, install it (not editable) into a fresh virtual
# environment outside the checkout, and run `provision` from another directory, so nothing
# can come from the checkout. Used by .ci/run; runs alone too: ./scripts/wheel-check.sh
# PYTHON (default python3) and GPUPROV_CONSTRAINTS (default: scripts/venv.sh's choice for that
# Python) pick the interpreter and the pinned versions: .ci/run runs it on the oldest and the
# newest supported ansible-core.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
work=$(mktemp -d /tmp/gpuprov-wheel.XXXXXX)
trap 'rm -rf "$work"' EXIT
"${PYTHON:-python3}" -m venv "$work/venv"
minor=$("$work/venv/bin/python" -c 'import sys; print(sys.version_info[1])')
constraints=${GPUPROV_CONSTRAINTS:-$repo/constraints/newest.txt}
[ -n "${GPUPROV_CONSTRAINTS:-}" ] || [ "$minor" -gt 11 ] || constraints=$repo/constraints/oldest.txt
"$work/venv/bin/pip" install -q --disable-pip-version-check build
"$work/venv/bin/python" -m build --wheel --outdir "$work/dist" . >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
wheel=$(ls "$work"/dist/gpuprov-*.whl)
echo "wheel-check: built $(basename "$wheel")"
"$work/venv/bin/pip" install -q --disable-pip-version-check -c "$constraints" "$wheel"
echo "wheel-check: ansible-core $("$work/venv/bin/python" -c "import ansible.release as r; print(r.__version__)"), Python 3.$minor ($(basename "$constraints"))"
mkdir "$work/elsewhere"
cd "$work/elsewhere"
expected=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$repo/orchestrator/__init__.py")
got=$("$work/venv/bin/provision" --version)
[ "$got" = "provision $expected" ] || { echo "wheel-check: --version says '$got', not $expected" >&2; exit 1; }
"$work/venv/bin/python" - "$repo" <<'PY'
import sys
from pathlib import Path
import orchestrator
from orchestrator import paths
where = Path(orchestrator.__file__).resolve()
assert Path(sys.argv[1]).resolve() not in where.parents, f"orchestrator imported from {where}"
assert paths.installed() and paths.SITE_PLAYBOOK.is_file(), paths.SOURCE_ROOT
for role in ("nvidia_driver", "docker", "nvidia_container_toolkit", "mig", "driver_upgrade"):
    assert (paths.ROLES_DIR / role / "tasks" / "main.yml").is_file(), role
print(f"wheel-check: installed in {where.parent}, collection in {paths.SOURCE_ROOT}")
PY
# Ansible finds the wheel's collection by itself, on its Python path (site-packages/
# ansible_collections), as it finds the collections of the ansible package
env -u ANSIBLE_COLLECTIONS_PATH -u ANSIBLE_COLLECTIONS_PATHS -u ANSIBLE_CONFIG \
  "$work/venv/bin/ansible-doc" gpuprov.nvidia.plan >"$work/doc.txt" 2>&1 ||
  { cat "$work/doc.txt"; exit 1; }
grep -q "site-packages/ansible_collections/gpuprov/nvidia/plugins/modules/plan.py" "$work/doc.txt" ||
  { cat "$work/doc.txt"; exit 1; }
"$work/venv/bin/provision" plan --facts "$repo/tests/recorded/fixtures/real" >"$work/plan.txt"
grep -q "^1 hosts: 1 planned" "$work/plan.txt" || { cat "$work/plan.txt"; exit 1; }
bundle=$("$work/venv/bin/python" -c 'from orchestrator import paths; print(paths.SOURCE_ROOT)')
# site.yml names its roles by FQCN: the collection path gpuprov gives Ansible (the bundle as
# gpuprov.nvidia, orchestrator/paths.py), not a roles path
collections=$(XDG_CACHE_HOME="$work/cache" "$work/venv/bin/python" -c \
  'from orchestrator import paths; print(paths.collections_dir())')
ANSIBLE_COLLECTIONS_PATH="$collections" "$work/venv/bin/ansible-playbook" --syntax-check \
  -i localhost, "$bundle/playbooks/site.yml" >/dev/null
# the collection's planner action imports its orchestrator under the collection's name (the
# wheel's collections folder links the installed package there); it plans this machine (and
# blocks it where it has no GPU: the planner's verdict, with the plan, is what is checked)
ANSIBLE_COLLECTIONS_PATH="$collections" "$work/venv/bin/ansible" localhost -c local -o \
  -m gpuprov.nvidia.plan >"$work/plan-action.txt" 2>&1 || true
grep -q '"gpuprov_roles"' "$work/plan-action.txt" || { cat "$work/plan-action.txt"; exit 1; }
echo "wheel-check: ok ($got; plan --facts, the site playbook's syntax and the plan action from $work/elsewhere)"
# The Ansible collection gpuprov.nvidia (galaxy.yml) builds from this checkout, and the
# installed one is runnable as gpuprov.nvidia.site (what AWX's collections/requirements.yml
# installs; tests/unit/test_collection.py installs it from git too).
"$work/venv/bin/ansible-galaxy" collection build --output-path "$work/galaxy" "$repo" >/dev/null
tarball=$(ls "$work"/galaxy/gpuprov-nvidia-*.tar.gz)
ANSIBLE_COLLECTIONS_PATH="$work/collections" "$work/venv/bin/ansible-galaxy" collection install \
  -p "$work/collections" "$tarball" >/dev/null
ANSIBLE_COLLECTIONS_PATH="$work/collections" "$work/venv/bin/ansible-playbook" --syntax-check \
  -i localhost, gpuprov.nvidia.site >/dev/null
echo "wheel-check: collection $(basename "$tarball") built, installed, gpuprov.nvidia.site ok"
