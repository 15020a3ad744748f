"""The repository-key check of the docker and nvidia_container_toolkit roles
(roles/*/tasks/repo-key.yml): the inline Python that fetches a key and computes its OpenPGP
fingerprints, run here against keys made by this machine's gpg and compared with what
`gpg --show-keys` prints; the two roles carry the same code."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = ("docker", "nvidia_container_toolkit")
TASK = "Fetch the repository signing key and read its fingerprint"

pytestmark = [
    pytest.mark.ansible,  # the roles' key check through real gpg (the ansible tier)
    pytest.mark.skipif(shutil.which("gpg") is None, reason="gpg is not installed"),
]


def _code(role: str) -> str:
    tasks = yaml.safe_load((REPO / "roles" / role / "tasks" / "repo-key.yml").read_text())
    (task,) = [t for t in tasks if t["name"] == TASK]
    argv = task["ansible.builtin.command"]["argv"]
    assert argv[1] == "-c"
    return str(argv[2])


def _run(url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _code("docker"), url], capture_output=True, text=True, check=False
    )


def _gpg(home: Path, *args: str) -> str:
    env = {**os.environ, "GNUPGHOME": str(home)}
    done = subprocess.run(
        ["gpg", "--batch", "--passphrase", "", *args],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return done.stdout


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Two keys (ed25519 with a subkey, rsa3072), exported apart and together."""
    home = tmp_path_factory.mktemp("gnupg")
    home.chmod(0o700)
    _gpg(home, "--quick-gen-key", "one <one@invalid>", "ed25519", "sign", "never")
    _gpg(home, "--quick-gen-key", "two <two@invalid>", "rsa3072", "sign", "never")
    listing = _gpg(home, "--with-colons", "--list-keys")
    primaries = [
        line.split(":")[9]
        for previous, line in zip(listing.splitlines(), listing.splitlines()[1:], strict=False)
        if previous.startswith("pub:") and line.startswith("fpr:")
    ]
    _gpg(home, "--quick-add-key", primaries[0], "cv25519", "encr", "never")
    out = tmp_path_factory.mktemp("keys")
    files = {}
    for name, selection in (("one", [primaries[0]]), ("two", [primaries[1]]), ("both", primaries)):
        path = out / f"{name}.asc"
        _gpg(home, "--armor", "--yes", "--output", str(path), "--export", *selection)
        files[name] = path
    return {"fingerprints": primaries, "files": files}


def test_the_two_roles_carry_the_same_code() -> None:
    assert _code("docker") == _code("nvidia_container_toolkit")


def test_fingerprints_match_gpg(keys: dict[str, object]) -> None:
    files, fingerprints = keys["files"], keys["fingerprints"]
    assert isinstance(files, dict) and isinstance(fingerprints, list)
    for name, expected in (
        ("one", fingerprints[:1]),
        ("two", fingerprints[1:]),
        ("both", fingerprints),
    ):
        path = files[name]
        done = _run(path.as_uri())
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        # Primary keys only (the ed25519 key's encryption subkey is not listed).
        assert result["fingerprints"] == expected
        assert result["key"] == path.read_text()
        shown = subprocess.run(
            ["gpg", "--batch", "--show-keys", "--with-colons", str(path)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert all(f"fpr:::::::::{fpr}:" in shown for fpr in expected)


def test_a_file_that_is_not_an_armored_key_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "gpg"
    page.write_text("<html>404 Not Found</html>\n")
    done = _run(page.as_uri())
    assert done.returncode == 1
    assert "is not an ASCII-armored OpenPGP public key" in done.stderr


def test_an_unreachable_url_is_named(tmp_path: Path) -> None:
    done = _run((tmp_path / "missing.asc").as_uri())
    assert done.returncode == 1
    assert "cannot fetch file://" in done.stderr and "missing.asc" in done.stderr
