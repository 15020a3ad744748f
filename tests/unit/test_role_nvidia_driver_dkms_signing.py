"""Secure Boot with DKMS on apt OSes: the configured signing key is honoured through DKMS's
own configuration (a framework.conf.d drop-in naming mok_signing_key and mok_certificate,
read after framework.conf, so it overrides Ubuntu's default of update-secureboot-policy's
MOK), and the certificate is stored in DER, the format mokutil reads. The role's task file
runs on this machine against a temporary directory (the role's internal paths overridden by
set_fact), with a throwaway key made here; a second run changes nothing."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
from roleplay import ANSIBLE_PLAYBOOK  # noqa: E402

# runs ansible-playbook (or ansible-doc / the role's modules) on this machine: the ansible tier
pytestmark = pytest.mark.ansible

# An Ubuntu-style DKMS configuration: framework.conf names update-secureboot-policy's MOK
# (vars/kernels.yml: Ubuntu's dkms signs with /var/lib/shim-signed/mok/MOK.der).
UBUNTU_FRAMEWORK = (
    'mok_signing_key="/var/lib/shim-signed/mok/MOK.priv"\n'
    'mok_certificate="/var/lib/shim-signed/mok/MOK.der"\n'
)


def _keypair(work: Path) -> tuple[str, str]:
    subprocess.run(
        ["openssl", "req", "-new", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=gpuprov test DKMS key/", "-keyout", str(work / "k.pem"),
         "-out", str(work / "c.pem")],
        check=True, capture_output=True,
    )  # fmt: skip
    return (work / "k.pem").read_text(), (work / "c.pem").read_text()


def _play(work: Path, key: str, cert: str) -> list[dict[str, object]]:
    root = work / "root"
    return [
        {
            "name": "DKMS signing",
            "hosts": "all",
            "gather_facts": False,
            "vars": {
                "nvidia_driver_dkms_signing_key": key,
                "nvidia_driver_dkms_signing_cert": cert,
            },
            "tasks": [
                {
                    "name": "Point the role's paths into the test directory",
                    "ansible.builtin.set_fact": {
                        "__nvidia_driver_dkms_key_dir": f"{root}/var/lib/dkms",
                        "__nvidia_driver_dkms_framework_dropin": (
                            f"{root}/etc/dkms/framework.conf.d/zz-gpuprov-signing.conf"
                        ),
                    },
                },
                {
                    "name": "Signing tasks",
                    "ansible.builtin.include_role": {
                        "name": "nvidia_driver",
                        "tasks_from": "dkms-signing-apt.yml",
                    },
                },
            ],
        }
    ]


def _run(work: Path, *extra: str) -> str:
    done = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local", *extra, "play.yml"],
        cwd=work,
        env={"ANSIBLE_ROLES_PATH": str(REPO / "roles"), "ANSIBLE_NOCOLOR": "1",
             "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
             "ANSIBLE_PYTHON_INTERPRETER": sys.executable},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return done.stdout


def _changed(output: str) -> int:
    match = re.search(r"localhost\s*:.*changed=(\d+)", output)
    assert match, output[-2000:]
    return int(match.group(1))


@pytest.fixture(scope="module")
def converged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str, str]:
    work = tmp_path_factory.mktemp("dkms_signing")
    key, cert = _keypair(work)
    framework = work / "root" / "etc" / "dkms" / "framework.conf"
    framework.parent.mkdir(parents=True)
    framework.write_text(UBUNTU_FRAMEWORK)
    (work / "play.yml").write_text(yaml.safe_dump(_play(work, key, cert), sort_keys=False))
    check = _run(work, "--check")
    first = _run(work)
    second = _run(work)
    return work, check, first, second


def test_dkms_reads_the_configured_key_last(converged: tuple[Path, str, str, str]) -> None:
    work, _, _, _ = converged
    etc = work / "root" / "etc" / "dkms"
    keys = work / "root" / "var" / "lib" / "dkms"
    # DKMS reads framework.conf, then framework.conf.d/*.conf: the last assignment wins.
    files = [etc / "framework.conf", *sorted((etc / "framework.conf.d").glob("*.conf"))]
    settings: dict[str, str] = {}
    for path in files:
        for name, value in re.findall(r'^(mok_\w+)="?([^"\n]*)"?$', path.read_text(), re.M):
            settings[name] = value
    assert settings == {
        "mok_signing_key": f"{keys}/mok.key",
        "mok_certificate": f"{keys}/mok.pub",
    }
    assert (keys / "mok.key").stat().st_mode & 0o777 == 0o600


def test_the_certificate_is_der(converged: tuple[Path, str, str, str]) -> None:
    work, _, _, _ = converged
    der = (work / "root" / "var" / "lib" / "dkms" / "mok.pub").read_bytes()
    assert der[:1] == b"\x30"  # an ASN.1 SEQUENCE, not "-----BEGIN"
    subject = subprocess.run(
        ["openssl", "x509", "-inform", "DER", "-noout", "-subject"],
        input=der, capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    assert "gpuprov test DKMS key" in subject


def test_check_mode_changes_nothing_and_a_second_run_is_idempotent(
    converged: tuple[Path, str, str, str],
) -> None:
    _, check, first, second = converged
    assert _changed(first) > 0
    assert _changed(second) == 0, second[-3000:]
    assert "changed=" in check  # check mode ran before anything existed
