"""The validation container never outlives the validation: the staging script, run here for
real by sh, against a test double of the docker CLI (a shell script on PATH that logs its
arguments and behaves as the test says: no Docker engine is involved).

Exit paths: success, failure, the payload timeout, the executor's timeout, SIGTERM and SIGINT
to the script, Ctrl-C in the orchestrator; before a run: leftovers removed, another running
validation respected; the image step with its own timeout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from orchestrator.catalog import default_catalog
from orchestrator.factsdir import load_host
from orchestrator.parsers import parse_host
from orchestrator.policy import load_policy
from orchestrator.result import CheckResult
from orchestrator.validate import container, runner
from orchestrator.validate.runner import CommandOutput, SubprocessExecutor

REAL = Path(__file__).resolve().parents[2] / "tests/recorded/fixtures/real/h200x2-ubuntu2404-580"
CATALOG = default_catalog()
NAME = container.container_name("tok1")

FAKE_DOCKER = r"""#!/bin/sh
# test double of the docker CLI (simulated, no engine): logs its arguments and behaves as the
# FAKE_DOCKER_* variables say
echo "$$ $*" >> "$FAKE_DOCKER_LOG"
case "$1" in
  ps) if [ -n "${FAKE_DOCKER_PS:-}" ]; then printf '%s\n' "$FAKE_DOCKER_PS"; fi; exit 0;;
  rm) exit 0;;
  image) [ "${FAKE_DOCKER_IMAGE:-present}" = present ]; exit $?;;
  pull) case "${FAKE_DOCKER_PULL:-ok}" in
          hang) exec sleep 60;;
          fail) echo "Error response from daemon: pull access denied for img" >&2; exit 1;;
        esac; exit 0;;
  run) case "${FAKE_DOCKER_RUN:-ok}" in
         hang) exec sleep 60;;
         fail) printf '%s\n' "$FAKE_DOCKER_NO_GPU" >&2; exit 125;;
       esac
       printf '%s\n' "$FAKE_DOCKER_DOC"; exit 0;;
