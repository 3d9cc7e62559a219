"""A real SLURM cluster on this machine, started and stopped by the tests (``slurm_cluster`` fixture).

Daemons, all children of the test process, each in a session of its own and
all bound to loopback (or to a Unix socket):

* ``munged``: authentication, on a socket in the cluster's directory;
* ``mariadbd`` (``--skip-networking``, Unix socket only) and ``slurmdbd``:
  job accounting, which ``sacct`` reads (TorchX's SLURM status, and the
  tests' checks of what became of each job);
* ``slurmctld`` and one ``slurmd`` per node.

Several nodes on one machine: Debian's SLURM 22.05 is built with
``--enable-multiple-slurmd``, so each node is a ``slurmd -N name`` with its
own ``Port=`` on 127.0.0.1 (see :func:`_multiple_slurmd`); with a build that
is not, the cluster has one node. (slurmd in network namespaces of their own
would work with any build, but needs veth pairs and routes the test would
have to set up and tear down; not needed here.) The first node is named
after this machine, the others ``node2``, ``node3``. Nodes declare their
CPUs and memory (``SlurmdParameters=config_overrides``) rather than this
machine's: each holds one replica agent.

``stop`` cancels every job, then stops the daemons (SIGTERM, then SIGKILL
of their sessions); the fixture fails if a job process had to be killed.

Run ``python test/support/slurm_cluster.py`` to bring one up by hand (until Ctrl-C).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional

import pytest

__all__ = ["SlurmCluster", "slurm_cluster", "unavailable_reason"]

DAEMONS = ("munged", "mariadbd", "mariadb-install-db", "slurmdbd", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "sacct", "scancel", "sinfo", "sacctmgr", "scontrol")
PACKAGES = "slurm-wlm slurmctld slurmd slurmdbd munge mariadb-server"
# One replica agent per node (a ReplicaSpec asks for 2 CPUs and 4 GiB by default), so a
# job's replicas land on different nodes and a replacement on the one left free.
NODE_CPUS = 2
NODE_MEMORY_MB = 8192
START_TIMEOUT_S = 60.0


def unavailable_reason() -> Optional[str]:
    """Why a cluster cannot run here, or None."""
    if os.geteuid() != 0:
        return "the SLURM test cluster runs its daemons as root (SlurmUser=root); not root"
    missing = [name for name in (*DAEMONS, *CLIENTS) if shutil.which(name) is None]
    if missing:
        return f"SLURM test cluster: {', '.join(missing)} not installed (apt-get install {PACKAGES}; .ci/run does)"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(predicate: Callable[[], bool], timeout: float, what: str, log: Optional[Path] = None) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-3000:] if log is not None and log.exists() else ""
            raise RuntimeError(f"SLURM test cluster: timed out after {timeout:.0f}s waiting for {what}\n{tail}")
        time.sleep(0.2)


def _multiple_slurmd() -> bool:
    """Whether this SLURM build runs several slurmd on one host (``--enable-multiple-slurmd``).

    Such a build expands ``%n`` in per-node paths, takes ``Port=`` per node
    and ``slurmd -N name``, and its ``scontrol show config`` lists
    ``MULTIPLE_SLURMD = Yes``: the key is compiled into libslurmfull only then.
    Debian 12's build is one. Checked before a controller runs, so in the library.
    """
    ldd = subprocess.run(["ldd", shutil.which("slurmd") or "slurmd"], capture_output=True, text=True)
    libs = [line.split("=>")[1].split()[0] for line in ldd.stdout.splitlines() if "libslurmfull" in line and "=>" in line]
    return any(Path(lib).is_file() and b"MULTIPLE_SLURMD" in Path(lib).read_bytes() for lib in libs)


@dataclass
class SlurmCluster:
    """The running cluster: its directory, nodes, and the environment its clients need."""

    root: Path
    nodes: list[str]
    cluster_name: str = "monarchtest"
    env: dict[str, str] = field(default_factory=dict)
    _daemons: list[tuple[str, "subprocess.Popen[bytes]"]] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    def run(self, *command: str, check: bool = True, timeout: float = 30) -> str:
        """A SLURM client command against this cluster; its stdout."""
        result = subprocess.run(
            list(command), env={**os.environ, **self.env}, capture_output=True, text=True, timeout=timeout
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}): {result.stderr.strip()}")
        return result.stdout

    def jobs(self) -> list[dict[str, str]]:
        """Every job slurmctld still knows (pending, running and recently ended): id, name, state."""
        out = self.run("squeue", "--noheader", "--states=all", "--format=%i|%j|%T|%N")
        return [dict(zip(("id", "name", "state", "nodes"), line.split("|"))) for line in out.splitlines() if line]

    def accounting(self, job_id: str) -> list[dict[str, str]]:
        """``sacct``'s rows for a job (the job and its steps)."""
        out = self.run("sacct", "--parsable2", "--noheader", "--format=JobID,JobName,State,ExitCode,NodeList", "-j", job_id)
        return [dict(zip(("id", "name", "state", "exitcode", "nodes"), line.split("|"))) for line in out.splitlines() if line]

    def active_jobs(self) -> list[dict[str, str]]:
        return [j for j in self.jobs() if j["state"] in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED")]

    def idle_nodes(self) -> list[str]:
        out = self.run("sinfo", "--noheader", "--Node", "--format=%N|%t", check=False)
        return [line.split("|")[0] for line in out.splitlines() if line.endswith("|idle")]

    def job_pids(self) -> list[int]:
        """Processes of this cluster's jobs still alive: slurmstepd, and every process with the jobs' environment.

        A job's processes inherit ``SLURM_CLUSTER_NAME``, so this finds those
        that outlived their slurmstepd too (reparented to init).
        """
        marker = f"SLURM_CLUSTER_NAME={self.cluster_name}".encode()
        return [p for p in _pids() if _comm(p).startswith("slurmstepd") or marker in _environ(p).split(b"\0")]

    def describe(self, pids: list[int]) -> list[str]:
        """``pid comm cmdline`` of each process, for a failure message."""
        return [f"{p} {_comm(p)} {_cmdline(p)[:200]}" for p in pids]

    def wait_for_no_job_pids(self, timeout: float) -> None:
        """Waits until no process of this cluster's jobs is alive (their teardown runs after the jobs end);
        fails naming those still alive after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while (left := self.job_pids()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not left, f"still alive {timeout:.0f} s after the jobs ended: {self.describe(left)}"

    def cancel_all(self, timeout: float = 60) -> None:
        if self.active_jobs():
            self.run("scancel", "--full", "--user=root", check=False)
            _wait(lambda: not self.active_jobs() and not self.job_pids(), timeout, "cancelled jobs to end")

    # -- lifecycle -------------------------------------------------------------

    def _spawn(self, name: str, command: list[str], env: Optional[dict[str, str]] = None) -> "subprocess.Popen[bytes]":
        log = open(self.root / f"{name}.out", "ab")  # noqa: SIM115 - the child holds it
        proc = subprocess.Popen(
            command,
            env={**os.environ, **self.env, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self._daemons.append((name, proc))
        return proc

    def _check_alive(self) -> None:
        for name, proc in self._daemons:
            if proc.poll() is not None:
                log = self.root / f"{name}.log"
                out = self.root / f"{name}.out"
                text = "".join(p.read_text(errors="replace")[-2000:] for p in (out, log) if p.exists())
                raise RuntimeError(f"SLURM test cluster: {name} exited with {proc.returncode}\n{text}")

    def start(self) -> None:
        ports = {name: _free_port() for name in ("slurmctld", "slurmdbd", *self.nodes)}
        munge_socket = self.root / "munge" / "munge.socket"
        self.env = {"SLURM_CONF": str(self.conf)}
        self._start_munge(munge_socket)
        self._start_database()
        self._write_config(ports, munge_socket)
        dbd = self._spawn("slurmdbd", ["slurmdbd", "-D"], env={"MYSQL_UNIX_PORT": str(self.root / "mysql.sock")})

        def dbd_ready() -> bool:
            self._check_alive()
            return subprocess.run(["sacctmgr", "-n", "list", "cluster"], env={**os.environ, **self.env},
                                  capture_output=True, timeout=10).returncode == 0

        _wait(dbd_ready, START_TIMEOUT_S, "slurmdbd", self.root / "slurmdbd.log")
        del dbd
        self.run("sacctmgr", "-i", "add", "cluster", self.cluster_name)
        self._spawn("slurmctld", ["slurmctld", "-D", "-i"])
        _wait(lambda: (self._check_alive(), self.run("scontrol", "ping", check=False).find("UP") >= 0)[1],
              START_TIMEOUT_S, "slurmctld", self.root / "slurmctld.log")
        for node in self.nodes:
            self._spawn(f"slurmd-{node}", ["slurmd", "-D", "-N", node])

        def all_idle() -> bool:
            self._check_alive()
            return sorted(self.idle_nodes()) == sorted(self.nodes)

        _wait(all_idle, START_TIMEOUT_S, f"nodes {self.nodes} idle in sinfo", self.root / f"slurmd-{self.nodes[0]}.log")

    def _start_munge(self, munge_socket: Path) -> None:
        munge_socket.parent.mkdir(mode=0o700)
        key = self.root / "munge" / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        self._spawn(
            "munged",
            ["munged", "-F", "--force", f"--socket={munge_socket}", f"--key-file={key}",
             f"--pid-file={self.root / 'munge' / 'munged.pid'}", f"--log-file={self.root / 'munged.log'}",
             f"--seed-file={self.root / 'munge' / 'munged.seed'}", "--num-threads=10"],
        )
        _wait(lambda: (self._check_alive(), munge_socket.exists())[1], START_TIMEOUT_S, "munged", self.root / "munged.log")

    def _start_database(self) -> None:
        data = self.root / "mysql"
        subprocess.run(
            ["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root", "--skip-test-db",
             "--auth-root-authentication-method=socket"],
            check=True, capture_output=True, timeout=120,
        )
        sock = self.root / "mysql.sock"
        self._spawn(
            "mariadbd",
            ["mariadbd", "--no-defaults", f"--datadir={data}", f"--socket={sock}", "--skip-networking", "--user=root",
             f"--pid-file={self.root / 'mariadbd.pid'}", f"--log-error={self.root / 'mariadbd.log'}",
             "--innodb-buffer-pool-size=16M", "--skip-log-bin"],
        )
        _wait(lambda: (self._check_alive(), sock.exists())[1], START_TIMEOUT_S, "mariadbd", self.root / "mariadbd.log")

    def _write_config(self, ports: dict[str, int], munge_socket: Path) -> None:
        host = socket.gethostname().split(".")[0]
        (self.root / "plugstack.conf").write_text("")
        lines = [
            f"ClusterName={self.cluster_name}",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={ports['slurmctld']}",
            "AuthType=auth/munge",
            f"AuthInfo=socket={munge_socket}",
            "CredType=cred/munge",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={self.root / 'state'}",
            f"SlurmdSpoolDir={self.root / 'spool' / '%n'}",
            f"SlurmctldPidFile={self.root / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.root / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={self.root / 'slurmctld.log'}",
            f"SlurmdLogFile={self.root / 'slurmd-%n.log'}",
            f"PlugStackConfig={self.root / 'plugstack.conf'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "MpiDefault=none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU_Memory",
            "SlurmdParameters=config_overrides",
            "SchedulerType=sched/builtin",
            "AccountingStorageType=accounting_storage/slurmdbd",
            "AccountingStorageHost=localhost",
            f"AccountingStoragePort={ports['slurmdbd']}",
            # For slurmdbd connections with auth/munge, the munge socket (AuthInfo covers the others).
            f"AccountingStoragePass={munge_socket}",
            "JobCompType=jobcomp/none",
            "ReturnToService=2",
            # A cancelled job's processes get SIGTERM, then SIGKILL this much later.
            "KillWait=5",
            "MinJobAge=600",
            "InactiveLimit=0",
            "MailProg=/bin/true",
            *(
                f"NodeName={node} NodeHostname={host} NodeAddr=127.0.0.1 Port={ports[node]} "
                f"CPUs={NODE_CPUS} RealMemory={NODE_MEMORY_MB} State=UNKNOWN"
                for node in self.nodes
            ),
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        ]
        (self.root / "state").mkdir()
        for node in self.nodes:
            (self.root / "spool" / node).mkdir(parents=True)
        self.conf.write_text("\n".join(lines) + "\n")
        dbd = self.root / "slurmdbd.conf"
        dbd.write_text(
            "\n".join(
                [
                    "AuthType=auth/munge",
                    f"AuthInfo=socket={munge_socket}",
                    "DbdHost=localhost",
                    "DbdAddr=127.0.0.1",
                    f"DbdPort={ports['slurmdbd']}",
                    "SlurmUser=root",
                    "StorageType=accounting_storage/mysql",
                    "StorageHost=localhost",
                    "StorageUser=root",
                    "StorageLoc=slurm_acct_db",
                    f"LogFile={self.root / 'slurmdbd.log'}",
                    f"PidFile={self.root / 'slurmdbd.pid'}",
                ]
            )
            + "\n"
        )
        dbd.chmod(0o600)

    def stop(self) -> list[int]:
        """Cancels every job and stops every daemon; returns the job processes that had to be killed."""
        leftover: list[int] = []
        try:
            if any(name == "slurmctld" and proc.poll() is None for name, proc in self._daemons):
                self.cancel_all()
        except (RuntimeError, subprocess.TimeoutExpired):
            leftover = self.job_pids()
        # Stop in reverse order of start: slurmd, slurmctld, slurmdbd, mariadbd, munged.
        for name, proc in reversed(self._daemons):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        for pid in leftover:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._daemons.clear()
        return leftover


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _environ(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


def node_names() -> list[str]:
    """The first node is named after this machine, as Monarch's SlurmJob dials its workers by node name."""
    host = socket.gethostname().split(".")[0]
    return [host, "node2", "node3"] if _multiple_slurmd() else [host]


@pytest.fixture(scope="module")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A running cluster for the tests of one module; SLURM_CONF points the clients (and TorchX) at it."""
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    cluster = SlurmCluster(Path(tempfile.mkdtemp(prefix="slurm-test-")), node_names())
    previous = os.environ.get("SLURM_CONF")
    try:
        cluster.start()
        os.environ["SLURM_CONF"] = cluster.env["SLURM_CONF"]
        yield cluster
    finally:
        leftover = cluster.stop()
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous
        shutil.rmtree(cluster.root, ignore_errors=True)
    assert not leftover, f"job processes left behind after the cluster's jobs were cancelled: {leftover}"


if __name__ == "__main__":
    reason = unavailable_reason()
    if reason:
        raise SystemExit(reason)
    up = SlurmCluster(Path(tempfile.mkdtemp(prefix="slurm-test-")), node_names())
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # kill PID stops it cleanly too
    try:
        up.start()
        print(f"export SLURM_CONF={up.conf}\n{up.run('sinfo')}", flush=True)
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        up.stop()
        shutil.rmtree(up.root, ignore_errors=True)
