"""Build the lab's apt repository of test doubles: .deb files with dpkg-deb, flat repository
indexes (Packages, Release) like NVIDIA's, signed with a throwaway GnuPG key.

The key is generated per state directory and never leaves the lab; lab hosts get its public
half (`gpgkey`, ASCII-armored, like https://nvidia.github.io/libnvidia-container/gpgkey) and
apt verifies every index against it through `signed_by`.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from email.utils import formatdate
from pathlib import Path

from aptrepo.packages import CUDA_REPOS, TOOLKIT_REPO, Package, all_packages

PAYLOAD = Path(__file__).resolve().parent / "payload"
KEY_UID = "gpuprov lab test-double repository (throwaway key) <lab@gpuprov.invalid>"
SOURCE_DATE_EPOCH = 1764374400  # 2025-11-29: fixed so rebuilt packages are byte-identical
TOOLKIT_COMMIT = "0000000000000000000000000000000000000000"


class AptRepoBuildError(RuntimeError):
    """A step of building the test-double repository failed (names the command and its output)."""


@dataclass(frozen=True)
class BuiltRepo:
    root: Path  # served over HTTP as /
    fingerprint: str
    toolkit_dir: str  # e.g. "libnvidia-container/stable/deb/amd64"
    cuda_dirs: tuple[str, ...]


def _run(argv: list[str], *, env: dict[str, str] | None = None, stdin: str | None = None) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, env=env, input=stdin, check=False)
    if done.returncode != 0:
        raise AptRepoBuildError(
            f"`{' '.join(argv)}` exited {done.returncode}: {done.stderr.strip() or done.stdout}"
        )
    return done.stdout


def inputs_digest() -> str:
    """Digest of everything a build reads: rebuild only when the test doubles change."""
    digest = hashlib.sha256()
    payload = [p for p in PAYLOAD.iterdir() if p.is_file()]
    for path in sorted([*payload, Path(__file__), Path(__file__).with_name("packages.py")]):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _substitute(text: str, package: Package) -> str:
    return text.replace("@VERSION@", package.upstream).replace("@COMMIT@", TOOLKIT_COMMIT)


def _control(package: Package, installed_kib: int) -> str:
    fields = {
        "Package": package.name,
        "Version": package.version,
        "Architecture": "amd64",
        "Maintainer": "gpuprov lab <lab@gpuprov.invalid>",
        "Installed-Size": str(installed_kib),
        "Section": "utils",
        "Priority": "optional",
        **({"Depends": ", ".join(package.depends)} if package.depends else {}),
        **package.extra_control,
        "Description": f"{package.description}\n"
        " TEST DOUBLE built by gpuprov's lab (tests/lab/aptrepo): not NVIDIA's package.",
    }
    return "".join(f"{key}: {value}\n" for key, value in fields.items())


def build_deb(package: Package, out_dir: Path) -> Path:
    """Build one stand-in package with dpkg-deb; returns the .deb path."""
    with tempfile.TemporaryDirectory(prefix="aptrepo-") as tmp:
        root = Path(tmp) / "root"
        for item in package.files:
            target = root / item.target
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(_substitute((PAYLOAD / item.source).read_text(), package))
            target.chmod(item.mode)
        doc = root / "usr/share/doc" / package.name / "README.test-double"
        doc.parent.mkdir(parents=True, exist_ok=True)
        doc.write_text(
            f"{package.name} {package.version} is a TEST DOUBLE from gpuprov's lab\n"
            "(tests/lab/aptrepo), not NVIDIA's package. See that directory's README.md.\n"
        )
        size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
        control = root / "DEBIAN" / "control"
        control.parent.mkdir(parents=True)
        control.write_text(_control(package, max(1, size // 1024)))
        for directory, _, files in os.walk(root):
            for name in [*files, ""]:
                os.utime(Path(directory) / name, (SOURCE_DATE_EPOCH, SOURCE_DATE_EPOCH))
        deb = out_dir / f"{package.name}_{package.version}_amd64.deb"
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(SOURCE_DATE_EPOCH)}
        _run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb)], env=env)
    return deb


def _packages_stanza(deb: Path) -> str:
    control = _run(["dpkg-deb", "--field", str(deb)])
    data = deb.read_bytes()
    return (
        control.rstrip("\n")
        + f"\nFilename: ./{deb.name}\nSize: {len(data)}\n"
        + f"MD5sum: {hashlib.md5(data).hexdigest()}\n"
        + f"SHA256: {hashlib.sha256(data).hexdigest()}\n"
    )


def _write_indexes(directory: Path, label: str) -> None:
    stanzas = [_packages_stanza(deb) for deb in sorted(directory.glob("*.deb"))]
    packages = "\n".join(stanzas).encode()
    (directory / "Packages").write_bytes(packages)
    (directory / "Packages.gz").write_bytes(gzip.compress(packages, mtime=SOURCE_DATE_EPOCH))
    sums: dict[str, list[str]] = {"MD5Sum": [], "SHA256": []}
    for name in ("Packages", "Packages.gz"):
        data = (directory / name).read_bytes()
        sums["MD5Sum"].append(f" {hashlib.md5(data).hexdigest()} {len(data)} {name}")
        sums["SHA256"].append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}")
    release = (
        f"Origin: gpuprov-lab\nLabel: {label} (test doubles)\nArchitectures: amd64\n"
        f"Date: {formatdate(SOURCE_DATE_EPOCH, usegmt=True)}\n"
        + "".join(f"{key}:\n" + "\n".join(lines) + "\n" for key, lines in sums.items())
    )
    (directory / "Release").write_text(release)


def _gpg(home: Path, *args: str) -> str:
    return _run(["gpg", "--homedir", str(home), "--batch", "--yes", "--quiet", *args])


def _ensure_key(home: Path) -> str:
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    listing = _gpg(home, "--with-colons", "--list-secret-keys")
    if "fpr:" not in listing:
        _gpg(home, "--passphrase", "", "--quick-gen-key", KEY_UID, "ed25519", "sign", "never")
        listing = _gpg(home, "--with-colons", "--list-secret-keys")
    return next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))


def _sign(home: Path, fingerprint: str, directory: Path) -> None:
    release = str(directory / "Release")
    _gpg(home, "-u", fingerprint, "--clearsign", "-o", str(directory / "InRelease"), release)
    _gpg(home, "-u", fingerprint, "-abs", "-o", str(directory / "Release.gpg"), release)


def build_repo(state_dir: Path) -> BuiltRepo:
    """Build (or reuse, when the inputs did not change) the repository under state_dir/www.

    Labs started side by side share it: one build at a time (a lock file)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with (state_dir / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build_locked(state_dir)


def _build_locked(state_dir: Path) -> BuiltRepo:
    home = state_dir / "gnupg"
    fingerprint = _ensure_key(home)
    root = state_dir / "www"
    stamp = state_dir / "inputs.sha256"
    digest = inputs_digest()
    if not (stamp.exists() and stamp.read_text() == digest and root.is_dir()):
        shutil.rmtree(root, ignore_errors=True)
        for package in all_packages():
            directory = root / package.repo
            directory.mkdir(parents=True, exist_ok=True)
            build_deb(package, directory)
        for repo in (TOOLKIT_REPO, *CUDA_REPOS):
            _write_indexes(root / repo, repo.split("/")[0])
            _sign(home, fingerprint, root / repo)
        armored = _gpg(home, "--armor", "--export", fingerprint)
        (root / "gpgkey").write_text(armored)
        (root / "libnvidia-container" / "gpgkey").write_text(armored)
        stamp.write_text(digest)
    return BuiltRepo(root, fingerprint, TOOLKIT_REPO, CUDA_REPOS)


def verify_repo(repo: BuiltRepo) -> None:
    """Check every index signature with gpgv against the public key alone, as apt does."""
    with tempfile.TemporaryDirectory(prefix="aptrepo-verify-") as tmp:
        keyring = Path(tmp) / "key.gpg"
        _run(["gpg", "--batch", "--dearmor", "-o", str(keyring), str(repo.root / "gpgkey")])
        for directory in (repo.toolkit_dir, *repo.cuda_dirs):
            base = repo.root / directory
            _run(["gpgv", "--keyring", str(keyring), str(base / "InRelease")])
            _run(
                [
                    "gpgv",
                    "--keyring",
                    str(keyring),
                    str(base / "Release.gpg"),
                    str(base / "Release"),
                ]
            )
