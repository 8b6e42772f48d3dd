"""Joining the Ray cluster RAY_ADDRESS names: reach it, authenticate, connect; one-line errors otherwise.

Ray (2.52+) clusters may require token authentication (`RAY_AUTH_MODE=token` where the cluster
was started). A driver joining with an explicit address does not turn token mode on by itself,
and a refused or unreachable cluster makes `ray.init` retry for ~20 s, printing a warning per
try, before a traceback that names the head's own address rather than the one the user typed.
So before `ray.init` we ask the head's GCS once, with a short timeout, whether it answers and
whether it takes our token (the call Ray itself makes first, `GetClusterId`), and turn every
failure into one `InputError` line naming RAY_ADDRESS and what to do.

Where the token comes from (Ray's own order): `RAY_AUTH_TOKEN` (the token itself), then
`RAY_AUTH_TOKEN_PATH` (a file holding it), then `~/.ray/auth_token`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from problems.errors import InputError

ENV = "RAY_ADDRESS"
PROBE_TIMEOUT_S = 5.0
# `ray get-auth-token` reads the token where Ray would (the variables, else ~/.ray/auth_token): on a
# head started with RAY_AUTH_TOKEN_PATH it prints the cluster's token only with that variable set
GET_TOKEN = "`ray get-auth-token` prints it, run with the RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN the head was started with"
TOKEN_PLACES = "set RAY_AUTH_TOKEN to it, or RAY_AUTH_TOKEN_PATH to a file holding it, or put it in ~/.ray/auth_token"
_HOST_PORT = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9._-]+):(\d{1,5})$")


def find_token() -> tuple[str | None, str]:
    """The token this process would send and where it came from ('' when there is none)."""
    tok = os.environ.get("RAY_AUTH_TOKEN", "").strip()
    if tok:
        return tok, "RAY_AUTH_TOKEN"
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if path:
        try:
            tok = Path(path).expanduser().read_text().strip()
        except OSError as e:
            raise InputError(None, "RAY_AUTH_TOKEN_PATH", f"cannot read {path}: {e.strerror or e}",
                             "a file holding the Ray cluster's token") from None
        if not tok:
            raise InputError(None, "RAY_AUTH_TOKEN_PATH", f"{path} is empty", "a file holding the Ray cluster's token")
        return tok, f"RAY_AUTH_TOKEN_PATH ({path})"
    default = Path.home() / ".ray" / "auth_token"
    try:
        tok = default.read_text().strip()
    except OSError:
        return None, ""
    return (tok, str(default)) if tok else (None, "")


def probe(address: str, token: str | None, timeout: float = PROBE_TIMEOUT_S) -> tuple[str, str]:
    """Ask the GCS at `address` for its cluster id once: ('ok' | 'unauthenticated' | 'unreachable' | 'other', detail)."""
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    channel = grpc.insecure_channel(address)
    try:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        meta = [("authorization", f"Bearer {token}")] if token else None
        stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=timeout, metadata=meta)
        return "ok", ""
    except grpc.RpcError as e:
        code, detail = e.code(), (e.details() or "")
        if code == grpc.StatusCode.UNAUTHENTICATED:
            return "unauthenticated", detail
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            return "unreachable", _why(detail, code == grpc.StatusCode.DEADLINE_EXCEEDED, timeout)
        return "other", f"{code.name}: {detail}"[:160]
    finally:
        channel.close()


def _why(detail: str, timed_out: bool, timeout: float) -> str:
    """gRPC's long failure text as a short reason."""
    low = detail.lower()
    if timed_out or "deadline" in low or "timeout" in low:
        return f"no answer within {timeout:g} s"
    if "refused" in low:
        return "connection refused"
    if "resolv" in low or "lookup" in low or "not found" in low:
        return "host name not found"
    return detail.split(";")[0][:160] or "unreachable"


def check(address: str) -> bool:
    """Refuse an address we cannot join, in one line; True when the cluster wants our token."""
    if not _HOST_PORT.match(address):
        raise InputError(None, ENV, f"got {address!r}", "HOST:PORT of the Ray head, as `ray start --head` printed it")
    if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        return False  # the probe speaks plain gRPC; with TLS we leave the checks to ray.init
    status, detail = probe(address, None)
    if status == "ok":
        return False
    if status == "unreachable":
        raise InputError(None, ENV, f"no Ray cluster answers at {address}: {detail}",
                         "start one with `ray start --head --port=PORT` and set RAY_ADDRESS to the address it "
                         "prints, or unset RAY_ADDRESS to train on this machine")
    if status == "other":
        raise InputError(None, ENV, f"{address} does not answer as a Ray cluster's head ({detail})",
                         "HOST:PORT of the Ray head's GCS, as `ray start --head` printed it")
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "disabled":
        raise InputError(None, ENV, f"the Ray cluster at {address} requires a token but RAY_AUTH_MODE=disabled",
                         f"unset RAY_AUTH_MODE and {TOKEN_PLACES}; {GET_TOKEN}")
    token, source = find_token()
    if token is None:
        raise InputError(None, ENV, f"the Ray cluster at {address} requires a token and none was found",
                         f"{TOKEN_PLACES}; {GET_TOKEN}")
    status, detail = probe(address, token)
    if status == "unauthenticated":
        raise InputError(None, ENV, f"the Ray cluster at {address} refused the token from {source}",
                         f"use that cluster's token: {GET_TOKEN}")
    if status != "ok":
        raise InputError(None, ENV, f"the Ray cluster at {address} stopped answering: {detail}",
                         "check that its head is running")
    return True


def connect(address: str) -> None:
    """Join the cluster at `address` (RAY_ADDRESS), or end in one line naming RAY_ADDRESS."""
    import ray

    if ray.is_initialized():
        return
    plain = address not in ("auto",) and not address.startswith("ray://")
    if plain and check(address) and os.environ.get("RAY_AUTH_MODE", "").lower() != "token":
        # An explicit address never turns Ray's token mode on; its config is read at import, so
        # after setting the variable the config is re-read (what Ray does when it enables it).
        os.environ["RAY_AUTH_MODE"] = "token"
        from ray._raylet import Config

        Config.initialize("")
    try:
        ray.init(address=address, log_to_driver=False, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError, ray.exceptions.RayError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise InputError(None, ENV, f"joining the Ray cluster at {address} failed: {first}",
                         "check that this machine reaches every node's address and runs the cluster's Ray "
                         f"version ({ray.__version__} here)") from None
