"""What a failed or lost host's line says (issue 27, item 6): a held dpkg lock named as such
(not only "One or more items failed"), a host gone mid-run said to be gone."""

from __future__ import annotations

from orchestrator.apply import _Tally, failure_message, unreachable_message

# apt's own words, as the apt module returns them for a loop item (the lock held by a
# concurrent apt-get)
APT_LOCKED = (
    "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get)\n"
    "E: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), is another "
    "process using it?"
)


def test_a_loop_says_its_first_failed_item_and_names_the_dpkg_lock() -> None:
    res = {
        "msg": "One or more items failed",
        "results": [
            {"item": "nvidia-driver", "failed": False},
            {"item": "nvidia-fabricmanager", "failed": True, "msg": "", "stderr": APT_LOCKED},
        ],
    }
    msg = failure_message(res)
    assert msg.startswith("the package manager is locked by another process (")
    assert "Could not get lock /var/lib/dpkg/lock-frontend" in msg
    assert "item nvidia-fabricmanager" in msg


def test_a_plain_failure_is_kept() -> None:
    assert failure_message({"msg": "boom"}) == "boom"


def test_a_host_gone_mid_run_says_so_in_the_stats() -> None:
    tally = _Tally()
    tally.add(
        {
            "event": "runner_on_unreachable",
            "event_data": {
                "host": "n1",
                "task": "Install the driver",
                "res": {"msg": "Failed to connect to the host via ssh: Connection refused"},
            },
        }
    )
    stats = tally.stats(["n1"])["n1"]
    assert stats.unreachable == 1
    assert stats.failed_tasks == (
        "Install the driver: unreachable: Failed to connect to the host via ssh: Connection "
        "refused (the host went away mid-run: rebooting, down, or hung)",
    )
    assert unreachable_message("") == "unreachable: no answer"


def test_a_reboot_mid_task_is_the_host_going_away() -> None:
    """What Ansible said of a lab host rebooted under a pipelined apt task (2026-12-03,
    tests/lab/test_faults_lab.py::test_a_host_rebooted_mid_apply_is_named_gone): ssh exited
    255, and the module's own stderr follows ansible-core's words."""
    said = (
        'Task failed: Data could not be sent to remote host "127.0.0.1". Make sure this host '
        "can be reached over ssh: Error in sitecustomize; set PYTHONVERBOSE for traceback:\n"
        "SyntaxError: unexpected character after line continuation character "
        "(sitecustomize.py, line 1)\nTraceback (most recent call last):\n"
        '  File "<string>", line 1, in <module>\n'
        "ModuleNotFoundError: No module named 'apt'"
    )
    message = unreachable_message(said)
    assert message.startswith("unreachable: Task failed: Data could not be sent to remote host")
    assert message.endswith("(the host went away mid-run: rebooting, down, or hung)")
    assert "\n" not in message
