"""A real multi-node Ray cluster on this one machine, one node per Linux network namespace.

As ../shared/RAY-NETNS.md records (measured here): a head namespace holding a bridge at 10.203.0.1/24,
worker namespaces at .2, .3 joined to it by veth pairs made directly between the namespaces (nothing
in the root namespace, no default route: no packet can leave), `lo` up in every namespace, one
`ray start` per namespace with a short temp dir, auth off and usage stats off through the
environment, a 100 MB object store. Teardown is by PID only (`ip netns pids`; never `ray stop`,
which kills by name, anyone's): worker namespaces first, then the head, SIGTERM then SIGKILL after a
grace, then `ip netns del`.

Namespace names carry this process's PID, so two test runs on one machine cannot collide (each has
its own bridge and addresses inside its own namespaces). Needs root (`ip netns add`);
`unavailable()` says why not where it cannot be done.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["RayNet", "ray_cluster", "unavailable"]

SUBNET = "10.203.0"
GCS_PORT = 6390
WORKER_RESOURCE = "servescope_load"  # offered by worker nodes only: --ray-resource keeps shards off the head
_BIN = Path(sys.executable).parent


def unavailable() -> str | None:
    """Why a namespace cluster cannot be made here (None: it can)."""
    if sys.platform != "linux":
        return "network namespaces are Linux only"
    if importlib.util.find_spec("ray") is None:
        return "Ray is not installed (scripts/setup-ray.sh, or pip install 'servescope[ray]')"
    if not (_BIN / "ray").exists():
        return f"no `ray` command beside {sys.executable}"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    if os.geteuid() != 0:
        return "`ip netns add` needs root"
    name = f"sbprobe{os.getpid()}"
    try:
        subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True, timeout=10)
    except (subprocess.SubprocessError, OSError) as e:
        return f"cannot make a network namespace: {e}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
    return None


@dataclass
class RayNet:
    """A running cluster: its namespaces (head first), addresses and environment."""

    head: str
    workers: list[str]
    tmp: Path
    env: dict[str, str]
    logs: Path
    created: list[str] = field(default_factory=list)
    started: dict[str, float] = field(default_factory=dict)  # step -> seconds

    @property
    def head_ip(self) -> str:
        return f"{SUBNET}.1"

    @property
    def address(self) -> str:
        return f"{self.head_ip}:{GCS_PORT}"

    def worker_ip(self, i: int) -> str:
        return f"{SUBNET}.{i + 2}"

    def argv(self, ns: str, argv: Sequence[str]) -> list[str]:
        """`argv` run inside namespace `ns`."""
        return ["ip", "netns", "exec", ns, *argv]

    def popen(self, ns: str, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.argv(ns, argv), env=self.env, **kwargs)

    def run(self, ns: str, argv: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(ns, argv), env=self.env, capture_output=True, text=True, timeout=timeout)

    def pids(self, ns: str) -> list[int]:
        """Every process in namespace `ns` (all started by us: the namespace is ours)."""
        out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=10).stdout
        return [int(p) for p in out.split()]

    def kill_node(self, ns: str) -> list[int]:
        """SIGKILL every process of a node's namespace at once (the node dies as a machine would)."""
        pids = self.pids(ns)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return pids

    def wait_port(self, ns: str, host: str, port: int, timeout: float) -> None:
        code = (
            f"import socket,sys,time\nd=time.time()+{timeout}\n"
            f"while time.time()<d:\n"
            f"    try: socket.create_connection(({host!r},{port}),0.5).close(); sys.exit(0)\n"
            f"    except OSError: time.sleep(0.1)\nsys.exit(1)"
        )
        if self.run(ns, [sys.executable, "-c", code], timeout=timeout + 10).returncode:
            raise RuntimeError(f"nothing listening on {host}:{port} in {ns} after {timeout:g} s")


def _alive(pid: int) -> bool:
    """Running and not a zombie (a killed daemon lingers as one until reaped: kill -0 would still succeed)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


def _stop(pids: list[int], grace_s: float) -> None:
    """SIGTERM, wait up to `grace_s` for each to go, SIGKILL what is left."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    for pid in pids:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)


