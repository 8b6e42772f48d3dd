"""A multi-node Ray cluster on this machine, as a user would run one: a head and more nodes, each a
separate `ray start --block` process (its own raylet, resources, labels and ports), with token
authentication on and the token in a file of the cluster's own temp dir (never ~/.ray).

Only what this object started is stopped: each `ray start --block` is our child and stops its own
node's processes on SIGTERM; anything left that names our private temp dir is ours and is killed by
pid. Never `ray stop`, which would stop every Ray of this user on the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RAY = Path(sys.executable).with_name("ray")
START_WAIT_S = 300  # a safety net only: start-up is waited for on the node's "started" line
AUTH_VARS = ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


def clean_env(**extra) -> dict:
    """This process's environment without Ray address or auth settings, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in AUTH_VARS}
    env.update(PYTHONPATH=str(ROOT), RAY_USAGE_STATS_ENABLED="0")
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RayNodes:
    def __init__(self, **env):
        """`env`: extra environment of every node's processes (e.g. Ray's RAY_health_check_* settings)."""
        self.extra = env
        # short: Ray's unix socket paths under it must stay below ~107 characters
        self.root = Path(tempfile.mkdtemp(prefix="msray-"))
        self.token_file = self.root / "token"
        self.token_file.write_text(f"mosearch-test-{os.getpid()}-{time.time_ns()}")
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.procs: list[tuple[subprocess.Popen, Path]] = []

    def env(self, **extra) -> dict:
        """A clean environment for a process of this cluster or a driver joining it (no inherited auth)."""
        return clean_env(**extra)

    def _start(self, args: list[str], resources: dict, labels: dict, num_cpus: int) -> None:
        n = len(self.procs)
        log = self.root / f"node{n}.log"
        ports = ["--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
                 "--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--metrics-export-port"]
        cmd = [str(RAY), "start", "--block", *args, "--temp-dir", str(self.root / "ray"),
               "--resources", json.dumps(resources),
               *(["--labels", ",".join(f"{k}={v}" for k, v in labels.items())] if labels else []),
               "--num-cpus", str(num_cpus), "--num-gpus", "0", "--object-store-memory", str(100 * 2**20),
               "--disable-usage-stats", *[x for p in ports for x in (p, str(free_port()))]]
        env = self.env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(self.token_file), **self.extra)
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=self.root,
                                    start_new_session=True)
        self.procs.append((proc, log))
        deadline = time.monotonic() + START_WAIT_S
        while b"Ray runtime started" not in log.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-3000:]
                self.stop()
                raise RuntimeError(f"ray node {n} did not start (exit {proc.returncode}):\n{tail}")
            time.sleep(0.5)

    def start_head(self, resources: dict, labels: dict, num_cpus: int = 4) -> None:
        self._start(["--head", "--port", str(self.port),
                     "--include-dashboard", "false", "--dashboard-port", str(free_port()),
                     "--ray-client-server-port", str(free_port())], resources, labels, num_cpus)

    def add_node(self, resources: dict, labels: dict, num_cpus: int = 4, ip: str | None = None) -> None:
        """`ip`: the node's own address (another loopback address stands for another machine)."""
        self._start(["--address", self.address, *(["--node-ip-address", ip] if ip else [])], resources, labels, num_cpus)

    def ours(self) -> list[int]:
        """Pids of processes whose command line names our temp dir (only we use it)."""
        pids = []
        for d in Path("/proc").iterdir():
            if d.name.isdigit() and int(d.name) != os.getpid():
                try:
                    if str(self.root).encode() in (d / "cmdline").read_bytes():
                        pids.append(int(d.name))
                except OSError:
                    pass
        return pids

    def stop(self) -> None:
        for proc, _ in reversed(self.procs):  # workers first, the head last
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=90)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        for pid in self.ours():  # a process a node did not take down with it
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.procs = []
        shutil.rmtree(self.root, ignore_errors=True)


INSPECT = """
import json, ray
ray.init(log_to_driver=False, configure_logging=False)
from ray.util import placement_group_table
nodes = [{"id": n["NodeID"], "address": n["NodeManagerAddress"], "resources": n["Resources"], "labels": n.get("Labels", {})}
         for n in ray.nodes() if n["Alive"]]
pgs = [p["state"] for p in placement_group_table().values()]
print(json.dumps({"nodes": nodes, "available": ray.available_resources(), "total": ray.cluster_resources(), "pgs": pgs}))
"""


def inspect(cluster: RayNodes) -> dict:
    """The cluster's nodes, free and total resources and placement groups, seen by a separate driver."""
    env = cluster.env(RAY_ADDRESS=cluster.address, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(cluster.token_file))
    out = subprocess.run([sys.executable, "-c", INSPECT], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])
