"""Resolve package sets against the Ubuntu replays (aptrepo/graphs.py) with REAL apt.

`simulate()` runs `apt-get install --simulate` with a private configuration (its own
Dir::State, Dir::Etc, Dir::Cache and sources), so the host's own apt state is never read or
changed, except that its dpkg status is copied as the base system (a real Debian system with
debconf etc.). It runs on this machine, or inside a lab host over the lab's SSH:

    from aptrepo.replay import simulate, lab_runner
    result = simulate("ubuntu2404", install=["nvidia-headless-no-dkms-580-server-open=..."],
                      runner=lab_runner(lab, lab.hosts[0]))
    result.ok, result.installs, result.error

Replay packages may be marked installed first (`installed=["name=version"]`), held
(`holds=`: dpkg's "hold" selection, as `apt-mark hold` sets it) and pinned (`pins=`: the
text of an apt preferences file, e.g. the role's or a pinning package's).
"""

from __future__ import annotations

import io
import re
import shlex
import subprocess
import tarfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aptrepo.build import build_repo, default_state_dir
from aptrepo.graphs import SERIES, ReplayRepo
from aptrepo.packages import CUDA_OSES, cuda_repo_dir

Runner = Callable[[str, bytes], "subprocess.CompletedProcess[bytes]"]
_INST = re.compile(r"^Inst (\S+) (?:\[(\S+)\] )?\((\S+) ", re.MULTILINE)
_REMV = re.compile(r"^Remv (\S+)", re.MULTILINE)

SCRIPT = r"""set -eu
D=$(mktemp -d /tmp/aptrepo-replay.XXXXXX)
trap 'rm -rf "$D"' EXIT
tar -x -C "$D"
mkdir -p "$D/lists/partial" "$D/cache/archives/partial" "$D/sources.d" "$D/prefs.d" "$D/state"
# The host's packages are the base system, except any the replays carry and any test double
# (an earlier test may have installed doubles on this host).
awk -v RS= -v ORS='\n\n' 'NR == FNR { skip[$0] = 1; next }
  /lab@gpuprov\.invalid/ { next }
  { split($0, l, "\n"); n = l[1]; sub(/^Package: /, "", n); if (!(n in skip)) print }' \
  RS='\n' "$D/names" RS= /var/lib/dpkg/status >"$D/status"
cat "$D/status.add" >>"$D/status"
sed -i "s#@D@#$D#g" "$D/sources.list"
set -- -q -o Dir::State="$D/state" -o Dir::State::Lists="$D/lists" \
  -o Dir::State::status="$D/status" -o Dir::Cache="$D/cache" \
  -o Dir::Etc::SourceList="$D/sources.list" -o Dir::Etc::SourceParts="$D/sources.d" \
  -o Dir::Etc::Preferences="$D/preferences" -o Dir::Etc::PreferencesParts="$D/prefs.d" \
  -o APT::Architecture=amd64 -o APT::Architectures::=amd64 -o Debug::NoLocking=1 \
  -o APT::Sandbox::User=root \
  -o APT::Install-Recommends=0 -o APT::Get::Show-Versions=1
apt-get "$@" update >"$D/update.log" 2>&1 || { cat "$D/update.log"; exit 90; }
exec apt-get "$@" --simulate $(cat "$D/options") install $(cat "$D/install")
"""


@dataclass(frozen=True)
class SimResult:
    ok: bool
    returncode: int
    installs: Mapping[str, str]  # package -> version apt would install
    upgrades_from: Mapping[str, str]  # package -> the version it replaces
    removes: tuple[str, ...]
    output: str
    error: str = ""  # apt's E:/unmet lines when it refused
    command: tuple[str, ...] = field(default_factory=tuple)


def _stanzas(path: Path) -> dict[tuple[str, str], str]:
    found: dict[tuple[str, str], str] = {}
    for block in path.read_text().strip().split("\n\n"):
        fields = dict(re.findall(r"^(Package|Version): (.*)$", block, re.MULTILINE))
        found[(fields["Package"], fields["Version"])] = block
    return found


def _status_entry(block: str, held: bool) -> str:
    kept = [line for line in block.splitlines() if not line.startswith(("Filename:", "Size:"))]
    status = "hold ok installed" if held else "install ok installed"
    return "\n".join([kept[0], f"Status: {status}", *kept[1:]]) + "\n"


