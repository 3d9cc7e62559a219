"""A Monarch client for test_monarch_forkserver.py: procs forked from a ProcForkserver.

An Owner actor starts a ProcForkserver preloading torch and spawns two
meshes, of 2 procs and of 1, with its bootstrap command (or, with
``--no-server``, with the command of a forkserver that is not running).
Each proc reports its pid, its parent and whether torch was loaded before
the actor's module imported anything. Then proc 1 of the first mesh is
SIGKILLed and the proc of the second exits with code 3; the Owner's
``__supervise__`` collects Monarch's reports (one per mesh). Prints one
JSON line.

Nothing here imports torch: the probes tell a preloaded torch from their own.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from typing import Any

from monarch.actor import Actor, MeshFailure, endpoint, this_host

_REPORT_TIMEOUT_S = 60.0


class Probe(Actor):
    def __init__(self) -> None:
        self.torch_preloaded = "torch" in sys.modules

    @endpoint
    def info(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "ppid": os.getppid(), "torch_preloaded": self.torch_preloaded}

    @endpoint
    def exit(self, code: int) -> None:
        os._exit(code)


class Owner(Actor):
    def __init__(self) -> None:
        self.reports: list[str] = []

    async def __supervise__(self, failure: MeshFailure) -> bool:
        if failure.mesh_name.startswith("probe_"):  # not Monarch's logger meshes
            self.reports.append(str(failure))
        return True

    @endpoint
    async def run(self, with_server: bool) -> dict[str, Any]:
        from torch_monarch.monarch.forkserver import ProcForkserver

        server = ProcForkserver(["torch"])
        command = server.bootstrap_command()
        if with_server:
            await server.start()
        meshes = [
            this_host().spawn_procs(per_host={"procs": n}, name=name, bootstrap_command=command)
            for name, n in (("killed", 2), ("exits", 1))
        ]
        probes = [procs.spawn(f"probe_{i}", Probe) for i, procs in enumerate(meshes)]
        infos = []
        for mesh in probes:
            infos += [info for _, info in sorted((await mesh.info.call()).items(), key=lambda kv: kv[0].rank)]
        os.kill(infos[1]["pid"], signal.SIGKILL)
        probes[1].exit.broadcast(3)
        deadline = time.monotonic() + _REPORT_TIMEOUT_S
        while len(self.reports) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        result = {
            "server_pid": server.pid,
            "probes": infos,
            "reports": self.reports,
            "recorded": {str(i["pid"]): server.exit_text(i["pid"]) for i in infos},
        }
        for procs in meshes:
            await procs.stop()
        server.stop()
        return result


def main() -> None:
    owner_procs = this_host().spawn_procs(per_host={"procs": 1}, name="owner")
    owner = owner_procs.spawn("owner", Owner)
    result = owner.run.call_one("--no-server" not in sys.argv).get()
    owner_procs.stop().get()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
