"""EPEL's key is imported only with its recorded fingerprint (issue 27, item 7): the nvidia_driver
role's tasks/dkms-source-dnf.yml on a local host, with a key generated here (a test double of
RPM-GPG-KEY-EPEL-9) and dnf stubbed out. A key whose fingerprint differs stops the host at the
check, before rpm trusts it; the recorded fingerprint lets it through to the import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from roleplay import ACTION_PLUGINS  # gpuprov_test_record: the rescue records in the worker

# runs ansible-playbook (or ansible-doc / the role's modules) on this machine: the ansible tier
pytestmark = pytest.mark.ansible

REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "roles" / "nvidia_driver" / "tasks" / "dkms-source-dnf.yml"
EPEL9 = "FF8AD1344597106ECE813B918A3872BF3228467C"  # roles/nvidia_driver/vars/RedHat-9.yml


def _key(home: Path) -> tuple[Path, str]:
    home.mkdir(mode=0o700)
    gpg = ["gpg", "--batch", "--homedir", str(home)]
    subprocess.run(
        [*gpg, "--passphrase", "", "--quick-gen-key", "EPEL test double <t@example.invalid>",
         "ed25519", "sign", "never"],
        check=True, capture_output=True,
    )  # fmt: skip
    key = home / "key.asc"
    key.write_bytes(
        subprocess.run([*gpg, "--armor", "--export"], check=True, capture_output=True).stdout
    )
    listing = subprocess.run(
        [*gpg, "--with-colons", "--list-keys"], check=True, capture_output=True, text=True
    )
    fpr = next(ln.split(":")[9] for ln in listing.stdout.splitlines() if ln.startswith("fpr:"))
    return key, fpr


@pytest.mark.skipif(
    not any((Path(p) / "gpg").exists() for p in os.environ["PATH"].split(":")), reason="no gpg"
)
def test_a_key_with_another_fingerprint_is_refused(tmp_path: Path) -> None:
    key, fpr = _key(tmp_path / "gnupg")
    out = tmp_path / "out"
    out.mkdir()
    common = {
        "__nvidia_driver_dnf_dkms_from": "epel",
        "__nvidia_driver_dnf": ["sh", "-c", "exit 1", "sh"],  # "epel-release is not installed"
        "__nvidia_driver_dnf_root": str(tmp_path / "root"),
        "__nvidia_driver_epel_major": "9",
        "__nvidia_driver_epel_key": f"file://{key}",
        "__nvidia_driver_epel_release": "epel-release",
        "nvidia_driver_epel_key_url": "",
    }
    (tmp_path / "root" / "etc" / "pki" / "rpm-gpg").mkdir(parents=True)
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {"all": {"hosts": {
        "right": {**local, "__nvidia_driver_epel_key_fingerprint": fpr},
        "wrong": {**local, "__nvidia_driver_epel_key_fingerprint": EPEL9},
    }}}  # fmt: skip
    play = [{
        "hosts": "all", "gather_facts": False, "vars": common,
        "tasks": [{
            "name": "Run", "block": [{"ansible.builtin.include_tasks": str(TASKS)}],
            "rescue": [{"gpuprov_test_record": {
                "dest": f"{out}/{{{{ inventory_hostname }}}}.json",
                "content": "{{ {'task': ansible_failed_task.name, "
                           "'msg': ansible_failed_result.msg | default('')} | to_json }}",
            }}],
        }],
    }]  # fmt: skip
    (tmp_path / "inv.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "inv.yml", "play.yml"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_ACTION_PLUGINS": str(ACTION_PLUGINS)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    wrong = json.loads((out / "wrong.json").read_text())
    assert wrong["task"] == "Check EPEL's key fingerprint", wrong
    assert f"has fingerprint(s) {fpr}" in wrong["msg"] and "refusing to trust it" in wrong["msg"]
    right = json.loads((out / "right.json").read_text())  # past the check: rpm, dnf (stubbed)
    assert right["task"] in (
        "Import EPEL's key into the rpm database",
        "Install EPEL's release package (signature checked)",
    ), right


def test_the_recorded_fingerprints() -> None:
    for major, fpr in (("9", EPEL9), ("8", "94E279EB8D8F25B21810ADF121EA45AB2F86D6A1")):
        data = yaml.safe_load((REPO / f"roles/nvidia_driver/vars/RedHat-{major}.yml").read_text())
        assert data["__nvidia_driver_epel_key_fingerprint"] == fpr
