"""Converged roles (orchestrator/converged.py, parsers/converged.py, probe.sh's records):
the input digest, the probe's record and live-state captures, and the skip decision."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrator import converged as cv
from orchestrator.plan import HostPlan, RolePlan
from orchestrator.probe import probe_script, split_output

PLANNED: dict[str, object] = {
    "gpuprov_roles": ["nvidia_driver", "docker", "nvidia_container_toolkit"],
    "nvidia_driver_branch": "580",
    "nvidia_driver_version": "",
    "docker_source": "docker",
    "nvidia_container_toolkit_version": "",
    "nvidia_container_toolkit_default_runtime": False,
    "gpuprov_validation_nccl": True,
}
ROLES = ("nvidia_driver", "docker", "nvidia_container_toolkit")


def _plan(change: bool = False) -> HostPlan:
    roles = tuple(
        RolePlan(r, {}, "why", change=change if r == "nvidia_driver" else True) for r in ROLES
    )
    return HostPlan("h", True, (), 0, roles)


# --- the input digest --------------------------------------------------------------------


def test_digest_is_stable_and_covers_only_the_roles_inputs() -> None:
    d = cv.plan_digests(ROLES, PLANNED, {})
    assert d == cv.plan_digests(ROLES, dict(reversed(list(PLANNED.items()))), {})  # order-free
    assert len({*d.values()}) == 3
    other = cv.plan_digests(ROLES, {**PLANNED, "gpuprov_validation_nccl": False}, {})
    assert other == d  # validation is not a role input


def test_a_changed_variable_changes_its_role_and_the_roles_building_on_it() -> None:
    d = cv.plan_digests(ROLES, PLANNED, {})
    tk = cv.plan_digests(ROLES, {**PLANNED, "nvidia_container_toolkit_default_runtime": True}, {})
    assert [r for r in ROLES if tk[r] != d[r]] == ["nvidia_container_toolkit"]
    dk = cv.plan_digests(ROLES, {**PLANNED, "docker_source": "distribution"}, {})
    assert [r for r in ROLES if dk[r] != d[r]] == ["docker", "nvidia_container_toolkit"]


def test_inventory_role_variables_count_and_the_plan_wins() -> None:
    d = cv.plan_digests(ROLES, PLANNED, {})
    inv = cv.plan_digests(ROLES, PLANNED, {"docker_daemon_options": {"log-driver": "local"}})
    assert inv["docker"] != d["docker"] and inv["nvidia_driver"] == d["nvidia_driver"]
    # an inventory value the plan overrides is not an input
    assert cv.plan_digests(ROLES, PLANNED, {"docker_source": "distribution"}) == d


def test_role_code_is_part_of_the_digest(tmp_path: Path) -> None:
    (tmp_path / "docker" / "tasks").mkdir(parents=True)
    task = tmp_path / "docker" / "tasks" / "main.yml"
    task.write_text("---\n")
    before = cv.code_digest("docker", tmp_path)
    cv.code_digest.cache_clear()
    task.write_text("---\n# changed\n")
    assert cv.code_digest("docker", tmp_path) != before
    cv.code_digest.cache_clear()


# --- the probe's side: one state function for the record and the live state ---------------


def _state(*items: str) -> list[str]:
    script = Path(cv.paths.PACKAGE / "probe.sh")
    done = subprocess.run(
        ["sh", str(script), "converged-state", *items], capture_output=True, text=True, check=True
    )
    return done.stdout.splitlines()


def test_state_lines_of_files_packages_units_modules(tmp_path: Path) -> None:
    f = tmp_path / "conf"
    f.write_text("x\n")
    lines = _state(f"file {f}", f"file {tmp_path}/none", "pkg no-such-package-here", "module none0")
    sha = hashlib.sha256(b"x\n").hexdigest()
    assert lines == [
        f"file {f} {sha}",
        f"file {tmp_path}/none missing",
        "pkg no-such-package-here missing -",
        "module none0 missing",
    ]


def _dpkg_alone(name: str) -> str:
    """A package's state line as the probe printed it with one dpkg-query per package."""
    fmt = "${db:Status-Status} ${Version} ${db:Status-Want}"
    out = subprocess.run(
        ["dpkg-query", "-W", f"-f={fmt}", "--", name], capture_output=True, text=True
    ).stdout
    if not out.startswith("installed "):
        return f"pkg {name} missing -"
    return f"pkg {name} {out.removeprefix('installed ')}"