def _teardown(net: RayNet) -> None:
    workers = [ns for ns in net.created if ns != net.head]
    _stop([p for ns in workers for p in net.pids(ns)], grace_s=3.0)
    if net.head in net.created:
        _stop(net.pids(net.head), grace_s=3.0)
    for ns in net.created:
        left = net.pids(ns)
        if left:  # (should not happen: say so rather than hide it)
            print(f"raynet: processes still in {ns} after teardown: {left}", file=sys.stderr)
            _stop(left, grace_s=0.0)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
    shutil.rmtree(net.tmp, ignore_errors=True)


def _sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=20)


@contextlib.contextmanager
def ray_cluster(n_workers: int = 2, *, logs: Path | None = None) -> Iterator[RayNet]:
    """A head and `n_workers` worker nodes, each in a namespace of its own; always torn down."""
    tag = f"sb{os.getpid()}"
    tmp = Path(tempfile.mkdtemp(prefix=f"sbr{os.getpid()}", dir="/tmp"))  # short: Unix socket paths < 107
    (tmp / "t").mkdir()
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "disabled",
        "RAY_USAGE_STATS_ENABLED": "0",
        "TMPDIR": str(tmp / "t"),
        "PYTHONUNBUFFERED": "1",
        "PATH": f"{_BIN}:{os.environ.get('PATH', '')}",
    }
    env.pop("RAY_ADDRESS", None)
    net = RayNet(
        head=f"{tag}h", workers=[f"{tag}w{i + 1}" for i in range(n_workers)], tmp=tmp, env=env, logs=logs or tmp
    )
    try:
        t = time.monotonic()
        _sh("ip", "netns", "add", net.head)
        net.created.append(net.head)
        _sh("ip", "-n", net.head, "link", "set", "lo", "up")
        _sh("ip", "-n", net.head, "link", "add", "br0", "type", "bridge")
        _sh("ip", "-n", net.head, "addr", "add", f"{net.head_ip}/24", "dev", "br0")
        _sh("ip", "-n", net.head, "link", "set", "br0", "up")
        for i, ns in enumerate(net.workers):
            _sh("ip", "netns", "add", ns)
            net.created.append(ns)
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
            _sh("ip", "-n", net.head, "link", "add", f"vh{i + 1}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            _sh("ip", "-n", net.head, "link", "set", f"vh{i + 1}", "master", "br0", "up")
            _sh("ip", "-n", ns, "addr", "add", f"{net.worker_ip(i)}/24", "dev", "eth0")
            _sh("ip", "-n", ns, "link", "set", "eth0", "up")
        net.started["namespaces"] = time.monotonic() - t
        common = [
            "--num-cpus=1",
            "--object-store-memory=100000000",
            "--disable-usage-stats",
            "--include-log-monitor=false",
        ]
        t = time.monotonic()
        head = net.run(
            net.head,
            [
                str(_BIN / "ray"),
                "start",
                "--head",
                f"--node-ip-address={net.head_ip}",
                f"--port={GCS_PORT}",
                "--include-dashboard=false",
                f"--temp-dir={tmp}/h",
                '--resources={"node_h": 1}',
                *common,
            ],
            timeout=90,
        )
        if head.returncode:
            raise RuntimeError(f"ray start --head failed: {head.stdout[-2000:]}{head.stderr[-2000:]}")
        net.started["head"] = time.monotonic() - t
        t = time.monotonic()
        procs = [
            net.popen(
                ns,
                [
                    str(_BIN / "ray"),
                    "start",
                    f"--address={net.address}",
                    f"--node-ip-address={net.worker_ip(i)}",
                    f"--temp-dir={tmp}/w{i + 1}",
                    f'--resources={{"{WORKER_RESOURCE}": 1, "node_w{i + 1}": 1}}',
                    *common,
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            for i, ns in enumerate(net.workers)
        ]
        for p in procs:
            out, _ = p.communicate(timeout=90)
            if p.returncode:
                raise RuntimeError(f"ray start (worker) failed: {out.decode(errors='replace')[-2000:]}")
        net.started["workers"] = time.monotonic() - t
        yield net
    finally:
        _teardown(net)
