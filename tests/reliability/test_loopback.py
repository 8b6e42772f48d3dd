"""A local `mosearch train` (no RAY_ADDRESS) listens on loopback only: every TCP listener of its
process tree (the driver, and the GCS, raylet, agents and workers Ray starts as its descendants) is
on 127.0.0.1 / ::1, or else refuses a caller without Ray's token (a gRPC call answered
UNAUTHENTICATED, an HTTP request answered 401/403).

The listeners are read from /proc/net/tcp{,6} and the socket inodes of the tree's file descriptors
(or from `ss -ltnp` where /proc/net is not readable; the test skips only if neither is). The run is
observed at a fixed point, not raced: the CLI runs in a subprocess whose Driver.fit first records
the listeners of its own tree, after set-up has started every process of the run, and again
before the teardown (listeners opened meanwhile, e.g. Ray's metrics servers).
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
# one read-only call per Ray gRPC server kind: GCS, raylet, object manager, core worker, dashboard agent
PROBES = ("/ray.rpc.NodeInfoGcsService/GetClusterId", "/ray.rpc.NodeManagerService/GetSystemConfig",
          "/ray.rpc.ObjectManagerService/Pull", "/ray.rpc.CoreWorkerService/NumPendingTasks",
          "/ray.rpc.ReporterService/HealthCheck")


def _tree(root: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    kids.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(d))
            except OSError:
                pass
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def _proc_listening() -> dict[int, tuple[str, int]] | None:
    """Listening TCP sockets by inode from /proc/net/tcp and tcp6; None when neither is readable."""
    out, read = {}, False
    for name, v6 in (("tcp", False), ("tcp6", True)):
        try:
            lines = Path(f"/proc/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        read = True
        for line in lines:
            f = line.split()
            if f[3] != "0A":  # LISTEN
                continue
            ip, port = f[1].split(":")
            raw = bytes.fromhex(ip)
            if v6:  # four host-order 32-bit words
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
            out[int(f[9])] = (str(ipaddress.ip_address(raw if v6 else raw[::-1])), int(port, 16))
    return out if read else None


def listeners(root: int) -> list[dict] | None:
    """TCP listeners of the process tree under `root`: pid, command, address, port; None if unreadable."""
    pids = _tree(root)
    table = _proc_listening()
    found = []
    if table is not None:
        for pid in pids:
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
            except OSError:
                continue
            for fd in fds:
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                m = re.fullmatch(r"socket:\[(\d+)\]", target)
                if m and int(m[1]) in table:
                    host, port = table[int(m[1])]
                    found.append({"pid": pid, "cmd": Path(cmd).name, "host": host, "port": port})
        return found
    if shutil.which("ss") is None:
        return None
    out = subprocess.run(["ss", "-H", "-ltnp"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = line.split()
        host, _, port = parts[3].rpartition(":")
        for name, pid in re.findall(r'\("([^"]+)",pid=(\d+)', line):
            if int(pid) in pids:
                found.append({"pid": int(pid), "cmd": name, "host": host.strip("[]"), "port": int(port)})
    return found


def loopback(host: str) -> bool:
    ip = ipaddress.ip_address(host.split("%")[0])
    return ip.is_loopback or bool(getattr(ip, "ipv4_mapped", None) and ip.ipv4_mapped.is_loopback)


def refuses_strangers(host: str, port: int) -> bool:
    """The listener turns away a caller without Ray's token (what a wildcard address reaches)."""
    import grpc

    target = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    channel = grpc.insecure_channel(f"[{target}]:{port}" if ":" in target else f"{target}:{port}")
    try:
        for method in PROBES:
            call = channel.unary_unary(method, request_serializer=lambda x: x, response_deserializer=lambda b: b)
            try:
                call(b"", timeout=5)
                return False  # answered without a token
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.UNAUTHENTICATED:
                    return True
                if e.code() != grpc.StatusCode.UNIMPLEMENTED:
                    break  # not gRPC (or not Ray's): ask it as HTTP
    finally:
        channel.close()
    try:
        conn = http.client.HTTPConnection(target, port, timeout=5)
        conn.request("GET", "/")
        return conn.getresponse().status in (401, 403)
    except (OSError, http.client.HTTPException):
        return False


SCRIPT = """
import json, os, sys
sys.path.insert(0, {here!r})
from test_loopback import listeners, loopback, refuses_strangers
import trainer.driver as D
seen = {{}}
def look():
    for x in listeners(os.getpid()):
        key = (x["pid"], x["host"], x["port"])
        if key not in seen:  # probed where it matters, and the GCS (the probe must tell a token check)
            probe = not loopback(x["host"]) or x["cmd"] == "gcs_server"
            x["authenticated"] = refuses_strangers(x["host"], x["port"]) if probe else None
            seen[key] = x
fit, shutdown = D.Driver.fit, D.Driver.shutdown
def fit_observed(self):
    look()  # set-up is done: every process of the run is up
    return fit(self)
def shutdown_observed(self):
    look()  # and once more before the teardown: listeners opened during the run
    with open({report!r}, "w") as f:
        json.dump(list(seen.values()), f)
    return shutdown(self)
D.Driver.fit, D.Driver.shutdown = fit_observed, shutdown_observed
from mosearch.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_local_run_listens_on_loopback_or_with_a_token(tmp_path):
    if listeners(os.getpid()) is None:
        pytest.skip("neither /proc/net/tcp nor `ss` is readable here")
    import yaml

    # colocated, two ranks and two engines on the machine's two devices: the ranks' rendezvous store
    # and the weight-sync group's are listeners of the run too
    plan = yaml.safe_load((ROOT / "tests" / "trainer" / "data" / "local_plan.yaml").read_text())
    plan["pools"][0].update(rollout_gpus=0, train_gpus=0, shared_gpus=2)
    plan["train"]["dp"] = 2
    plan["execution"] = {"mode": "colocated", "staleness_bound": 0, "pipeline_chunks": 1}
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
    plan = tmp_path / "plan.yaml"
    report = tmp_path / "listeners.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}  # a local run: no cluster to join
    env.update(PYTHONPATH=str(ROOT), MOSEARCH_LOCAL_DEVICES="2", MOSEARCH_CACHE=os.environ.get("MOSEARCH_CACHE") or str(tmp_path / "cache"))
    script = SCRIPT.format(here=str(Path(__file__).parent), report=str(report))
    proc = subprocess.run([sys.executable, "-c", script, "train", "--plan", str(plan), "--out", str(tmp_path / "run"),
                           "--steps", "1", "--backend", "hf", "--prompts-per-step", "4", "--group-size", "2",
                           "--max-new-tokens", "4", "--eval-size", "8", "--eval-every", "0", "--checkpoint-every", "0",
                           "--no-progress"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(report.read_text())
    by_cmd = {x["cmd"]: x for x in seen}
    assert {"gcs_server", "raylet", "ray::TrainWorker", "ray::HFEngine"} <= set(by_cmd) and len(seen) >= 8, seen
    # the probe tells: Ray's GCS turns a caller without the token away
    assert by_cmd["gcs_server"]["authenticated"], by_cmd["gcs_server"]
    open_ = [x for x in seen if not loopback(x["host"]) and not x["authenticated"]]
    assert open_ == [], f"listeners of a local run on non-loopback addresses, without authentication: {open_}"
