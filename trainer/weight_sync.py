"""Weight sync: a collective broadcast from the training ranks to the rollout engines, along the plan's route.

Route (plan `weight_sync.route`), as groups whose first member is the source:
- direct: one group, training rank 0 -> every engine (gloo's broadcast sends one copy to each);
- staged: rank 0 -> one leader engine per region (one copy crosses each region link), then each
  leader broadcasts to the other engines of its region.

Each group is a torch process group created for the purpose (gloo on CPU, NCCL on GPU) over its own
TCPStore, separate from the ranks' training world. The sender side runs inside the training rank's
actor (`TrainWorker.broadcast_weights`): every rank iterates `TrainWorker.iter_full_state` (a
sharded trainer's gather is a collective all ranks join), rank 0 also sends. A Ray call cannot be
a generator across processes, so the loop lives where the tensors are. The receiver side runs in
the engine's actor and feeds vLLM's in-place reload a generator that receives bucket after bucket,
so an engine holds one bucket beyond its weights, never a second copy of the model.

Wire format per bucket, on every group: a header int64[4] = (version, meta bytes, payload bytes,
tensors), then one uint8 tensor: JSON metadata (name, dtype, shape, offset per tensor) followed by
the tensors' raw bytes, each at a 64-byte aligned offset. A header with 0 tensors ends the stream.

Colocated engines (the plan puts an engine on its trainer's device) take a hand-over instead of the
bytes, as verl and slime do with CUDA IPC: the sender packs each bucket into memory the receivers
can map (a CUDA IPC handle on GPU, a shared-memory file on CPU), the group carries only the handle
(always gloo: NCCL cannot put two ranks of a group on one device), and a barrier after each bucket
tells the sender every receiver has loaded it, so one bucket is shared at a time. A group is
shared only if every member reports the same device key (same GPU by UUID; on CPU, the same host):
asked for elsewhere, it carries bytes as usual.
"""

from __future__ import annotations

import datetime
import json
import os
import pickle
import tempfile
import time
import uuid
from dataclasses import dataclass, field

import torch

# Default bucket: 512 MiB, verl's default `update_weights_bucket_megabytes` (checkpoint engine).
# Peak extra memory: the sender holds one packed bucket (plus the bucket's gathered tensors), a
# receiver one received bucket (and a forwarding leader the same one).
BUCKET_BYTES = 512 << 20
ALIGN = 64  # byte alignment of each tensor in a bucket: any dtype view of the slice is legal
TIMEOUT_S = 300  # a peer that stops answering fails the sync after this long (a dead one at once)


@dataclass
class Group:
    """One broadcast: `members[0]` is the source. Members are ('worker', rank) or ('engine', index)."""

    name: str
    members: list[tuple[str, int]]
    cross_region: bool = False  # the source and at least one receiver are in different regions


