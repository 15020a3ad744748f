#!/usr/bin/env bash
# Create the project's virtual environment with the runtime and development dependencies.
set -euo pipefail
venv=${1:-.venv}
python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -U pip
"$venv/bin/pip" install -q --disable-pip-version-check -e '.[dev]'
