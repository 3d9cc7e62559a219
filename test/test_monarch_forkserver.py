"""ProcForkserver under real Monarch: trainer procs forked from a process that imported torch.

A Monarch client (test/scripts/forkserver_procs.py, in its own session)
spawns procs through the forkserver's bootstrap command; Monarch must see
them exactly as procs it started itself: the same signal, the same exit
code in its failure reports. Without a running forkserver the command
falls back to Monarch's usual bootstrap. No process may be left behind.
The server itself refuses malformed requests and goes on serving.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from commands import REPO_ROOT, repo_env, run_bounded

pytest.importorskip("monarch.actor")

SCRIPT = REPO_ROOT / "test" / "scripts" / "forkserver_procs.py"


def _run(*args: str) -> dict[str, Any]:
    out = run_bounded([sys.executable, str(SCRIPT), *args], 150, repo_env())
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    assert out.returncode == 0 and lines, out.stdout[-4000:]
    return json.loads(lines[-1][len("RESULT "):])


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _report(result: dict[str, Any], mesh: str) -> str:
    reports = [r for r in result["reports"] if f"mesh_name={mesh}-" in r]
    assert len(reports) == 1, result["reports"]
    return reports[0]


@pytest.mark.timeout(200)
def test_procs_fork_from_the_preloaded_server_and_monarch_sees_their_exits() -> None:
    result = _run()
    server = result["server_pid"]
    assert server
    for probe in result["probes"]:
        assert probe["ppid"] == server, result
        assert probe["torch_preloaded"], result
    killed, exited = result["probes"][1]["pid"], result["probes"][2]["pid"]
    assert "crashed_ranks=[1]" in _report(result, "probe_0") and "Killed(sig=9)" in _report(result, "probe_0")
    assert "exited with non-zero code 3" in _report(result, "probe_1")
    assert result["recorded"][str(killed)] == "Killed(sig=9)"
    assert result["recorded"][str(exited)] == "exited with non-zero code 3"
    assert result["recorded"][str(result["probes"][0]["pid"])] == ""  # still running when asked
    left = [pid for pid in [server, *(p["pid"] for p in result["probes"])] if _alive(pid)]
    assert not left, f"processes left behind: {left}"


@pytest.mark.timeout(200)
def test_without_a_server_procs_start_the_usual_way() -> None:
    result = _run("--no-server")
    for probe in result["probes"]:
        assert not probe["torch_preloaded"], result
    assert "Killed(sig=9)" in _report(result, "probe_0")
    assert "exited with non-zero code 3" in _report(result, "probe_1")
    left = [p["pid"] for p in result["probes"] if _alive(p["pid"])]
    assert not left, f"processes left behind: {left}"


@pytest.mark.timeout(120)
def test_the_server_refuses_malformed_requests_and_goes_on_serving(tmp_path: Path) -> None:
    import array
    import socket
    import struct
    import subprocess

    path, exits = str(tmp_path / "socket"), str(tmp_path / "exits")
    server = subprocess.Popen(
        [sys.executable, "-m", "torch_monarch.monarch.forkserver", path, exits, str(os.getpid())],
        env=repo_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == b"ready"
        for garbage in (b"\xff\xff\xff\xffjunk", struct.pack("!I", 5) + b"{not json"):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.connect(path)
                conn.sendall(garbage)
                try:
                    answer = conn.recv(4)
                except ConnectionResetError:  # closed with the garbage unread
                    answer = b""
                assert answer == b"", "a malformed request was answered with a pid"
        # A well-formed request is still served: its proc fails at once (no such working directory).
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(path)
            body = json.dumps({"env": {}, "cwd": str(tmp_path / "missing"), "client_pid": os.getpid()}).encode()
            fds = array.array("i", [0, 1, 2]).tobytes()
            conn.sendmsg([struct.pack("!I", len(body)), body], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
            pid = struct.unpack("!i", conn.recv(4))[0]
            status = struct.unpack("!i", conn.recv(4))[0]
        assert pid > 0 and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 1
        assert server.poll() is None
    finally:
        server.kill()
        server.wait()
    assert server.stderr is not None and server.stderr.read().count(b"refused a request") == 2