def route_groups(route: str, engine_regions: list[str], sender_region: str) -> list[Group]:
    """The broadcast groups of a route, in the order every member must join them (a tree: no cycle)."""
    src = ("worker", 0)
    engines = [("engine", i) for i in range(len(engine_regions))]
    if route == "direct" or len(engines) <= 1:
        return [Group("direct", [src, *engines], any(r != sender_region for r in engine_regions))]
    if route != "staged":
        raise ValueError(f"unknown weight-sync route {route!r} (direct | staged)")
    regions = list(dict.fromkeys(engine_regions))  # in engine order
    leaders = [engine_regions.index(r) for r in regions]
    out = [Group("staged:cross", [src, *(("engine", i) for i in leaders)],
                 any(r != sender_region for r in regions))]
    for r, lead in zip(regions, leaders):
        rest = [("engine", i) for i, er in enumerate(engine_regions) if er == r and i != lead]
        if rest:
            out.append(Group(f"staged:fan:{r}", [("engine", lead), *rest]))
    return out


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on at `host` now (the one helper for every group or server this project
    hosts: loopback for processes of this machine, the Ray node's address for a group across nodes)."""
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def free_address() -> tuple[str, int]:
    """This node's address and a free port on it (for a group this process will host)."""
    try:
        import ray

        host = ray.util.get_node_ip_address()
    except Exception:  # outside Ray (unit tests)
        host = "127.0.0.1"
    return host, free_port(host)


def tcp_store(host: str, port: int, size: int, master: bool, timeout: datetime.timedelta):
    """A TCPStore whose server (on the master) listens on `host` only. torch's own server binds every
    interface (::), where anyone on the network can read and write the group's keys, unauthenticated:
    here it gets a socket bound to the address the group was given (loopback in a local run)."""
    if not master:
        return torch.distributed.TCPStore(host, port, size, False, timeout=timeout)
    import socket

    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return torch.distributed.TCPStore(host, port, size, True, timeout=timeout, master_listen_fd=sock.detach())


def _backend() -> str:
    return "nccl" if torch.cuda.is_available() else "gloo"


@dataclass
class Member:
    """This process's place in the groups: where it receives from, what it forwards to."""

    recv: object | None = None  # the process group it receives on (source rank 0)
    send: list = field(default_factory=list)  # process groups it is the source of
    names: list[str] = field(default_factory=list)
    stores: list = field(default_factory=list)
    shared: set = field(default_factory=set)  # names of the groups that carry hand-overs, not bytes
    recv_name: str | None = None
    send_names: list[str] = field(default_factory=list)

    @property
    def recv_shared(self) -> bool:
        return self.recv_name in self.shared

    def close(self) -> None:
        for pg in ([self.recv] if self.recv is not None else []) + self.send:
            try:
                pg.shutdown()  # closes the sockets: a peer blocked on us fails at once
            except Exception:  # already broken
                pass
        self.recv, self.send, self.names, self.stores = None, [], [], []
        self.shared, self.recv_name, self.send_names = set(), None, []


def device_key() -> str:
    """Who can map whose memory: the GPU (by UUID) on CUDA, the host (and its boot) on CPU."""
    if torch.cuda.is_available():
        return "cuda:" + str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
    try:
        boot = open("/proc/sys/kernel/random/boot_id").read().strip()
    except OSError:
        boot = ""
    import socket

    return f"host:{socket.gethostname()}:{boot}"


def join(specs: list[dict]) -> Member:
    """Create this member's process groups. `specs`: for each group it belongs to, in route order,
    {name, host, port, rank, size, share?}; every member of a group must call this at the same time.
    With `share`, the group carries hand-overs if all its members report one device key."""
    m = Member()
    timeout = datetime.timedelta(seconds=TIMEOUT_S)
    for s in specs:
        store = tcp_store(s["host"], s["port"], s["size"], s["rank"] == 0, timeout)
        prefix = torch.distributed.PrefixStore(s["name"], store)
        shared = False
        if s.get("share"):
            prefix.set(f"device/{s['rank']}", device_key())
            shared = len({prefix.get(f"device/{r}") for r in range(s["size"])}) == 1
        if _backend() == "nccl" and not shared:
            opts = torch.distributed.ProcessGroupNCCL.Options()
            pg = torch.distributed.ProcessGroupNCCL(prefix, s["rank"], s["size"], opts)
        else:
            pg = torch.distributed.ProcessGroupGloo(prefix, s["rank"], s["size"], timeout)
        m.stores.append(store)  # the store must outlive the group
        if shared:
            m.shared.add(s["name"])
        if s["rank"] == 0:
            m.send.append(pg)
            m.send_names.append(s["name"])
        else:
            m.recv, m.recv_name = pg, s["name"]
        m.names.append(s["name"])
    return m


def _bcast(pg, t: torch.Tensor) -> None:
    opts = torch.distributed.BroadcastOptions()
    opts.rootRank = 0
    pg.broadcast([t], opts).wait()


def buckets(items, bucket_bytes: int):
    """Cut a lazy stream of (name, tensor) into lists of at most `bucket_bytes` (a larger tensor is
    a bucket of its own); the stream is read only as far as the current bucket needs."""
    bucket, size = [], 0
    for name, t in items:
        n = t.numel() * t.element_size()
        if bucket and size + n > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, t))
        size += n
    if bucket:
        yield bucket


