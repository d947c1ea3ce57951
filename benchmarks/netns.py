"""Network namespaces that stand in for machines (benchmarks/multihost.py): a hub host and hosts that each
reach it over a link of their own, a veth pair with a /30 of 10.213.0.0/16 (host number ``i``: the hub's end
``10.213.i.1``, the host's ``10.213.i.2``). No address is given outside these namespaces, and nothing of them
is in the machine's own namespace.

Every namespace is named ``<prefix><pid>-<host>``, ``pid`` being the process that made it, so a run finds the
namespaces that a killed run left behind (their maker is gone) and removes them, processes and all, without
touching those of a run still going (``clean_stale``). Needs root and ``ip`` (iproute2); ``unavailable()``
says why not where namespaces cannot be made.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time

SUBNET = "10.213.0.0/16"


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")
    return done


def namespaces() -> list[str]:
    """The names of the machine's network namespaces (``ip netns list``)."""
    return [line.split()[0] for line in ip("netns", "list").stdout.splitlines() if line.strip()]


def pids_in(namespace: str) -> list[int]:
    """The processes in ``namespace`` (``ip netns pids``)."""
    done = ip("netns", "pids", namespace, check=False)
    return [int(pid) for pid in done.stdout.split() if pid.isdigit()]


def kill_namespace(namespace: str) -> list[int]:
    """SIGKILL every process in ``namespace``, until none is left. -> the pids killed, in order."""
    killed: dict[int, None] = {}
    deadline = time.monotonic() + 10
    while (pids := pids_in(namespace)) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed[pid] = None  # a killed process may be listed again until it is reaped
        time.sleep(0.05)
    return list(killed)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale(prefix: str) -> list[str]:
    """Remove the namespaces named ``<prefix><pid>-...`` whose maker ``pid`` is gone (their processes are
    killed first). -> their names."""
    pattern = re.compile(rf"{re.escape(prefix)}(\d+)-")
    stale = [
        name for name in namespaces() if (found := pattern.match(name)) and not _alive(int(found.group(1)))
    ]
    for name in stale:
        kill_namespace(name)
        ip("netns", "del", name, check=False)
    return stale


def unavailable(prefix: str) -> str | None:
    """Why network namespaces cannot be made here (not root, no ``ip``, refused), or None."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    probe = f"{prefix}{os.getpid()}-probe"
    done = ip("netns", "add", probe, check=False)
    if done.returncode != 0:
        return f"ip netns add is refused here: {done.stderr.strip()}"
    ip("netns", "del", probe, check=False)
    return None


class Network:
    """A hub and ``hosts``, each host linked to the hub by a veth pair of its own (see the module)."""

    def __init__(self, prefix: str, hub: str, hosts: list[str]) -> None:
        if len(hosts) > 250 or len(set(hosts)) != len(hosts) or hub in hosts:
            raise ValueError(f"hosts must be distinct, fewer than 250 and not the hub: {hosts}")
        self.tag = f"{prefix}{os.getpid()}"
        self.hub = hub
        self.hosts = list(hosts)
        self.made: list[str] = []

    def namespace(self, host: str) -> str:
        return f"{self.tag}-{host}"

    def number(self, host: str) -> int:
        return self.hosts.index(host) + 1

    def hub_address(self, host: str) -> str:
        """The hub's address on ``host``'s link (what ``host`` connects to)."""
        return f"10.213.{self.number(host)}.1"

    def address(self, host: str) -> str:
        """``host``'s own address on its link."""
        return f"10.213.{self.number(host)}.2"

    def hub_end(self, host: str) -> str:
        """The name of the hub's end of ``host``'s link (in the hub's namespace)."""
        return f"link{self.number(host)}"

    def up(self) -> None:
        """Make the namespaces and links, addresses given, every interface up."""
        for host in [self.hub, *self.hosts]:
            ip("netns", "add", self.namespace(host))
            self.made.append(self.namespace(host))
            ip("-n", self.namespace(host), "link", "set", "lo", "up")
        hub = self.namespace(self.hub)
        for host in self.hosts:
            here, end = self.namespace(host), self.hub_end(host)
            ip("link", "add", end, "netns", hub, "type", "veth", "peer", "name", "eth0", "netns", here)
            ip("-n", hub, "addr", "add", f"{self.hub_address(host)}/30", "dev", end)
            ip("-n", here, "addr", "add", f"{self.address(host)}/30", "dev", "eth0")
            ip("-n", hub, "link", "set", end, "up")
            ip("-n", here, "link", "set", "eth0", "up")

    def argv(self, host: str, argv: list[str]) -> list[str]:
        """``argv`` run inside ``host``'s namespace."""
        return ["ip", "netns", "exec", self.namespace(host), *argv]

    def cut(self, host: str) -> None:
        """Pull ``host``'s cable at the hub: its packets are dropped both ways; its processes run on and
        their connections stay open, waiting, as across a real network failure."""
        ip("-n", self.namespace(self.hub), "link", "set", self.hub_end(host), "down")

    def restore(self, host: str) -> None:
        ip("-n", self.namespace(self.hub), "link", "set", self.hub_end(host), "up")

    def pids(self, host: str) -> list[int]:
        return pids_in(self.namespace(host))

    def kill(self, host: str) -> list[int]:
        """SIGKILL every process of ``host``, as a machine that dies. -> the pids killed."""
        return kill_namespace(self.namespace(host))

    def down(self) -> None:
        """Kill every process left in the namespaces and remove them (their links go with them)."""
        for name in reversed(self.made):
            kill_namespace(name)
            ip("netns", "del", name, check=False)
        self.made.clear()
