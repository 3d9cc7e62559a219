"""Foreign connections to a rank's listening port: garbage, truncated or
silent connections, wrong magic, wrong protocol version, wrong job token,
wrong world size, a rank that is not expected. Each is closed without a
reply (the endpoint's own handshake carries the job token) and logged; the
group keeps working with correct results and admits no extra connection,
both once it is formed and while a new group is forming (the case in which
a handshake with the right group id reaches the token and rank checks)."""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, Iterator

import torch.distributed as dist

from fault_workload import run_mix
from faults import assert_no_problems, backend_of, settled_baseline, teardown_leaks, wait_until
from multiproc import WorkerContext, run_workers
from wire_format import HANDSHAKE_BYTES, MAGIC, Frame, FrameKind, fnv1a64, handshake

logger = logging.getLogger(__name__)

STORE_WAIT = timedelta(seconds=60)
# How long an endpoint may take to close a connection it rejected.
CLOSE_BOUND_S = 5.0


# ---------------------------------------------------------------------------
# Finding the endpoint and talking to it
# ---------------------------------------------------------------------------


def listening_ports() -> set[tuple[str, int]]:
    """(address, port) of every TCP socket this process listens on."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except FileNotFoundError:
            continue
        for row in rows:
            cols = row.split()
            if cols[3] != "0A" or cols[9] not in inodes:  # 0A: LISTEN
                continue
            address_hex, port_hex = cols[1].split(":")
            if len(address_hex) == 8:
                address = socket.inet_ntoa(bytes.fromhex(address_hex)[::-1])
            else:
                address = "::1"
            found.add(("127.0.0.1" if address == "0.0.0.0" else address, int(port_hex, 16)))
    return found


def probe(endpoint: tuple[str, int], payload: bytes, close_after_send: bool = False) -> bytes:
    """Sends ``payload`` and returns what came back before the endpoint closed
    the connection; raises if it stays open longer than CLOSE_BOUND_S."""
    with socket.create_connection(endpoint, timeout=CLOSE_BOUND_S) as conn:
        try:
            conn.sendall(payload)
        except OSError:
            return b""  # closed while we were still sending: rejected
        if close_after_send:
            return b""
        received = b""
        while True:
            try:
                chunk = conn.recv(4096)
            except ConnectionResetError:
                return received
            except socket.timeout as error:
                raise AssertionError(f"{endpoint} kept a foreign connection open for {CLOSE_BOUND_S} s") from error
            if not chunk:
                return received
            received += chunk


@contextmanager
def captured_stderr(path: str) -> Iterator[None]:
    """Sends fd 2 (where the C++ backend logs) to ``path`` meanwhile."""
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.dup2(fd, 2)
        os.close(fd)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


# ---------------------------------------------------------------------------
# Attacks
# ---------------------------------------------------------------------------


def _garbage(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


def attacks_on_formed_group(group_hash: int) -> dict[str, tuple[bytes, bool]]:
    """name -> (bytes, close right after sending)."""
    heartbeat = Frame(kind=FrameKind.HEARTBEAT, op=0, dtype=0, reduce_op=0).encode()
    return {
        "garbage": (_garbage(HANDSHAKE_BYTES, 1), False),
        "flood": (_garbage(1 << 20, 2), False),
        "short then close": (_garbage(10, 3), True),
        "connect and close": (b"", True),
        "bad magic": (handshake(magic=MAGIC ^ 0xFFFF, group_hash=group_hash), False),
        "a frame instead of a handshake": (heartbeat + bytes(HANDSHAKE_BYTES - len(heartbeat)), False),
        "right group, no group forming": (handshake(group_hash=group_hash, rank=1), False),
    }


def attacks_on_forming_group(group_hash: int, token: bytes, world_size: int) -> dict[str, tuple[bytes, bool]]:
    wrong_token = bytes(b ^ 0x5A for b in token)
    return {
        "wrong token": (handshake(token=wrong_token, group_hash=group_hash, rank=1, world_size=world_size), False),
        "wrong version": (handshake(version=99, token=token, group_hash=group_hash, rank=1, world_size=world_size), False),
        "wrong world size": (handshake(token=token, group_hash=group_hash, rank=1, world_size=world_size + 1), False),
        "rank out of range": (handshake(token=token, group_hash=group_hash, rank=world_size, world_size=world_size), False),
        # Rank 0 dials nobody: it is never expected to arrive at rank 0.
        "unexpected rank": (handshake(token=token, group_hash=group_hash, rank=0, world_size=world_size), False),
        "bad magic": (handshake(magic=0, token=token, group_hash=group_hash, rank=1, world_size=world_size), False),
        "garbage": (_garbage(HANDSHAKE_BYTES, 4), False),
    }


# Phrases the endpoint's log must hold once the attacks above were rejected.
EXPECTED_LOG = (
    "bad magic",
    "closed before its handshake",
    "no group is forming",
    "wrong job token",
    "protocol version 99",
    "does not fit world size",
    "unexpected or duplicate rank 0",
)


def _attack(endpoint: tuple[str, int], attacks: dict[str, tuple[bytes, bool]], problems: list[str]) -> None:
    for name, (payload, close_after_send) in attacks.items():
        try:
            reply = probe(endpoint, payload, close_after_send)
        except (AssertionError, OSError) as error:
            problems.append(f"{name}: {error}")
            continue
        if reply:
            problems.append(f"{name}: the endpoint answered a rejected connection with {len(reply)} bytes")


def _formed_group_phase(ctx: WorkerContext, problems: list[str]) -> None:
    (endpoint,) = listening_ports()
    silent = socket.create_connection(endpoint)  # says nothing, stays open throughout
    try:
        name = dist.group.WORLD.group_name
        _attack(endpoint, attacks_on_formed_group(fnv1a64(name.encode())), problems)
        run_mix(1, 6, problems, "after foreign connections")
        connections = backend_of(dist.group.WORLD).connection_count()
        if connections != ctx.world_size - 1:
            problems.append(f"{connections} live connections after the attacks, expected {ctx.world_size - 1}")
    finally:
        silent.close()


def _forming_group_phase(ctx: WorkerContext, problems: list[str]) -> None:
    """Rank 0 is attacked while it waits for rank 1 to join a new group."""
    store = ctx.store()
    if ctx.rank != 0:
        store.wait(["attacked"], STORE_WAIT)
        group = dist.new_group(backend="monarch")
        run_mix(2, 6, problems, "new group", group)
        return
    before = listening_ports()
    name = str(dist.distributed_c10d._world.group_count)  # what new_group will call it
    created: list[Any] = []
    thread = threading.Thread(target=lambda: created.append(dist.new_group(backend="monarch")), name="new_group")
    thread.start()
    silent = None
    try:
        wait_until(lambda: len(listening_ports() - before) == 1, 30, "the new group's endpoint to listen")
        (endpoint,) = listening_ports() - before
        silent = socket.create_connection(endpoint)
        backend_store = dist.PrefixStore("cpu/", dist.PrefixStore(f"{name}/", dist.distributed_c10d._get_default_store()))
        backend_store.wait(["monarch/0/token"], STORE_WAIT)
        token = bytes.fromhex(backend_store.get("monarch/0/token").decode())
        _attack(endpoint, attacks_on_forming_group(fnv1a64(name.encode()), token, ctx.world_size), problems)
    finally:
        store.set("attacked", "1")
        thread.join(60)
        if silent is not None:
            silent.close()
    if thread.is_alive() or not created:
        problems.append("new_group did not complete after the attacks")
        return
    (group,) = created
    run_mix(2, 6, problems, "new group", group)
    connections = backend_of(group).connection_count()
    if connections != ctx.world_size - 1:
        problems.append(f"the new group's endpoint holds {connections} live connections, expected {ctx.world_size - 1}")


def trust_worker(ctx: WorkerContext) -> dict[str, Any]:
    log_path = os.path.join(ctx.tmp_dir, f"stderr-{ctx.rank}")
    problems: list[str] = []
    with captured_stderr(log_path):
        baseline = settled_baseline()
        ctx.init("monarch", timeout=timedelta(seconds=60))
        _formed_group_phase(ctx, problems)
        _forming_group_phase(ctx, problems)
        dist.barrier()
        problems += teardown_leaks(baseline)
    with open(log_path) as f:
        log = f.read()
    return {"problems": problems, "log": log}


def test_foreign_connections_are_rejected_and_logged() -> None:
    log = assert_no_problems(run_workers(trust_worker, 2, timeout=150))[0]["log"]
    logger.info("rank 0's log:\n%s", log)
    missing = [phrase for phrase in EXPECTED_LOG if phrase not in log]
    assert not missing, f"rank 0's log does not mention {missing}:\n{log}"
