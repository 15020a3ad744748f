"""Test-only action: write what a play decided to a file on the controller, in the worker.

The unit tests that run a role's task files on local fake hosts (tests/unit/roleplay.py)
record their results as files. ``ansible.builtin.copy`` did that by starting two module
processes per file (stat, then copy: each unpacks and compiles AnsiballZ's module_utils),
which cost about half of those fixtures' CPU. This action writes the file itself:

    - gpuprov_test_record:
        dest: "{{ out }}/{{ inventory_hostname }}.json"
        content: "{{ result | to_json }}"

``content`` is written as ``copy`` writes it: a string as it is (UTF-8), a dict or a list as
``json.dumps`` gives it. The file is replaced whole, mode 0644. Not for check mode (the tests
that record never run in it): there it writes nothing and reports a change.

Found through ANSIBLE_ACTION_PLUGINS (roleplay.ACTION_PLUGINS); not part of the collection.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = dict(self._task.args)
        if set(args) != {"dest", "content"}:
            raise AnsibleActionFail(
                f"gpuprov_test_record takes dest and content; got {sorted(args)}"
            )
        dest = str(args["dest"])
        content = args["content"]
        if isinstance(content, (dict, list)):
            content = json.dumps(content)
        data = str(content).encode("utf-8")
        try:
            with open(dest, "rb") as f:
                same = f.read() == data
        except FileNotFoundError:
            same = False
        result.update(changed=not same, dest=dest)
        if same or self._task.check_mode:
            return result
        fd, part = tempfile.mkstemp(dir=os.path.dirname(dest) or ".", prefix=".record-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(part, 0o644)
            os.replace(part, dest)
        except BaseException:
            os.unlink(part)
            raise
        return result
