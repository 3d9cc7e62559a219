"""Whether the kernel lets this job's ranks copy each other's memory
(process_vm_readv), which the cross-memory collectives need: not under
Yama's ptrace_scope of 1 or more, nor where a seccomp profile forbids the
call. Tests expect the cross-memory path where it is allowed and the
segments where it is not."""

from __future__ import annotations

import ctypes
import os

from multiproc import WorkerContext

__all__ = ["ranks_reach_each_other"]

_PROBE = 0x6D6F6E6172636821  # any value a read must return


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]


def ranks_reach_each_other(ctx: WorkerContext) -> bool:
    """True on every rank when each rank can read every other rank's memory;
    every rank calls it at the same point (it meets the others in the run's
    auxiliary store)."""
    store = ctx.store()
    word = ctypes.c_uint64(_PROBE)
    store.set(f"probe{ctx.rank}", f"{os.getpid()} {ctypes.addressof(word)}")
    libc = ctypes.CDLL(None, use_errno=True)
    reaches = True
    for peer in range(ctx.world_size):
        if peer == ctx.rank:
            continue
        pid, address = (int(part) for part in store.get(f"probe{peer}").decode().split())
        got = ctypes.c_uint64(0)
        local = _IoVec(ctypes.addressof(got), 8)
        remote = _IoVec(address, 8)
        moved = libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        reaches = reaches and moved == 8 and got.value == _PROBE
    store.set(f"reaches{ctx.rank}", "1" if reaches else "0")
    # The peers' words must stay alive until every rank has read them.
    answers = [store.get(f"reaches{peer}").decode() for peer in range(ctx.world_size)]
    return all(answer == "1" for answer in answers)
