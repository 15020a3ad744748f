"""The DCGM test doubles, generated from tests/recorded/reference/dcgm.yaml (never from the
dcgm role's variables): DCGM 3's one package and DCGM 4's `-core` and `-cudaNN` packages with
the names, versions and relations the reference records, published in the debian12 CUDA
repository double; `-core` carries a `dcgmi` stand-in (payload/dcgmi) and the
`nvidia-dcgm` unit generated field by field from the reference.

These are NOT NVIDIA's packages: every one says "test double" and carries a README.test-double
naming the reference entries it came from. What the reference does not say (the file lists of
the packages, the exit status of a MIG refusal) the generator chooses and says so.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from aptrepo.packages import CUDA_REPOS, Package, PayloadFile

REPO = Path(__file__).resolve().parents[3]
REFERENCE = REPO / "tests" / "recorded" / "reference" / "dcgm.yaml"
REFERENCE_REL = "tests/recorded/reference/dcgm.yaml"
# Published in the debian12 CUDA repository double (dcgm.packages.dcgm4.repository: "the CUDA
# network repository"); which recorded releases: dcgm.packages.dcgm4.versions_seen.
DCGM4_PUBLISHED = ("4.5.2", "4.6.0")
SHAPES_PATH = "/usr/share/datacenter-gpu-manager-4-core/test-double/diag-shapes.json"
DEBIAN12_REPO = CUDA_REPOS[0]


class DcgmReferenceError(ValueError):
    """dcgm.yaml does not say what the generator needs."""


@functools.lru_cache(maxsize=1)
def data() -> Mapping[str, Any]:
    loaded = yaml.safe_load(REFERENCE.read_text(encoding="utf-8"))
    if not isinstance(loaded, dict):
        raise DcgmReferenceError(f"{REFERENCE} is not a mapping")
    return loaded


def at(path: str) -> Any:
    node: Any = data()
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise DcgmReferenceError(f"{REFERENCE_REL} has no entry {path!r}")
        node = node[part]
    return node


@dataclass(frozen=True)
class DcgmOrigin:
    """Where a DCGM stand-in comes from (the interface of aptrepo.reference.Origin)."""

    entries: tuple[str, ...]
    notes: tuple[str, ...] = ()

    def text(self) -> str:
        lines = [f"Generated from {REFERENCE_REL}:"]
        for entry in self.entries:
            node = at(entry)
            certainty = (
                node.get("certainty", "see the parent entry") if isinstance(node, dict) else ""
            )
            lines.append(f"  - {entry} (certainty: {certainty})")
            sources = node.get("source", []) if isinstance(node, dict) else []
            flat = sources.values() if isinstance(sources, dict) else [sources]
            seen: list[str] = []
            for group in flat:
                seen += [str(s) for s in (group if isinstance(group, list) else [group])]
            lines += [f"      source: {s}" for s in dict.fromkeys(seen)]
        if self.notes:
            lines.append("Not recorded there (the generator's own choice):")
            lines += [f"  - {note}" for note in self.notes]
        return "\n".join(lines) + "\n"

    def short(self) -> str:
        return ", ".join(self.entries)


def _describe(what: str, origin: DcgmOrigin) -> str:
    return f"test double of {what}\n from {REFERENCE_REL}: {origin.short()}"


def deb_version(upstream: str) -> str:
    """'4.6.0' -> '1:4.6.0-1', by dcgm.packages.dcgm4.version_format ('1:4.5.2-1' (deb))."""
    text = str(at("dcgm.packages.dcgm4.version_format"))
    match = re.search(r"'(\d+):\d+\.\d+\.\d+(-\d+)' \(deb\)", text)
    if not match:
        raise DcgmReferenceError(f"dcgm.packages.dcgm4.version_format not understood: {text}")
    if upstream not in [str(v) for v in at("dcgm.packages.dcgm4.versions_seen")]:
        raise DcgmReferenceError(f"DCGM {upstream} is not in dcgm.packages.dcgm4.versions_seen")
    return f"{match.group(1)}:{upstream}{match.group(2)}"


def dcgm3_version() -> str:
    """The debian12 DCGM 3 version the reference records ('1:3.3.0 (debian12)')."""
    text = str(at("dcgm.packages.dcgm3.version_example"))
    match = re.search(r"(\d+:\d+\.\d+\.\d+) \(debian12\)", text)
    if not match:
        raise DcgmReferenceError(f"dcgm.packages.dcgm3.version_example has no debian12: {text}")
    return match.group(1)


def names() -> dict[str, str]:
    """core / cuda12 / cuda13 / dcgm3 / provides, as the reference writes them."""
    deb = [str(n) for n in at("dcgm.packages.dcgm4.built_from_open_source_tree.deb")]
    prefix = str(at("dcgm.packages.dcgm4.prefix"))
    found = {k: f"{prefix}-{k}" for k in ("core", "cuda12", "cuda13")}
    missing = [n for n in found.values() if n not in deb]
    if missing:
        raise DcgmReferenceError(f"dcgm.packages.dcgm4 lists no {missing}")
    return {**found, "dcgm3": str(at("dcgm.packages.dcgm3.name")), "provides": prefix}


def _relations() -> dict[str, str]:
    """dcgm.packages.dcgm4.relations, read into control fields."""
    text = str(at("dcgm.packages.dcgm4.relations"))
    conflicts = re.search(r"core Conflicts (\S+) \(3\.x\)", text)
    depends = re.search(r"core Depends (\S+), Pre-Depends ([\w, ]+?);", text)
    cuda = re.search(r"-cudaNN Depends core \(= epoch:ver-rel\) and Provides (\S+?);", text)
    if not (conflicts and depends and cuda):
        raise DcgmReferenceError(f"dcgm.packages.dcgm4.relations not understood: {text}")
    return {
        "core_conflicts": conflicts.group(1),
        "core_depends": depends.group(1),
        "core_pre_depends": depends.group(2).replace(" ", "").replace(",", ", "),
        "cuda_provides": cuda.group(1),
    }


def nvidia_dcgm_unit() -> str:
    """nvidia-dcgm.service, field by field from dcgm.service."""
    svc = at("dcgm.service")
    ordering = str(svc["ordering"])
    target = re.search(r"After/Wants (\S+);", ordering)
    restart = re.search(r"Restart=(\S+);", ordering)
    wanted = re.search(r"WantedBy (\S+)", ordering)
    if not (target and restart and wanted):
        raise DcgmReferenceError(f"dcgm.service.ordering not understood: {ordering}")
    lines = [
        "# TEST DOUBLE unit (tests/lab/aptrepo), generated from tests/recorded/reference/",
        "# dcgm.yaml dcgm.service: ExecStart is the stand-in nv-hostengine.",
        "[Unit]",
        "Description=NVIDIA DCGM host engine (gpuprov lab test double)",
        f"Wants={target.group(1)}",
        f"After={target.group(1)}",
        "",
        "[Service]",
        f'Environment="{svc["environment"]}"',
        f"ExecStart={svc['exec']}",
        f"Restart={restart.group(1)}",
        "",
        "[Install]",
        f"WantedBy={wanted.group(1)}",
        f"Alias={svc['alias']}",
    ]
    return "\n".join(lines) + "\n"


def core_postinst() -> str:
    """What dcgm.service.user says the core postinst does: the nvidia-dcgm system user."""
    user = str(at("dcgm.service.user"))
    useradd = re.search(r"\((created by the core postinst with )(useradd [^)]+)\)", user)
    logdir = re.search(r"log dir (\S+)", user)
    account = re.search(r"drops to the system user (\S+)", user)
    if not (useradd and logdir and account):
        raise DcgmReferenceError(f"dcgm.service.user not understood: {user}")
    name = account.group(1)
    return (
        "#!/bin/sh\n"
        "# TEST DOUBLE (tests/lab/aptrepo): dcgm.service.user of the DCGM reference.\n"
        "set -e\n"
        'if [ "$1" = configure ]; then\n'
        f"  id -u {name} >/dev/null 2>&1 || {useradd.group(2)} {name}\n"
        f"  mkdir -p {logdir.group(1)}\n"
        "fi\n"
    )


HOSTENGINE = """#!/bin/sh
# TEST DOUBLE of nv-hostengine (tests/lab/aptrepo), DCGM @VERSION@: NOT NVIDIA's host engine.
# It only stays in the foreground (-n) so that the nvidia-dcgm unit is active and the dcgmi
# stand-in finds a process named nv-hostengine; it watches no GPU.
log=${DCGM_HOME_DIR:-/var/log/nvidia-dcgm}/nv-hostengine.log
echo "nv-hostengine test double $* (gpuprov lab)" >>"$log" 2>/dev/null || true
while :; do sleep 3600; done
"""

DCGM3_DCGMI = """#!/bin/sh
# TEST DOUBLE of DCGM 3's dcgmi (tests/lab/aptrepo), @VERSION@: a leftover to be replaced.
echo "dcgmi (DCGM @VERSION@, gpuprov lab test double of DCGM 3): not modelled" >&2
exit 1
"""


def exporter_version() -> str:
    """The exporter of the newest recorded image tag '<dcgm>-<exporter>-<flavour>', revision -1
    (dcgm.exporter.container_image, e.g. 4.5.3-4.8.2-distroless -> 4.8.2-1; the host
    package's own version is not recorded: the revision is the generator's choice)."""
    text = str(at("dcgm.exporter.container_image"))
    tags = re.findall(r"(\d+\.\d+\.\d+)-(\d+\.\d+\.\d+)-[a-z]+", text)
    if not tags:
        raise DcgmReferenceError(f"dcgm.exporter.container_image has no tag: {text}")
    return f"{tags[-1][1]}-1"


def exporter_unit() -> str:
    """nvidia-dcgm-exporter.service, from dcgm.exporter.host_service."""
    text = str(at("dcgm.exporter.host_service"))
    after = re.search(r"Wants/After (\S+?),", text)
    start = re.search(r"ExecStart=(.+?), logs appended to (\S+)", text)
    if not (after and start):
        raise DcgmReferenceError(f"dcgm.exporter.host_service not understood: {text}")
    lines = [
        "# TEST DOUBLE unit (tests/lab/aptrepo), from dcgm.yaml dcgm.exporter.host_service.",
        "[Unit]",
        "Description=dcgm-exporter (gpuprov lab test double)",
        f"Wants={after.group(1)}",
        f"After={after.group(1)}",
        "",
        "[Service]",
        f"ExecStart={start.group(1)}",
        f"StandardOutput=append:{start.group(2)}",
        f"StandardError=append:{start.group(2)}",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(lines) + "\n"


def exporter_counters() -> str:
    """default-counters.csv with the recorded default counters (dcgm.exporter.default_counters);
    the type and help columns are not recorded: 'gauge' and a test-double note."""
    names = [str(n) for n in at("dcgm.exporter.default_counters")]
    head = "# TEST DOUBLE (tests/lab/aptrepo): dcgm.yaml dcgm.exporter.default_counters\n"
    return head + "".join(f"{n}, gauge, (test double)\n" for n in names)


def _exporter() -> Package:
    counters = re.search(r"(/\S+\.csv)", str(at("dcgm.exporter.counters_default")))
    listen = re.match(r"(:\d+)", str(at("dcgm.exporter.listen_default")))
    if not (counters and listen):
        raise DcgmReferenceError("dcgm.exporter: no counters file or listen address")
    origin = DcgmOrigin(
        ("dcgm.exporter",),
        (
            f"version {exporter_version()}: the exporter of the newest recorded image tag, "
            "revision -1 (the host package's version is not recorded; its name is a lead)",
            "the counters file's type and help columns",
            "the stand-in serves every counter as 0 for each simulated GPU",
        ),
    )
    return Package(
        str(at("dcgm.exporter.host_package")).split()[0],
        exporter_version(),
        _describe("dcgm-exporter's host package (serves simulated zeros)", origin),
        DEBIAN12_REPO,
        origin,  # type: ignore[arg-type]
        files=(
            PayloadFile("dcgm-exporter", "usr/bin/dcgm-exporter", 0o755),
            PayloadFile("", counters.group(1).lstrip("/"), content=exporter_counters()),
            PayloadFile(
                "", "usr/lib/systemd/system/nvidia-dcgm-exporter.service", content=exporter_unit()
            ),
        ),
        conffiles=(counters.group(1),),
        substitutions={"@LISTEN@": listen.group(1), "@COUNTERS@": counters.group(1)},
    )


def _level_tests() -> dict[str, list[str]]:
    """Level -> DCGM plugin names that run (cumulative); conditional ones are left out."""
    levels = at("dcgm.diag.levels")
    plugins = at("diag_json.plugins")
    out: dict[str, list[str]] = {}
    running: list[str] = []
    for level in ("1", "2", "3", "4"):
        entry = levels[level]
        if level == "1":
            added = ["software"]  # its ten checks are the software plugin's (diag_json)
        else:
            added = []
            for item in entry["adds"]:
                word = str(item).split()[0]
                if " " in str(item):  # "eud and cpu_eud (root only, ...)", "rist (only if ...)"
                    continue
                if word not in plugins:
                    raise DcgmReferenceError(
                        f"level {level} test {word!r} not in diag_json.plugins"
                    )
                added.append(word)
        running = [*running, *added]
        out[level] = running
    return out


def diag_shapes(upstream: str) -> dict[str, Any]:
    """Everything the dcgmi stand-in needs, from the reference (written into the package)."""
    codes = at("dcgm.diag.exit_codes")
    aliases = {
        str(alias): level
        for level, entry in at("dcgm.diag.levels").items()
        if isinstance(entry, dict)
        for alias in entry.get("aliases", [])
    }
    return {
        "version": upstream,
        "root": "DCGM Diagnostic",
        "status_text": dict(at("diag_json.status_text")),
        "entity_group_gpu": dict(at("diag_json.entity_group_gpu")),
        "categories": list(at("diag_json.categories")),
        "plugins": {k: v["category"] for k, v in at("diag_json.plugins").items()},
        "levels": _level_tests(),
        "aliases": aliases,
        "errors": dict(at("diag_json.errors")),
        "priorities": dict(at("diag_json.priorities")),
        "mig_refusals": dict(at("diag_json.mig_refusals")),
        "exit": {
            "ok": _code(codes, "0"),
            "fail": _code(codes, "226"),
            "isolate": _code(codes, "205"),
        },
    }


def _code(codes: Mapping[Any, Any], key: str) -> int:
    if key not in {str(k) for k in codes}:
        raise DcgmReferenceError(f"dcgm.diag.exit_codes has no {key}")
    return int(key)


CORE_ENTRIES = ("dcgm.packages.dcgm4", "dcgm.service", "dcgm.diag", "diag_json")
CORE_NOTES = (
    "file list (the real -core ships more): /usr/bin/dcgmi and /usr/bin/nv-hostengine "
    "stand-ins, the unit in /usr/lib/systemd/system",
    "the dcgmi stand-in runs no test: it prints the recorded JSON shape for the simulated GPUs",
    "exit status 226 for a MIG refusal (diag_json.mig_refusal_output is a lead)",
)


def dcgm_packages() -> list[Package]:
    """DCGM 3 and DCGM 4 (-core, -cuda12, -cuda13) for the debian12 CUDA repository double."""
    n, rel = names(), _relations()
    packages: list[Package] = []
    for upstream in DCGM4_PUBLISHED:
        version = deb_version(upstream)
        core_origin = DcgmOrigin(CORE_ENTRIES, CORE_NOTES)
        shapes = json.dumps(diag_shapes(upstream), indent=1, sort_keys=True) + "\n"
        packages.append(
            Package(
                n["core"],
                version,
                _describe(
                    "DCGM 4's core package (dcgmi, nv-hostengine, nvidia-dcgm unit)", core_origin
                ),
                DEBIAN12_REPO,
                core_origin,  # type: ignore[arg-type]  # the same interface as Origin
                files=(
                    PayloadFile("dcgmi", "usr/bin/dcgmi", 0o755),
                    PayloadFile("", "usr/bin/nv-hostengine", 0o755, content=HOSTENGINE),
                    PayloadFile(
                        "", "usr/lib/systemd/system/nvidia-dcgm.service", content=nvidia_dcgm_unit()
                    ),
                    PayloadFile("", SHAPES_PATH.lstrip("/"), content=shapes),
                ),
                depends=(rel["core_depends"],),
                extra_control={
                    "Pre-Depends": rel["core_pre_depends"],
                    "Conflicts": rel["core_conflicts"],
                },
                scripts={"postinst": "dcgm-core-postinst"},
                substitutions={"@SHAPES@": SHAPES_PATH},
            )
        )
        for flavour in ("cuda12", "cuda13"):
            origin = DcgmOrigin(
                ("dcgm.packages.dcgm4", "dcgm.compatibility"),
                ("package shape only: the real one ships DCGM's CUDA-specific plugins",),
            )
            packages.append(
                Package(
                    n[flavour],
                    version,
                    _describe(f"DCGM 4's {flavour} package (package shape only)", origin),
                    DEBIAN12_REPO,
                    origin,  # type: ignore[arg-type]
                    depends=(f"{n['core']} (= {version})",),
                    extra_control={"Provides": rel["cuda_provides"]},
                )
            )
    origin3 = DcgmOrigin(
        ("dcgm.packages.dcgm3",),
        (
            "file list: only /usr/bin/dcgmi (a stand-in that says it is DCGM 3), so that a "
            "leftover shows",
        ),
    )
    packages.append(
        Package(
            n["dcgm3"],
            dcgm3_version(),
            _describe("DCGM 3's one package (a leftover to be replaced)", origin3),
            DEBIAN12_REPO,
            origin3,  # type: ignore[arg-type]
            files=(PayloadFile("", "usr/bin/dcgmi", 0o755, content=DCGM3_DCGMI),),
        )
    )
    packages.append(_exporter())
    return packages


GENERATED_SCRIPTS = {"dcgm-core-postinst": core_postinst()}