esac
exit 0
"""

DOC = {
    "payload": "gpucheck",
    "version": 2,
    "ranks": 0,
    "sweep": [],
    "p2p": [],
    "results": [
        {
            "name": "cuda_available",
            "status": "pass",
            "value": True,
            "limit": True,
            "unit": "",
            "diagnosis": "",
            "gpu": None,
        }
    ],
}


@pytest.fixture
def docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "docker"
    fake.write_text(FAKE_DOCKER)
    fake.chmod(0o755)
    log = tmp_path / "docker.log"
    log.write_text("")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(log))
    monkeypatch.setenv(
        "FAKE_DOCKER_NO_GPU",
        'docker: Error response from daemon: could not select device driver "" with '
        "capabilities: [[gpu]].",  # Docker 20.10's own words, seen on the GPU machine
    )
    body = json.dumps(DOC)
    monkeypatch.setenv("FAKE_DOCKER_DOC", f"{runner.MARKER} begin\n{body}\n{runner.MARKER} end")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    return log


def calls(log: Path) -> list[str]:
    return [line.split(" ", 1)[1] for line in log.read_text().splitlines()]


def target() -> runner.Target:
    raw = dict(load_host(REAL))
    return runner.payload_target(parse_host("h200", raw), raw, CATALOG, load_policy("h200", {}))


def run(
    execute: runner.Executor, timeout_s: int = 30, pull_timeout_s: int = 30
) -> list[CheckResult]:
    return runner.run_payload(
        execute,
        target(),
        CATALOG,
        host="h200",
        runtime="docker",
        image="img:1",
        timeout_s=timeout_s,
        pull_timeout_s=pull_timeout_s,
        token="tok1",
    )


def removed(log: Path) -> bool:
    return f"rm -f {NAME}" in calls(log)


def status(results: list[CheckResult]) -> dict[str, str]:
    return {r.name: r.status for r in results}


def test_success_runs_with_init_a_name_and_no_network_then_removes(docker: Path) -> None:
    results = run(SubprocessExecutor())
    assert status(results) == {
        "leftover_container": "pass",
        "validation_image": "pass",
        "cuda_available": "pass",
    }
    (run_line,) = [c for c in calls(docker) if c.startswith("run ")]
    assert f"run --rm --init --name {NAME} --label gpuprov.validation=1" in run_line
    assert "--label gpuprov.validation.until=" in run_line and "--network none" in run_line
    assert removed(docker)
    assert not list(Path(os.environ["TMPDIR"]).glob("gpuprov-validate.*"))  # staging dir gone


def test_failure_is_diagnosed_and_removes(docker: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_DOCKER_RUN", "fail")
    results = run(SubprocessExecutor())
    (payload,) = [r for r in results if r.name == "gpu_payload"]
    assert "NVIDIA Container Toolkit is missing" in payload.diagnosis
    assert removed(docker)


def test_payload_timeout_kills_the_client_and_removes(
    docker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_DOCKER_RUN", "hang")
    started = time.monotonic()
    results = run(SubprocessExecutor(), timeout_s=1)
    assert time.monotonic() - started < 10
    (payload,) = [r for r in results if r.name == "gpu_payload"]
    assert "did not finish within the timeout of 1 s" in payload.diagnosis
    assert removed(docker)


def _staged_script() -> str:
    """The staging script of a 300 s payload in container NAME (image img:1)."""
    return runner.stage_script(
        target().spec,
        container.docker_script(
            runner.docker_command("img:1", "gpus", 300, name=NAME),
            name=NAME,
            image="img:1",
            timeout_s=300,
            pull_timeout_s=30,
        ),
    )


def test_executor_timeout_terminates_the_script_which_removes(
    docker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_DOCKER_RUN", "hang")
    script = _staged_script()
    started = time.monotonic()
    out = SubprocessExecutor()(script, timeout=2)
    assert out.rc == 124 and "(timed out)" in out.stderr
    assert time.monotonic() - started < 10
    assert removed(docker)


def _default_signals() -> None:
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_to_the_script_removes_the_container_at_once(
    docker: Path, monkeypatch: pytest.MonkeyPatch, sig: signal.Signals
) -> None:
    monkeypatch.setenv("FAKE_DOCKER_RUN", "hang")
    script = _staged_script()
    proc = subprocess.Popen(
        ["sh", "-s"],
        stdin=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # a signal ignored when sh starts cannot be trapped (POSIX): under `nohup` (SIGHUP
        # ignored, inherited by this test) the script would never see the hangup it is sent
        preexec_fn=_default_signals,
    )
    assert proc.stdin
    proc.stdin.write(script)
    proc.stdin.close()
    deadline = time.monotonic() + 10
    while not any(c.startswith("run ") for c in calls(docker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    client = int(next(ln for ln in docker.read_text().splitlines() if " run " in ln).split()[0])
    started = time.monotonic()
    os.killpg(proc.pid, sig)  # as Ctrl-C (SIGINT), a hangup or a kill would
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        tree = subprocess.run(
            ["ps", "-o", "pid,pgid,stat,wchan:20,args", "-g", str(proc.pid)],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        proc.kill()
        pytest.fail(
            f"the script did not exit within 10 s of {sig.name}:\n{tree}\n" + docker.read_text()
        )
    assert time.monotonic() - started < 5
    assert removed(docker)
    time.sleep(0.2)
    with pytest.raises(ProcessLookupError):
        os.kill(client, 0)  # the docker client is gone too


def test_ctrl_c_in_the_orchestrator_removes_through_a_new_connection(docker: Path) -> None:
    seen: list[str] = []

    def cut(script: str, *, timeout: float) -> CommandOutput:
        seen.append(script)
        if len(seen) == 1:
            raise KeyboardInterrupt
        return SubprocessExecutor()(script, timeout=timeout)

    with pytest.raises(KeyboardInterrupt):
        run(cut)
    assert seen[1] == container.remove_script(NAME)
    assert removed(docker)


def test_the_executors_timeout_also_removes_through_a_new_connection(docker: Path) -> None:
    seen: list[str] = []

    def slow(script: str, *, timeout: float) -> CommandOutput:
        seen.append(script)
        if len(seen) == 1:
            return CommandOutput(124, "", "(timed out)")
        return SubprocessExecutor()(script, timeout=timeout)

    run(slow)
    assert seen[1] == container.remove_script(NAME) and removed(docker)


def test_leftovers_past_their_deadline_are_reported_and_removed(
    docker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "FAKE_DOCKER_PS",
        "gpuprov-validate-old 1000 Exited (137) 2 hours ago\n"
        "gpuprov-validate-stuck 1000 Up 3 hours",
    )
    results = run(SubprocessExecutor())
    (left,) = [r for r in results if r.name == "leftover_container"]
    assert left.status == "warn" and left.value == 2
    assert "gpuprov-validate-old, gpuprov-validate-stuck" in left.diagnosis
    assert "rm -f gpuprov-validate-old" in calls(docker)
    assert "rm -f gpuprov-validate-stuck" in calls(docker)
    assert status(results)["cuda_available"] == "pass"


def test_a_running_validation_within_its_deadline_is_left_alone(
    docker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    until = int(time.time()) + 3600
    monkeypatch.setenv("FAKE_DOCKER_PS", f"gpuprov-validate-other {until} Up 2 minutes")
    results = run(SubprocessExecutor())
    assert status(results)["validation_busy"] == "fail"
    assert "rm -f gpuprov-validate-other" not in calls(docker)
    assert not any(c.startswith("run ") for c in calls(docker))


def test_a_slow_pull_is_an_image_pull_timeout_not_a_gpu_hang(
    docker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_DOCKER_IMAGE", "absent")
    monkeypatch.setenv("FAKE_DOCKER_PULL", "hang")
    started = time.monotonic()
    results = run(SubprocessExecutor(), pull_timeout_s=1)
    assert time.monotonic() - started < 12
    (image,) = [r for r in results if r.name == "validation_image"]
    assert image.status == "fail" and "image pull timed out after 1 s" in image.diagnosis
    assert not any(r.name == "gpu_payload" for r in results)
    assert not any(c.startswith("run ") for c in calls(docker))


def test_a_failed_pull_says_why(docker: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_DOCKER_IMAGE", "absent")
    monkeypatch.setenv("FAKE_DOCKER_PULL", "fail")
    (image,) = [r for r in run(SubprocessExecutor()) if r.name == "validation_image"]
    assert image.status == "fail" and "could not be pulled" in image.diagnosis


def test_an_absent_image_is_pulled_first(docker: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_DOCKER_IMAGE", "absent")
    results = run(SubprocessExecutor())
    assert [r.value for r in results if r.name == "validation_image"] == ["pulled"]
    assert calls(docker).index("pull img:1") < next(
        i for i, c in enumerate(calls(docker)) if c.startswith("run ")
    )


def test_ctrl_c_while_hosts_validate_in_threads_removes_every_container(
    docker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As seen on the GPU machine before the fix: Ctrl-C reached only the main thread and the
    validation ran on to its end. Now every running script is stopped and its container removed."""
    import threading
    from types import SimpleNamespace

    from orchestrator import pipeline
    from orchestrator import report as rep

    monkeypatch.setenv("FAKE_DOCKER_RUN", "hang")
    tokens = iter(["tok1", "tok2"])

    def host_run(fleet: object, host: str, *args: object) -> rep.StageResult:
        r = runner.run_payload(
            SubprocessExecutor(),
            target(),
            CATALOG,
            host=host,
            runtime="docker",
            image="img:1",
            timeout_s=300,
            pull_timeout_s=30,
            token=next(tokens),
        )
        return rep.StageResult("done", tuple(r))

    monkeypatch.setattr(pipeline, "_validate_host", host_run)
    hosts = ["a", "b"]
    main = threading.main_thread().ident
    assert main is not None

    def ctrl_c() -> None:
        deadline = time.monotonic() + 10
        while sum(c.startswith("run ") for c in calls(docker)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        signal.pthread_kill(main, signal.SIGINT)

    # Ctrl-C as at a terminal: Python's own handler (another test may have replaced it)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=ctrl_c, daemon=True).start()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            pipeline._validation(
                None,  # type: ignore[arg-type]
                hosts,
                SimpleNamespace(facts={h: object() for h in hosts}, raw={h: {} for h in hosts}),  # type: ignore[arg-type]
                {h: SimpleNamespace(blocked=False) for h in hosts},  # type: ignore[arg-type]
                {h: None for h in hosts},  # type: ignore[misc]
                pipeline.StageOptions(runtime="docker"),
            )
    finally:
        runner.INTERRUPTED.clear()
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - started < 15
    for token in ("tok1", "tok2"):
        assert f"rm -f {container.container_name(token)}" in calls(docker)
