"""The lab: simulated GPU hosts in local systemd containers, reached over real SSH.

`images` builds the test-host images, `hosts` starts and removes test hosts, `keys` makes
SSH keys, `labinventory` writes the inventory, `engine` is the only module that calls Docker,
and `cli` wires `provision lab ...` to them.
"""