# -- packing -------------------------------------------------------------------------------------
def pack(items: list[tuple[str, torch.Tensor]], device: torch.device | None = None,
         alloc=None) -> tuple[dict, torch.Tensor]:
    """A bucket as (metadata, one flat uint8 tensor holding every tensor's bytes, aligned).
    `alloc(nbytes)` provides the flat tensor (shared memory for a hand-over); default: `device`."""
    meta, off = [], 0
    for name, t in items:
        n = t.numel() * t.element_size()
        meta.append([name, str(t.dtype).removeprefix("torch."), list(t.shape), off, n])
        off += -(-n // ALIGN) * ALIGN
    flat = alloc(off) if alloc else torch.empty(off, dtype=torch.uint8, device=device or items[0][1].device)
    for (_, t), (_, _, _, o, n) in zip(items, meta):
        flat[o:o + n].copy_(t.detach().contiguous().reshape(-1).view(torch.uint8))
    return {"tensors": meta}, flat


def unpack(meta: dict, flat: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """Views into `flat` (no copy): the loader copies them into the engine's parameters."""
    out = []
    for name, dtype, shape, o, n in meta["tensors"]:
        out.append((name, flat[o:o + n].view(getattr(torch, dtype)).view(shape)))
    return out


# -- hand-over: memory both ends map --------------------------------------------------------------
def _shm_dir() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


class SharedBucket:
    """A bucket the receivers map instead of receiving: a shared-memory file on CPU, the packed
    tensor itself (exported as a CUDA IPC handle) on GPU. `close()` frees it after the barrier."""

    def __init__(self, device: torch.device):
        self.device, self.path, self.flat = device, None, None

    def alloc(self, nbytes: int) -> torch.Tensor:
        if self.device.type == "cuda":
            self.flat = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        else:
            self.path = os.path.join(_shm_dir(), f"mosearch-sync-{os.getpid()}-{uuid.uuid4().hex}")
            self.flat = torch.from_file(self.path, shared=True, size=max(nbytes, 1), dtype=torch.uint8)[:nbytes]
        return self.flat

    def handle(self) -> torch.Tensor:
        """What the receivers need to map the bucket, as bytes in a uint8 tensor (for `_frame`)."""
        if self.device.type == "cuda":
            from torch.multiprocessing.reductions import reduce_tensor

            blob = pickle.dumps(("cuda_ipc", reduce_tensor(self.flat)))
        else:
            blob = pickle.dumps(("shm", self.path, self.flat.numel()))
        return torch.frombuffer(bytearray(blob), dtype=torch.uint8)

    def close(self) -> None:
        self.flat = None
        if self.path:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            self.path = None


def _hand_over(pg, frame: tuple[torch.Tensor, torch.Tensor]) -> None:
    """Send a hand-over's (head, body) frame, then wait until every receiver has loaded the bucket."""
    _bcast(pg, frame[0])
    _bcast(pg, frame[1])
    pg.barrier().wait()


def open_handle(blob: bytes) -> torch.Tensor:
    """The receiver's view of a shared bucket (no copy)."""
    kind, *rest = pickle.loads(blob)  # from this run's own training rank, over the run's own group
    if kind == "cuda_ipc":
        fn, args = rest[0]
        return fn(*args)
    path, nbytes = rest
    return torch.from_file(path, shared=True, size=max(nbytes, 1), dtype=torch.uint8)[:nbytes]


# -- the two ends ----------------------------------------------------------------------------------
def send(member: Member | None, version: int, buckets, device: torch.device) -> dict:
    """Consume `buckets` (lists of (name, full tensor)) and, if this process is a source, broadcast
    each on every group it sources. Times: gather (producing and packing buckets), transfer.

    Every rank must consume all buckets even if sending failed: a sharded trainer's gather is a
    collective. A failure closes this member's groups (so receivers fail at once, not after a
    timeout) and is returned as `error`."""
    groups = member.send if member is not None else []
    shared = [n in member.shared for n in member.send_names] if groups else []
    st = {"gather_s": 0.0, "transfer_s": 0.0, "bytes": 0, "shared_bytes": 0, "buckets": 0, "error": None,
          "transport": ("cuda_ipc" if device.type == "cuda" else "shared_memory") if any(shared) else "bytes"}
    it = iter(buckets)
    while True:
        t0 = time.perf_counter()
        bucket = next(it, None)
        if bucket is None:
            st["gather_s"] += time.perf_counter() - t0
            break
        if not groups or st["error"]:
            st["gather_s"] += time.perf_counter() - t0
            continue
        box = SharedBucket(device) if any(shared) else None
        meta, flat = pack(bucket, device, box.alloc if box else None)
        head, body = _frame(version, meta, flat) if not all(shared) else (None, None)
        hand = _frame(version, meta, box.handle()) if box else None  # the handle goes over gloo
        st["gather_s"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        try:
            for pg, handover in zip(groups, shared):
                if handover:
                    _hand_over(pg, hand)
                    st["shared_bytes"] += flat.numel()
                else:
                    _bcast(pg, head)
                    _bcast(pg, body)
                    st["bytes"] += body.numel() * (pg.size() - 1)  # one copy per receiver
        except Exception as err:  # a receiver died: stop sending, finish the gather
            st["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            member.close()
        finally:
            if box:
                box.close()
        st["transfer_s"] += time.perf_counter() - t0
        st["buckets"] += 1
    if groups and not st["error"]:
        t0 = time.perf_counter()
        try:
            for pg, handover in zip(groups, shared):
                _bcast(pg, torch.zeros(4, dtype=torch.int64, device="cpu" if handover else device))
        except Exception as err:
            st["error"] = f"{type(err).__name__}: {err}"
            member.close()
        st["transfer_s"] += time.perf_counter() - t0
    return st


def _frame(version: int, meta: dict, flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    mb = json.dumps(meta).encode()
    mpad = -(-len(mb) // ALIGN) * ALIGN
    body = torch.empty(mpad + flat.numel(), dtype=torch.uint8, device=flat.device)
    body[:len(mb)].copy_(torch.frombuffer(bytearray(mb), dtype=torch.uint8))
    body[len(mb):mpad].fill_(ord(" "))
    body[mpad:].copy_(flat)
    head = torch.tensor([version, mpad, flat.numel(), len(meta["tensors"])], dtype=torch.int64, device=flat.device)
    return head, body


class Receiver:
    """An engine's end: `stream()` yields (name, tensor) bucket by bucket, forwarding each bucket to
    the groups this engine sources (staged fan-out) before handing it to the loader. A broken peer
    ends the stream early with `error` set (the loader then finishes cleanly; the driver resends)."""

    def __init__(self, member: Member, version: int, device: torch.device, die_after_buckets: int | None = None):
        self.member, self.version, self.device = member, version, device
        self.die_after = die_after_buckets
        self.st = {"transfer_s": 0.0, "bytes": 0, "buckets": 0, "forward_s": 0.0, "forwarded_bytes": 0,
                   "error": None}

    def stream(self):
        pg, shared = self.member.recv, self.member.recv_shared
        dev = torch.device("cpu") if shared else self.device  # a hand-over's handle comes over gloo
        if shared:
            self.st["transport"] = "cuda_ipc" if self.device.type == "cuda" else "shared_memory"
        while True:
            t0 = time.perf_counter()
            try:
                head = torch.empty(4, dtype=torch.int64, device=dev)
                _bcast(pg, head)
                version, mlen, plen, n = (int(x) for x in head.tolist())
                body = flat = None
                if n:
                    body = torch.empty(mlen + plen, dtype=torch.uint8, device=dev)
                    _bcast(pg, body)
                    meta = json.loads(bytes(body[:mlen].cpu().numpy()).decode())
                    flat = open_handle(bytes(body[mlen:].numpy())) if shared else body[mlen:]
            except Exception as err:
                self._fail(err)
                return
            self.st["transfer_s"] += time.perf_counter() - t0
            t0 = time.perf_counter()
            try:
                for out, name in zip(self.member.send, self.member.send_names):
                    self._forward(out, name in self.member.shared, head, body, version, meta if n else None, flat,
                                  body[mlen:] if shared and n else None)
            except Exception as err:
                self._fail(err)
                return
            self.st["forward_s"] += time.perf_counter() - t0
            if not n:
                return
            if version != self.version:
                self._fail(RuntimeError(f"got weights v{version}, expected v{self.version}"))
                return
            self.st["bytes"] += flat.numel() if shared else body.numel()  # what came on the wire / mapped
            self.st["buckets"] += 1
            if self.die_after is not None and self.st["buckets"] >= self.die_after:
                _die()  # test hook: this engine dies mid-sync, after its first buckets
            yield from unpack(meta, flat)
            if shared:  # loaded: the sender may free this bucket
                del flat
                try:
                    pg.barrier().wait()
                except Exception as err:
                    self._fail(err)
                    return

    def _forward(self, out, handover: bool, head, body, version, meta, flat, handle) -> None:
        """A leader passes the bucket on: as it came when the kinds match, else re-framed (bytes from
        a hand-over, or a hand-over of received bytes), waiting for the fan-out's barrier."""
        if meta is None:  # end of stream
            _bcast(out, torch.zeros(4, dtype=torch.int64, device="cpu" if handover else self.device))
            return
        if handover:
            box = None
            if handle is None:  # received bytes: share them
                box = SharedBucket(self.device)
                box.alloc(flat.numel()).copy_(flat)
                handle = box.handle()
            try:
                _hand_over(out, _frame(version, meta, handle))
            finally:
                if box:
                    box.close()
            return
        if handle is not None:  # received a hand-over: send the bytes
            head, body = _frame(version, meta, flat.to(self.device))
        _bcast(out, head)
        _bcast(out, body)
        self.st["forwarded_bytes"] += body.numel() * (out.size() - 1)

    def _fail(self, err: Exception) -> None:
        self.st["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        self.member.close()


def _die() -> None:
    import os
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


class SyncEndpoint:
    """Mixed into the training worker and the engines: what the driver calls to (re)build the groups."""

    _sync: Member | None = None

    def sync_address(self) -> tuple[str, int]:
        return free_address()

    def sync_join(self, specs: list[dict]) -> dict[str, bool]:
        """Join; returns each of this member's groups and whether it carries hand-overs."""
        self.sync_close()
        self._sync = join(specs)
        return {n: n in self._sync.shared for n in self._sync.names}

    def sync_close(self) -> None:
        if self._sync is not None:
            self._sync.close()
            self._sync = None


def connect(groups: list[Group], workers: list, engines: list, share: bool = False) -> list:
    """Build the groups on Ray actors: ask each source for an address, then have every member join
    its groups at once (joins block until the whole group is there). Returns the join refs.
    `share`: the plan colocates engines with the trainer: hand over where members share a device."""
    import ray

    actor = lambda m: (workers if m[0] == "worker" else engines)[m[1]]  # noqa: E731
    addrs = ray.get([actor(g.members[0]).sync_address.remote() for g in groups])
    specs: dict[tuple[str, int], list[dict]] = {}
    for g, (host, port) in zip(groups, addrs):
        for rank, m in enumerate(g.members):
            specs.setdefault(m, []).append({"name": g.name, "host": host, "port": port, "rank": rank,
                                            "size": len(g.members), "share": share})
    return [actor(m).sync_join.remote(s) for m, s in specs.items()]
