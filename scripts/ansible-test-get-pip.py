"""Stands in for get-pip.py, the script ansible-test downloads from ci-files.testing.ansible.com
to put pip into each empty virtual environment it makes for a sanity test (the machines that
run our checks reach PyPI only). scripts/peer-checks.sh places it in ansible-test's cache
(~/.ansible/test/cache/get_pip_<version>.py), where ansible-test runs it as it would run
get-pip.py: with pip's install options and the packages to install (pip==<version> and the
like). pip comes from Python's own ensurepip, then installs those packages from PyPI.
"""

from __future__ import annotations

import subprocess
import sys

# get-pip.py's own options, which pip install does not take
OWN = {"--no-setuptools", "--no-wheel"}

subprocess.run([sys.executable, "-m", "ensurepip", "--upgrade", "--default-pip"], check=True)
args = [a for a in sys.argv[1:] if a not in OWN]
sys.exit(subprocess.run([sys.executable, "-m", "pip", "install", *args], check=False).returncode)
