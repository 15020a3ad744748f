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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from email.utils import formatdate
from pathlib import Path

from aptrepo import contents, dcgm, debianarchive, reference
from aptrepo.debianrecord import COMPONENTS, RECORDED
from aptrepo.graphs import replay_packages
from aptrepo.packages import (
    CUDA_OSES,
    CUDA_REPOS,
    GENERATED_SCRIPTS,
    TOOLKIT_REPO,
    Package,
    all_packages,
    cuda_key_file,
)

PAYLOAD = Path(__file__).resolve().parent / "payload"
KEY_UID = "gpuprov lab test-double repository (throwaway key) <lab@gpuprov.invalid>"
SOURCE_DATE_EPOCH = 1764374400  # 2025-11-29: fixed so rebuilt packages are byte-identical
TOOLKIT_COMMIT = "0000000000000000000000000000000000000000"


def default_state_dir() -> Path:
    """Where the lab keeps the repository: <repo>/.lab/.aptrepo (GPUPROV_LAB_DIR overrides .lab)."""
    base = os.environ.get("GPUPROV_LAB_DIR") or str(Path(__file__).resolve().parents[3] / ".lab")
    return Path(base) / ".aptrepo"


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
    here = Path(__file__).resolve().parent
    inputs = [p for p in PAYLOAD.rglob("*") if p.is_file()]
    inputs += [*here.glob("*.py"), reference.SELECTION, reference.REFERENCE, contents.FILES]
    inputs.append(dcgm.REFERENCE)
    inputs += [p for p in RECORDED.rglob("*") if p.is_file()]
    for path in sorted(inputs):
        digest.update(str(path.relative_to(here.parents[2])).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _substitute(text: str, package: Package) -> str:
    text = text.replace("@VERSION@", package.upstream).replace("@COMMIT@", TOOLKIT_COMMIT)
    for key, value in package.substitutions.items():
        text = text.replace(key, value)
    return text


def _control(package: Package, installed_kib: int, *, index_only: bool = False) -> str:
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
        " TEST DOUBLE built by gpuprov's lab (tests/lab/aptrepo): not NVIDIA's package.\n"
        + (
            " Index-only: no package file exists (for apt-get --simulate)."
            if index_only
            else f" See /usr/share/doc/{package.name}/README.test-double."
        ),
    }
    return "".join(f"{key}: {value}\n" for key, value in fields.items())


def build_deb(package: Package, out_dir: Path) -> Path:
    """Build one stand-in package with dpkg-deb; returns the .deb path."""
    with tempfile.TemporaryDirectory(prefix="aptrepo-") as tmp:
        root = Path(tmp) / "root"
        for item in package.files:
            target = root / item.target
            target.parent.mkdir(parents=True, exist_ok=True)
            if item.link is not None:
                target.symlink_to(item.link)
                continue
            text = item.content if item.content is not None else (PAYLOAD / item.source).read_text()
            target.write_text(_substitute(text, package))
            target.chmod(item.mode)
        doc = root / "usr/share/doc" / package.name / "README.test-double"
        doc.parent.mkdir(parents=True, exist_ok=True)
        doc.write_text(
            f"{package.name} {package.version} is a TEST DOUBLE from gpuprov's lab\n"
            "(tests/lab/aptrepo), not NVIDIA's package. See that directory's README.md.\n\n"
            + package.origin.text()
        )
        size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
        debian = root / "DEBIAN"
        debian.mkdir(parents=True)
        (debian / "control").write_text(_control(package, max(1, size // 1024)))
        if package.conffiles:
            (debian / "conffiles").write_text("".join(f"{c}\n" for c in package.conffiles))
        for script, source in package.scripts.items():
            generated = {**GENERATED_SCRIPTS, **dcgm.GENERATED_SCRIPTS}
            text = generated.get(source) or (PAYLOAD / source).read_text()
            (debian / script).write_text(_substitute(text, package))
            (debian / script).chmod(0o755)
        for directory, _, files in os.walk(root):
            for name in [*files, ""]:
                os.utime(
                    Path(directory) / name,
                    (SOURCE_DATE_EPOCH, SOURCE_DATE_EPOCH),
                    follow_symlinks=False,
                )
        # no epoch in the file name, as in Debian's pools (1:4.6.0-1 -> _4.6.0-1_)
        deb = out_dir / f"{package.name}_{package.version.split(':', 1)[-1]}_amd64.deb"
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(SOURCE_DATE_EPOCH)}
        _run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb)], env=env)
    return deb


def _packages_stanza(deb: Path, filename: str | None = None) -> str:
    control = _run(["dpkg-deb", "--field", str(deb)])
    data = deb.read_bytes()
    return (
        control.rstrip("\n")
        + f"\nFilename: {filename or './' + deb.name}\nSize: {len(data)}\n"
        + f"MD5sum: {hashlib.md5(data).hexdigest()}\n"
        + f"SHA256: {hashlib.sha256(data).hexdigest()}\n"
    )


def _replay_stanza(package: Package) -> str:
    """An index-only stanza: no .deb behind it (apt-get --simulate never downloads)."""
    return (
        _control(package, 1, index_only=True).rstrip("\n")
        + f"\nFilename: ./{package.name}_{package.version}_amd64.deb\nSize: 1\n"
    )


def write_replay(root: Path) -> None:
    """The Ubuntu replays (aptrepo/graphs.py) as flat, index-only repositories."""
    by_repo: dict[str, list[Package]] = {}
    for package in replay_packages():
        by_repo.setdefault(package.repo, []).append(package)
    for repo, packages in by_repo.items():
        directory = root / repo
        directory.mkdir(parents=True, exist_ok=True)
        unique = {(p.name, p.version): p for p in packages}  # one signatures package per kernel
        order = [unique[key] for key in sorted(unique)]
        _write_indexes(directory, repo, [_replay_stanza(p) for p in order])
        _write_contents(directory, order)


