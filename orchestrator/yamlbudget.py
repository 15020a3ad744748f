"""YAML from users read with a budget: a file whose aliases expand past it is refused.

YAML aliases share one node, so a few hundred bytes (`b: &b [*a, *a, ...]` nested seven
deep) stand for millions of values; whatever walks the loaded data afterwards (Ansible's
templating of host variables, a copy, JSON) walks all of them: a 254-byte group_vars file
cost `provision plan` 112 s and 760 MB. Each YAML text a user gives (inventory sources,
group_vars / host_vars, `-e @file`) is composed first (nodes only, aliases not expanded,
linear in the text) and its expanded size counted over the node graph; above
`NODE_BUDGET` nodes it is bad input, named, before it is constructed.

ansible-core reads these files itself, through the DataLoader it is given:
`data_loader()` is ansible-core's DataLoader whose `load` (what `load_from_file` and every
inventory and vars plugin call) checks the text first.
"""

from __future__ import annotations

from typing import Any

import yaml

from .errors import BadInputError

# Expanded nodes one YAML text may stand for: far above any real inventory (a 2,000-host
# YAML inventory with 20 variables each is about 100,000), far below what a walk of the
# loaded data can afford.
NODE_BUDGET = 1_000_000
_COMPOSER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def expanded_nodes(text: str, budget: int = NODE_BUDGET) -> int | None:
    """How many nodes `text` expands to, counting each alias as the whole node it names;
    stops counting once past `budget`. None: not YAML that composes (left to the reader's
    own error)."""
    try:
        root = yaml.compose(text, Loader=_COMPOSER)  # nodes only: no object is constructed
    except yaml.YAMLError:
        return None
    if root is None:
        return 0
    sizes: dict[int, int] = {}
    # post-order over the node graph, each node sized once (aliases reuse the node object)
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        if not children_done:
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)
            continue
        sizes[id(node)] = min(budget + 1, 1 + sum(sizes.get(id(c), 1) for c in children))
    return sizes[id(root)]


def check_text(text: str, where: str) -> None:
    """Bad input when `text` (from `where`, a file name) expands past NODE_BUDGET nodes."""
    if "*" not in text:  # no alias: nothing can expand (the common case, no composing)
        return
    size = expanded_nodes(text)
    if size is not None and size > NODE_BUDGET:
        raise BadInputError(
            f"{where}: its YAML aliases expand to more than {NODE_BUDGET:,} values (an "
            "alias bomb: a few nested `*alias` lists stand for millions of entries); it was "
            "not loaded",
            fix="write the values out, or use fewer nested aliases",
        )


def data_loader() -> Any:
    """ansible-core's DataLoader, each text it loads checked by `check_text` first."""
    from ansible.parsing.dataloader import DataLoader

    class BudgetedDataLoader(DataLoader):  # type: ignore[misc]
        def load(self, data: Any, file_name: Any = None, *args: Any, **kwargs: Any) -> Any:
            if isinstance(data, str):
                check_text(str(data), str(file_name) if file_name else "YAML text")
            return super().load(data, file_name, *args, **kwargs)

    return BudgetedDataLoader()
