"""The container runtime planners: Docker's source (docker role) and the NVIDIA container
toolkit's version, default runtime and CDI spec (nvidia_container_toolkit role)."""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import PolicyError
from . import HostContext, RolePlan, os_name

# OSes that Docker's own repository does not serve (tests/recorded/reference/packages.yaml
# docker_ce.rhel: only /linux/rhel, whose $releasever=2023 path is a 404 on Amazon Linux 2023),
# and whose own repositories carry docker (https://docs.aws.amazon.com/linux/al2023/ug/ecs.html:
# "AL2023 includes these packages [containerd, docker] in the core repositories").
NO_DOCKER_CE = {"amzn": "Amazon Linux"}
# RHEL and its rebuilds carry no Docker engine of their own (Docker's docs install it from
# download.docker.com/linux/rhel: tests/recorded/reference/packages.yaml docker_ce.rhel;
# `moby-engine` is Fedora's), so docker_source=distribution there is bad input.
NO_DISTRIBUTION_DOCKER = {"rhel": "RHEL", "rocky": "Rocky Linux", "almalinux": "AlmaLinux"}


def plan_docker(ctx: HostContext) -> RolePlan:
    facts, notes = ctx.facts, ctx.notes
    docker = facts.runtime.docker_version
    docker_source = ctx.policy["docker_source"]
    distro = NO_DOCKER_CE.get(facts.os.id) if facts.os else None
    if distro and docker_source == "docker":
        notes.warnings.append(
            f"Docker's repository has no {distro} path: Docker from {distro}'s own "
            "repository (docker_source=distribution)"
        )
        docker_source = "distribution"
    refused = NO_DISTRIBUTION_DOCKER.get(facts.os.id) if facts.os else None
    if refused and docker_source == "distribution":
        raise PolicyError(
            f"docker_source=distribution on {refused} ({os_name(facts)}): {refused} ships "
            "no Docker engine (moby-engine is Fedora's); Docker comes from Docker's "
            "repository (download.docker.com/linux/rhel)",
            host=facts.host,
            fix="set docker_source to docker for this host",
        )
    source = "Docker's repository" if docker_source == "docker" else "the distribution"
    installed = _docker_package_source(facts.packages)
    if installed and installed != docker_source:
        package = "docker.io" if "docker.io" in facts.packages else "docker"
        other = f"the distribution's {package}" if installed == "distribution" else "Docker CE"
        notes.warnings.append(
            f"{other} is installed but docker_source={docker_source}: the role "
            "switches packages (containers stop); set docker_source to keep what is there"
        )
    reason = (
        f"Docker {docker} present: the role converges its packages and daemon.json"
        if docker
        else f"install Docker from {source}"
    )
    return RolePlan("docker", {"docker_source": docker_source}, reason)


def plan_toolkit(ctx: HostContext) -> RolePlan:
    facts, policy = ctx.facts, ctx.policy
    if facts.runtime.docker_version is None and "docker" not in policy["gpuprov_roles"]:
        ctx.notes.warnings.append(
            "nvidia_container_toolkit is planned without docker and no Docker is installed: "
            "the toolkit has no runtime to configure"
        )
    tk = facts.runtime.toolkit_version
    wanted = policy["nvidia_container_toolkit_version"] or ""
    if tk and (not wanted or wanted in tk):
        reason = f"toolkit {tk} present: the role checks the runtime and the CDI spec"
    else:
        reason = f"install nvidia-container-toolkit {wanted or '(newest, then held)'}"
        reason += " and configure the Docker runtime and a CDI spec"
    toolkit = {
        "nvidia_container_toolkit_version": wanted,
        "nvidia_container_toolkit_default_runtime": policy[
            "nvidia_container_toolkit_default_runtime"
        ],
        "nvidia_container_toolkit_cdi_spec": policy["nvidia_container_toolkit_cdi_spec"],
    }
    return RolePlan("nvidia_container_toolkit", toolkit, reason)


def _docker_package_source(packages: Mapping[str, str]) -> str | None:
    """Which source the installed Docker came from, by package name (None: none installed)."""
    if "docker-ce" in packages:
        return "docker"
    if "docker.io" in packages or "docker" in packages:  # Debian/Ubuntu, Amazon Linux
        return "distribution"
    return None