def _write_contents(directory: Path, packages: list[Package]) -> None:
    """Contents-amd64: which package ships which file (aptrepo/contents.py, files.yaml)."""
    index = contents.contents_index((p.name, "test-double") for p in packages)
    (directory / "Contents-amd64").write_text(index)


def _write_packages(directory: Path, stanzas: list[str]) -> list[str]:
    """Packages and Packages.gz in `directory`; their file names."""
    directory.mkdir(parents=True, exist_ok=True)
    packages = "\n".join(stanzas).encode()
    (directory / "Packages").write_bytes(packages)
    (directory / "Packages.gz").write_bytes(gzip.compress(packages, mtime=SOURCE_DATE_EPOCH))
    return ["Packages", "Packages.gz"]


def _release(directory: Path, head: str, files: list[str]) -> None:
    """Release: `head` (its first fields), then the sums of `files` (relative to directory)."""
    sums: dict[str, list[str]] = {"MD5Sum": [], "SHA256": []}
    for name in files:
        data = (directory / name).read_bytes()
        sums["MD5Sum"].append(f" {hashlib.md5(data).hexdigest()} {len(data)} {name}")
        sums["SHA256"].append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}")
    release = head + "".join(f"{key}:\n" + "\n".join(lines) + "\n" for key, lines in sums.items())
    (directory / "Release").write_text(release)


def _write_indexes(directory: Path, label: str, stanzas: list[str] | None = None) -> None:
    if stanzas is None:
        stanzas = [_packages_stanza(deb) for deb in sorted(directory.glob("*.deb"))]
    files = _write_packages(directory, stanzas)
    head = (
        f"Origin: gpuprov-lab\nLabel: {label} (test doubles)\nArchitectures: amd64\n"
        f"Date: {formatdate(SOURCE_DATE_EPOCH, usegmt=True)}\n"
    )
    _release(directory, head, files)


def write_archive(root: Path, home: Path, fingerprint: str) -> None:
    """The double of Debian's archive (aptrepo/debianarchive.py) under root/debian, laid out as
    Debian's (dists/<suite>/<component>/binary-amd64/Packages, pool/), signed per suite."""
    archive = root / debianarchive.ARCHIVE_DIR
    entries = debianarchive.archive_packages()
    for entry in entries:
        (archive / entry.pool_path).mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=4) as pool:
        debs = list(pool.map(lambda e: build_deb(e.package, archive / e.pool_path), entries))
    for suite in debianarchive.suites():
        dists = archive / "dists" / suite
        files = []
        for component in COMPONENTS:
            stanzas = [
                _packages_stanza(deb, f"{entry.pool_path}/{deb.name}")
                for entry, deb in zip(entries, debs, strict=True)
                if (entry.suite, entry.component) == (suite, component)
            ]
            written = _write_packages(dists / component / "binary-amd64", stanzas)
            files += [f"{component}/binary-amd64/{name}" for name in written]
        recorded = debianarchive.release_fields(suite)
        head = (
            f"Origin: {recorded['Origin']}\n"
            f"Label: {recorded.get('Label', recorded['Origin'])} (gpuprov lab TEST DOUBLE)\n"
            f"Suite: {recorded['Suite']}\nVersion: {recorded.get('Version', '')}\n"
            f"Codename: {recorded['Codename']}\n"
            f"Date: {formatdate(SOURCE_DATE_EPOCH, usegmt=True)}\n"
            "Architectures: amd64\n"
            f"Components: {' '.join(COMPONENTS)}\n"
            f"Description: TEST DOUBLE of Debian's {suite} (contrib, non-free, non-free-firmware: "
            f"the driver's packages only), from {debianarchive.RECORDED_REL}\n"
        )
        _release(dists, head, files)
        _sign(home, fingerprint, dists)


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
        packages = all_packages() + dcgm.dcgm_packages()  # DCGM: from dcgm.yaml
        for directory in {package.repo for package in packages}:
            (root / directory).mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(lambda p: build_deb(p, root / p.repo), packages))
        for repo in (TOOLKIT_REPO, *CUDA_REPOS):
            _write_indexes(root / repo, repo)
            _write_contents(root / repo, [p for p in packages if p.repo == repo])
            _sign(home, fingerprint, root / repo)
        write_replay(root)
        write_archive(root, home, fingerprint)
        armored = _gpg(home, "--armor", "--export", fingerprint)
        (root / "gpgkey").write_text(armored)
        (root / "libnvidia-container" / "gpgkey").write_text(armored)
        for os_key, repo in zip(CUDA_OSES, CUDA_REPOS, strict=True):
            # The key file named as NVIDIA's for that repository (3bf863cc.pub, 8793F200.pub).
            (root / repo / cuda_key_file(os_key)).write_text(armored)
        stamp.write_text(digest)
    return BuiltRepo(root, fingerprint, TOOLKIT_REPO, CUDA_REPOS)


def verify_repo(repo: BuiltRepo) -> None:
    """Check every index signature with gpgv against the public key alone, as apt does."""
    with tempfile.TemporaryDirectory(prefix="aptrepo-verify-") as tmp:
        keyring = Path(tmp) / "key.gpg"
        _run(["gpg", "--batch", "--dearmor", "-o", str(keyring), str(repo.root / "gpgkey")])
        archive = [f"{debianarchive.ARCHIVE_DIR}/dists/{suite}" for suite in debianarchive.suites()]
        for directory in (repo.toolkit_dir, *repo.cuda_dirs, *archive):
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