@pytest.mark.skipif(not shutil.which("dpkg-query"), reason="needs this machine's dpkg database")
def test_packages_in_one_dpkg_query_read_as_one_query_each() -> None:
    arch = subprocess.run(
        ["dpkg", "--print-architecture"], capture_output=True, text=True, check=True
    ).stdout.strip()
    # installed, Multi-Arch: same (libc6), NAME:ARCH, missing, a pattern, a name twice
    names = ["dpkg", "libc6", f"libc6:{arch}", "no-such-package-here", "dpkg*", "bash", "bash"]
    script = Path(cv.paths.PACKAGE / "probe.sh")
    done = subprocess.run(  # -x: the trace names each dpkg-query run
        ["sh", "-x", str(script), "converged-state", *(f"pkg {n}" for n in names), "file /none"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.splitlines() == [*(_dpkg_alone(n) for n in names), "file /none missing"]
    assert done.stdout.count(" missing -") == 1  # the others are installed here
    # one query for the plain names, one each for the two it cannot stand for
    runs = [t for t in done.stderr.splitlines() if t.lstrip("+ ").startswith("dpkg-query -W")]
    assert len(runs) == 3, runs


def _record(role: str, state: list[str], digest: str = "d" * 64) -> str:
    # as the record task writes it: Ansible's to_nice_json (indent 4, sorted keys)
    body = {"schema": 1, "role": role, "input_digest": digest, "state": state}
    return json.dumps(body, indent=4, sort_keys=True) + "\n"


def _probe(records: Path) -> str:
    """The probe script's output, run here by sh over the records in `records`."""
    env = {"PATH": "/usr/bin:/bin", "GPUPROV_CONVERGED_DIR": str(records)}
    return subprocess.run(
        ["sh", "-s"], input=probe_script(), capture_output=True, text=True, env=env, check=True
    ).stdout


def test_the_probe_prints_each_record_and_its_live_state(tmp_path: Path) -> None:
    conf = tmp_path / "etc" / "daemon.json"
    conf.parent.mkdir()
    conf.write_text("{}\n")
    state = _state(f"file {conf}", "pkg no-such-package-here")
    (tmp_path / "docker.json").write_text(_record("docker", state))
    raw = split_output("h", _probe(tmp_path))
    records = cv.parse_records(raw)
    assert set(records) == {"docker"}
    rec = records["docker"]
    assert rec.problem is None and rec.state == rec.live and len(rec.state) == 2
    conf.write_text('{"edited": true}\n')
    rec = cv.parse_records(split_output("h", _probe(tmp_path)))["docker"]
    assert rec.live[("file", str(conf))] != rec.state[("file", str(conf))]


# --- the decision ----------------------------------------------------------------------------

DAEMON = "file /etc/docker/daemon.json"


def _raw(
    records: dict[str, tuple[list[str], list[str]]], digests: dict[str, str]
) -> dict[str, str]:
    raw: dict[str, str] = {}
    for role, (state, live) in records.items():
        raw[f"converged-{role}.json"] = _record(role, state, digests.get(role, "")) + "# exit=0\n"
        raw[f"converged-{role}-live.txt"] = "".join(f"{x}\n" for x in live) + "# exit=0\n"
    return raw


def test_converged_when_digest_and_live_state_match() -> None:
    d = cv.plan_digests(ROLES, PLANNED, {})
    state = ["pkg docker-ce 5:27.0 hold", f"{DAEMON} aaa", "unit docker.service enabled active"]
    raw = _raw({"docker": (state, state)}, d)
    out = cv.decide_host(["docker", "nvidia_driver"], d, raw)
    assert out["docker"].converged and out["docker"].line().startswith(
        f"docker skipped: converged, digest {d['docker'][:12]}"
    )
    assert not out["nvidia_driver"].converged
    assert out["nvidia_driver"].why == "no convergence record on the host"


@pytest.mark.parametrize(
    ("live", "why"),
    [
        (["pkg docker-ce 5:27.0 install", f"{DAEMON} aaa"], "drift: 'pkg docker-ce 5:27.0 hold'"),
        (["pkg docker-ce 5:27.1 hold", f"{DAEMON} aaa"], "drift: 'pkg docker-ce 5:27.0 hold'"),
        (["pkg docker-ce 5:27.0 hold", f"{DAEMON} bbb"], f"drift: '{DAEMON} aaa'"),
        (["pkg docker-ce 5:27.0 hold"], f"drift: '{DAEMON} aaa' is now 'not reported'"),
    ],
)
def test_any_drift_runs_the_role(live: list[str], why: str) -> None:
    d = cv.plan_digests(ROLES, PLANNED, {})
    raw = _raw({"docker": (["pkg docker-ce 5:27.0 hold", f"{DAEMON} aaa"], live)}, d)
    out = cv.decide_host(["docker"], d, raw)["docker"]
    assert not out.converged and out.why.startswith(why)


def test_changed_inputs_and_undigested_records_run_the_role() -> None:
    d = cv.plan_digests(ROLES, PLANNED, {})
    state = ["pkg docker-ce 5:27.0 hold"]
    other = {"docker": "e" * 64}
    assert cv.decide_host(["docker"], d, _raw({"docker": (state, state)}, other))[
        "docker"
    ].why.startswith("inputs changed")
    plain = cv.decide_host(["docker"], d, _raw({"docker": (state, state)}, {}))["docker"]
    assert "plain ansible-playbook" in plain.why


def test_a_file_two_roles_record_is_expected_as_the_later_role_left_it() -> None:
    d = cv.plan_digests(ROLES, PLANNED, {})
    docker = [f"{DAEMON} before-toolkit"]
    toolkit = [f"{DAEMON} with-runtime"]
    raw = _raw({"docker": (docker, toolkit), "nvidia_container_toolkit": (toolkit, toolkit)}, d)
    out = cv.decide_host(["docker", "nvidia_container_toolkit"], d, raw)
    assert out["docker"].converged and out["nvidia_container_toolkit"].converged
    edited = [f"{DAEMON} edited"]
    raw = _raw({"docker": (docker, edited), "nvidia_container_toolkit": (toolkit, edited)}, d)
    out = cv.decide_host(["docker", "nvidia_container_toolkit"], d, raw)
    assert not out["docker"].converged and not out["nvidia_container_toolkit"].converged


@pytest.mark.parametrize(
    "raw",
    [
        {
            "converged-docker.json": "not json\n# exit=0\n",
            "converged-docker-live.txt": "# exit=0\n",
        },
        {"converged-docker.json": _record("mig", []) + "# exit=0\n"},
        {"converged-docker.json": _record("docker", ["garbage line"])},
        {"converged-docker.json": _record("docker", [])},  # no live capture
        {"converged-docker.json": _record("docker", []), "converged-docker-live.txt": "# exit=1\n"},
    ],
)
def test_an_unusable_record_runs_the_role(raw: dict[str, str]) -> None:
    d = cv.plan_digests(ROLES, PLANNED, {})
    assert not cv.decide_host(["docker"], d, raw)["docker"].converged


def test_fleet_skips_and_the_result_for_a_fully_converged_fleet(tmp_path: Path) -> None:
    plan = _plan()
    d = cv.plan_digests(ROLES, PLANNED, {})
    state = ["pkg x 1 hold"]
    raw = {"h": _raw({r: (state, state) for r in ROLES}, d)}
    skips = cv.fleet_skips(["h"], {"h": plan}, {"h": PLANNED}, {"h": {}}, raw)
    assert skips.run == []
    entry = skips.host_vars["h"]
    assert entry[cv.SKIP_VAR] == list(ROLES) and entry[cv.DIGEST_VAR] == d
    result = skips.result(tmp_path, False, None)
    assert result.status == "skipped" and result.hosts["h"].succeeded
    assert result.hosts["h"].changed == 0 and len(result.hosts["h"].converged) == 3
    assert result.plan_file is not None and "gpuprov_skip_roles" in result.plan_file.read_text()
    # --full: every role runs, the digests are still passed (the roles record them)
    full = cv.fleet_skips(["h"], {"h": plan}, {"h": PLANNED}, {"h": {}}, raw, full=True)
    assert full.run == ["h"] and full.host_vars["h"][cv.SKIP_VAR] == []
    assert full.host_vars["h"][cv.DIGEST_VAR] == d
    # -e given: nothing skipped and no digest recorded
    untrusted = cv.fleet_skips(["h"], {"h": plan}, {"h": PLANNED}, {"h": {}}, raw, trusted=False)
    assert untrusted.run == ["h"] and set(untrusted.host_vars["h"][cv.DIGEST_VAR].values()) == {""}


def test_a_driver_the_plan_changes_or_an_unfinished_upgrade_always_runs() -> None:
    d = cv.plan_digests(ROLES, PLANNED, {})
    state = ["pkg x 1 hold"]
    raw = _raw({r: (state, state) for r in ROLES}, d)
    changing = cv.fleet_skips(["h"], {"h": _plan(change=True)}, {"h": PLANNED}, {}, {"h": raw})
    assert changing.decisions["h"]["nvidia_driver"].why == "the plan changes the loaded driver"
    assert changing.host_vars["h"][cv.SKIP_VAR] == ["docker", "nvidia_container_toolkit"]
    upgrading = {**raw, "gpuprov-upgrade.txt": "{}\n# exit=0\n"}
    out = cv.fleet_skips(["h"], {"h": _plan()}, {"h": PLANNED}, {}, {"h": upgrading})
    assert not out.decisions["h"]["nvidia_driver"].converged


def test_role_documentation_is_not_part_of_the_digest(tmp_path: Path) -> None:
    (tmp_path / "mig" / "tasks").mkdir(parents=True)
    (tmp_path / "mig" / "tasks" / "main.yml").write_text("---\n")
    readme = tmp_path / "mig" / "README.md"
    readme.write_text("# mig\n")
    before = cv.code_digest("mig", tmp_path)
    cv.code_digest.cache_clear()
    readme.write_text("# mig, documented better\n")
    assert cv.code_digest("mig", tmp_path) == before
    cv.code_digest.cache_clear()


def test_the_plan_after_the_first_converge_has_the_same_digests() -> None:
    """Before the first converge no driver is loaded and the plan leaves the version to the
    role (""); afterwards the planner writes the loaded version: the digests must not differ,
    or the first rerun after a converge would run every role again. The driver still runs
    whenever the plan changes the loaded driver (the plan's `change`)."""
    from orchestrator.catalog import default_catalog
    from orchestrator.factsdir import load_host
    from orchestrator.parsers import parse_host
    from orchestrator.plan import plan_host
    from orchestrator.policy import load_policy

    root = Path(__file__).resolve().parents[2]
    before = parse_host("h", load_host(root / "tests/unit/fixtures_derived/h200x2-nodriver"))
    after = parse_host("h", load_host(root / "tests/recorded/fixtures/real/h200x2-ubuntu2404-580"))
    catalog = default_catalog()
    plans = [plan_host(f, load_policy("h", {}), catalog) for f in (before, after)]
    docs = [p.document_vars() for p in plans]
    assert docs[0]["nvidia_driver_version"] != docs[1]["nvidia_driver_version"]  # "" -> loaded
    roles = [r.name for r in plans[1].roles]
    assert cv.plan_digests(roles, docs[0], {}) == cv.plan_digests(roles, docs[1], {})
    assert cv._must_run(plans[0], {}) == {"nvidia_driver": "the plan changes the loaded driver"}
    assert cv._must_run(plans[1], {}) == {}
    pinned = {**docs[1], "nvidia_driver_branch": 575}
    assert cv.input_digest("nvidia_driver", pinned, {}) != cv.input_digest(
        "nvidia_driver", docs[1], {}
    )
