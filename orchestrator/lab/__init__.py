"""The lab: simulated GPU hosts in local systemd containers, reached over real SSH.

`images` builds the test-host images (recipes in images.yaml), `hosts` starts, lists and
removes test hosts, `container` is what `docker create` gets, `labnetwork` places each
lab's network, `keys` makes SSH keys and the pinned known_hosts, `labinventory` writes the
inventory and lab policy, `doubles` serves the test-double apt repository, `sysctl` checks
this machine's limits, `engine` is the only module that calls Docker, `running` is a
handle on a running lab for tests, and `cli` wires `provision lab ...` to them.
"""
