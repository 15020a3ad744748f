"""Render the doubles: one rpm spec per package, and the modulemd YAML of each repository."""

from __future__ import annotations

from collections.abc import Iterable

import yaml

from rpmrepo.model import CONTEXT, MODULE_VERSION, Repo, Rpm, Stream

SUMMARY = "TEST DOUBLE of {name} (gpuprov lab; empty; sources in tests/lab/rpmrepo/model.py)"


def spec(rpm: Rpm) -> str:
    """An rpm spec for an empty (or repo-file-only) stand-in package."""
    lines = [
        f"Name: {rpm.name}",
        f"Version: {rpm.version}",
        f"Release: {rpm.release}",
        *([f"Epoch: {rpm.epoch}"] if rpm.epoch else []),
        f"Summary: {SUMMARY.format(name=rpm.name)}",
        "License: none (test double)",
        f"BuildArch: {rpm.arch}",
        *(f"Requires: {r}" for r in rpm.requires),
        *(f"Provides: {r}" for r in rpm.provides),
        "",
        "%description",
        f"Test double of {rpm.name} for gpuprov's lab: no content of the real package.",
        "",
        "%install",
    ]
    for index, (path, _content) in enumerate(sorted(rpm.files.items())):
        lines += [
            f"mkdir -p %{{buildroot}}{path.rsplit('/', 1)[0]}",
            f"install -m 0644 %{{SOURCE{index}}} %{{buildroot}}{path}",
        ]
    lines += ["", "%files", *sorted(rpm.files)]
    sources = [f"Source{i}: file{i}" for i in range(len(rpm.files))]
    return "\n".join(lines[:7] + sources + lines[7:]) + "\n"


def spec_sources(rpm: Rpm) -> dict[str, str]:
    """File name -> content of the spec's SourceN files."""
    return {f"file{i}": content for i, (_p, content) in enumerate(sorted(rpm.files.items()))}


def _stream_doc(module: str, stream: Stream) -> dict[str, object]:
    return {
        "document": "modulemd",
        "version": 2,
        "data": {
            "name": module,
            "stream": stream.name,
            "version": MODULE_VERSION,
            "context": CONTEXT[stream.flavour],
            "arch": "x86_64",
            "summary": f"TEST DOUBLE of NVIDIA's {module}:{stream.name} stream (gpuprov lab)",
            "description": "Test double generated from tests/recorded/reference/packages.yaml.",
            "license": {"module": ["none"]},
            "profiles": {"default": {"rpms": sorted({a.name for a in stream.artifacts})}},
            "artifacts": {"rpms": sorted(a.nevra for a in stream.artifacts)},
        },
    }


def modules_yaml(repo: Repo, module: str = "nvidia-driver") -> str:
    """modulemd v2 documents for every stream, plus modulemd-defaults naming the default."""
    docs: list[object] = [_stream_doc(module, s) for s in repo.streams]
    if repo.default_stream:
        docs.append(
            {
                "document": "modulemd-defaults",
                "version": 1,
                "data": {
                    "module": module,
                    "stream": repo.default_stream,
                    "profiles": {repo.default_stream: ["default"]},
                },
            }
        )
    return yaml.safe_dump_all(docs, explicit_start=True, explicit_end=True, sort_keys=False)


def all_specs(repos: Iterable[Repo]) -> dict[str, str]:
    """ "<repo path>/<name>-<evr>.spec" -> spec text, for every package of every repository."""
    out: dict[str, str] = {}
    for repo in repos:
        for rpm in repo.rpms:
            out[f"{repo.path}/{rpm.name}-{rpm.version}-{rpm.release}.spec"] = spec(rpm)
    return out