def _tar(members: Mapping[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def local_runner(script: str, stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    """Run on this machine (apt-get must exist; nothing of the machine's apt state changes)."""
    return subprocess.run(
        ["sh", "-c", script], input=stdin, capture_output=True, check=False, timeout=300
    )


def lab_runner(lab: Any, host: str) -> Runner:
    """Run inside a lab host (orchestrator.lab.running.RunningLab) over its SSH."""
    from orchestrator.lab import hosts

    def run(script: str, stdin: bytes) -> subprocess.CompletedProcess[bytes]:
        argv = hosts.ssh_command(lab.paths, lab.ports[host], f"sh -c {shlex.quote(script)}")
        return subprocess.run(argv, input=stdin, capture_output=True, check=False, timeout=300)

    return run


def repo_directory(os_key: str, kind: str) -> str:
    """The replay of `os_key`/`kind`; for debian12/debian13, the CUDA double with .debs."""
    if os_key in CUDA_OSES:
        if kind != "cuda":
            raise ValueError(f"{os_key}: only the CUDA repository double ('cuda') exists")
        return cuda_repo_dir(os_key)
    return ReplayRepo(os_key, kind).directory


def simulate(
    os_key: str,
    *,
    install: Sequence[str],
    installed: Sequence[str] = (),
    pins: str = "",
    holds: Sequence[str] = (),
    repos: Sequence[str] = ("cuda", "canonical"),
    allow_downgrades: bool = False,
    provided: Sequence[str] = (),
    state_dir: Path | None = None,
    runner: Runner = local_runner,
) -> SimResult:
    """Resolve `install` (apt arguments: name, name=version) with real apt against the replay
    of `os_key` (ubuntu2204 | ubuntu2404); `repos` picks NVIDIA's CUDA repository, Canonical's
    archive, or both. debian12/debian13 resolve against the CUDA repository double
    (repos=("cuda",)). `provided` names packages from outside the replayed repositories
    (e.g. Debian's dkms) to count as installed: a stand-in status entry, version 0."""
    if os_key not in (*SERIES, *CUDA_OSES):
        raise ValueError(f"no replay for {os_key!r}; replays: {', '.join(SERIES + CUDA_OSES)}")
    built = build_repo(state_dir or default_state_dir())
    members: dict[str, bytes] = {}
    sources: list[str] = []
    known: dict[tuple[str, str], str] = {}
    for kind in repos:
        directory = built.root / repo_directory(os_key, kind)
        for name in ("Packages", "Packages.gz", "Release"):
            members[f"{kind}/{name}"] = (directory / name).read_bytes()
        sources.append(f"deb [trusted=yes] file:@D@/{kind} ./")
        known.update(_stanzas(directory / "Packages"))
    status: list[str] = []
    for item in installed:
        name, _, version = item.partition("=")
        block = known.get((name, version))
        if block is None:
            raise ValueError(f"installed={item!r}: no such stanza in the {os_key} replay")
        status.append(_status_entry(block, name in holds))
    for name in provided:
        status.append(
            f"Package: {name}\nStatus: install ok installed\nVersion: 0\nArchitecture: all\n"
            f"Maintainer: gpuprov lab <lab@gpuprov.invalid>\n"
            f"Description: stands for {name} from outside the replayed repositories\n"
        )
    unknown_holds = set(holds) - {i.partition("=")[0] for i in installed}
    if unknown_holds:
        raise ValueError(f"holds {sorted(unknown_holds)} are not in installed=")
    options = ["--allow-downgrades"] if allow_downgrades else []
    members.update(
        {
            "sources.list": ("\n".join(sources) + "\n").encode(),
            "status.add": "\n".join(status).encode() + (b"\n" if status else b""),
            "preferences": pins.encode(),
            "install": " ".join(shlex.quote(i) for i in install).encode(),
            "options": " ".join(options).encode(),
            "names": "".join(f"{name}\n" for name in sorted({n for n, _ in known})).encode(),
        }
    )
    done = runner(SCRIPT, _tar(members))
    output = done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
    if done.returncode == 90:
        raise RuntimeError(f"apt-get update of the {os_key} replay failed:\n{output}")
    installs = {m.group(1): m.group(3) for m in _INST.finditer(output)}
    upgrades = {m.group(1): m.group(2) for m in _INST.finditer(output) if m.group(2)}
    error = "\n".join(
        line
        for line in output.splitlines()
        if line.startswith("E:")
        or " : Depends:" in line
        or " : Conflicts:" in line
        or line.lstrip().startswith("Depends:")
    )
    return SimResult(
        ok=done.returncode == 0,
        returncode=done.returncode,
        installs=installs,
        upgrades_from=upgrades,
        removes=tuple(_REMV.findall(output)),
        output=output,
        error=error,
        command=("apt-get", "--simulate", *options, "install", *install),
    )
