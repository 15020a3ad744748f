#!/usr/bin/env bash
# The checks Galaxy and Automation Hub judge a collection by (issue 50), on the tarball this
# tree builds (its tracked files, as a clean clone has them):
#   ansible-test sanity --local  ansible-core of $VENV on Python 3.11 (oldest), and of
#                                $NEWEST_VENV on Python 3.13+ (newest), 24 tests on the
#                                oldest, 23 on the newest (pylint: see sanity())
#                                (shellcheck: Debian's package, installed when missing);
#   galaxy-importer              on the tarball, as a Galaxy server imports it;
#   antsibull-docs               lint-collection-docs --plugin-docs (docs build and RST check).
# `make lint-peers` runs it (docs/benchmarks.md has its time); .ci/run calls that.
#
# Network: PyPI only, for the tools' venv (constraints/peers.txt) and the venvs ansible-test
# makes per sanity test (ansible-test's own pinned requirements). ansible-test fetches its pip
# bootstrap from ci-files.testing.ansible.com, which is not reachable here: its cache is given
# scripts/ansible-test-get-pip.py, which takes pip from Python's ensurepip, then from PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
venv=${VENV:-.venv}
newest=${NEWEST_VENV:-.venv-newest}
peers=${PEERS_VENV:-.venv-peers}
# ansible-test keeps its sanity venvs under ~/.ansible/test: a home of our own, kept between
# runs (.cache is ignored by git), so its pip bootstrap does not touch the user's
state=$root/.cache/peer-checks
export PIP_CACHE_DIR=${PIP_CACHE_DIR:-$HOME/.cache/pip}

# ansible-test's shellcheck test skips (a warning) without shellcheck: Debian's package, on CI
# (root) installed here
if ! command -v shellcheck >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get install -y -q shellcheck >/dev/null
  else
    echo "peer-checks: no shellcheck (apt-get install shellcheck)" >&2
    exit 2
  fi
fi
for v in "$venv" "$newest"; do
  [ -x "$v/bin/ansible-test" ] || { echo "peer-checks: no $v (scripts/venv.sh makes it)" >&2; exit 2; }
done
if [ ! -e "$peers/.installed" ]; then
  "${PEERS_PYTHON:-python3}" -m venv "$peers"
  "$peers/bin/pip" install -q --disable-pip-version-check -c constraints/peers.txt galaxy-importer antsibull-docs
  touch "$peers/.installed"
fi

work=$(mktemp -d /tmp/gpuprov-peers.XXXXXX)
trap 'rm -rf "$work"' EXIT
t0=$(date +%s)
lap() { echo "peer-checks: +$(( $(date +%s) - t0 )) s: $*"; }

# The tracked tree; galaxy.yml's repository is set at publication (it has none: no public
# address is known), and galaxy-importer requires one: the clone's own, clearly local.
mkdir -p "$work/tree"
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$work/tree"
grep -q '^repository:' "$work/tree/galaxy.yml" || echo "repository: file://$root" >>"$work/tree/galaxy.yml"
(cd "$work/tree" && "$root/$venv/bin/ansible-galaxy" collection build --output-path "$work/out" >/dev/null)
tarball=$(echo "$work"/out/*.tar.gz)
collection=$work/ac/ansible_collections/gpuprov/nvidia
mkdir -p "$collection"
tar -xzf "$tarball" -C "$collection"
lap "built $(basename "$tarball") ($(tar -tzf "$tarball" | wc -l) entries)"

sanity() { # VENV: ansible-test sanity with that venv's ansible-core and Python
  local v=$1 py pip_version home skip=() reqs
  py=$("$root/$v/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  # ansible-core 2.22.0rc1's ansible-test pins pylint's dependency dill to a GitHub archive
  # (its requirements/sanity.pylint.txt: "dill @ https://github.com/..."), which neither this
  # machine nor CI can reach (PyPI only): its pylint test is then left out and said so; the
  # oldest leg's pylint runs (docs/collection.md)
  reqs=$("$root/$v/bin/python" -c 'import ansible_test, os; print(os.path.dirname(ansible_test.__file__))')/_data/requirements/sanity.pylint.txt
  if grep -q '@ https\?://' "$reqs" 2>/dev/null; then
    skip=(--skip-test pylint)
    lap "ansible-test sanity ($v): pylint left out: its requirements name a URL outside PyPI: $(grep -o '^[A-Za-z0-9_.-]* @ [^#]*' "$reqs" | head -1)"
  fi
  pip_version=$("$root/$v/bin/python" -c 'import types
from ansible_test._internal.python_requirements import get_venv_packages
print(get_venv_packages(types.SimpleNamespace(version="'"$py"'"))["pip"])')
  home=$state/home-$py
  mkdir -p "$home/.ansible/test/cache"
  cp "$root/scripts/ansible-test-get-pip.py" "$home/.ansible/test/cache/get_pip_${pip_version//./_}.py"
  (cd "$collection" && rm -rf tests/output &&
    HOME=$home PATH="$root/$v/bin:$PATH" "$root/$v/bin/ansible-test" sanity --local --python "$py" \
      --color no "${skip[@]}" >"$work/sanity-$py.log" 2>&1) || {
    grep -v '^\(Collecting\|Downloading\|Installing\|Successfully\|Requirement\|Using cached\|Processing\|Looking\|Attempting\|Found existing\|Uninstalling\)\|━' "$work/sanity-$py.log" >&2
    echo "peer-checks: ansible-test sanity failed ($v, Python $py)" >&2
    return 1
  }
  lap "ansible-test sanity: ansible-core $("$root/$v/bin/python" -c 'import ansible.release as r; print(r.__version__)'), Python $py: passed${skip:+ (without pylint)}"
}
sanity "$venv"
sanity "$newest"

# galaxy-importer runs ansible-doc and ansible-lint from PATH (and gives ansible-lint 180 s);
# it writes importer_result.json where it runs
if ! (cd "$work" && PATH="$root/$peers/bin:$PATH" "$root/$peers/bin/python" -m galaxy_importer.main "$tarball") >"$work/importer.log" 2>&1 ||
  grep -q '^ERROR' "$work/importer.log"; then
  cat "$work/importer.log" >&2
  echo "peer-checks: galaxy-importer failed" >&2
  exit 1
fi
grep -v '^Loading ' "$work/importer.log"
lap "galaxy-importer: passed"

(cd "$collection" && PATH="$root/$peers/bin:$PATH" "$root/$peers/bin/antsibull-docs" lint-collection-docs --plugin-docs .) || {
  echo "peer-checks: antsibull-docs lint-collection-docs failed" >&2
  exit 1
}
lap "antsibull-docs lint-collection-docs --plugin-docs: passed"
