"""Forking GPU workers from a preloaded server, checked on a machine without a GPU.

1. A preload module that initialises CUDA is refused, naming the module, by
   both servers (torch elastic's forkserver under ``monarch-run``, and the
   Monarch replica's ``ProcForkserver``), and no worker starts.

   The check asks the CUDA driver itself whether ``cuInit`` was called (see
   ``supervision/cuda_clean.py``). This machine has no driver, so the tests
   build one that keeps the driver API's contract for the two calls involved:
   a ``libcuda.so.1`` whose ``cuDeviceGetCount`` answers
   ``CUDA_ERROR_NOT_INITIALIZED`` until ``cuInit`` has been called. The
   preload modules load it as any library would load the real driver; a
   module that only loads it is accepted, one that calls ``cuInit`` is
   refused. test/gpu/test_cuda_forkserver.py checks the same with the real
   driver and torch.
2. ``--device cuda`` on this CPU-only installation stops before training,
   with one error naming what is missing.
3. ``monarch-run`` forks workers from the server by default on a GPU host,
   not otherwise, and never against an explicit ``--start-method``.
4. Both servers are told the workers' script arguments
   (``supervision.preload.worker_args``), so a preload can do the workers'
   start-up once (TorchTitan's tokenizer and dataset: test_torchtitan_startup).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from commands import repo_env, run_bounded
from torch_monarch.demo.device import DeviceUnavailableError, require_device
from torch_monarch.launch import replica_main
from torch_monarch.launch.args import parse_args
from torch_monarch.job.config import JobConfig, TrainerSpec
from torch_monarch.supervision.preload import WORKER_ARGS_ENV, PreloadError, worker_args

pytestmark = pytest.mark.timeout(180)

_DRIVER = r"""
/* The CUDA driver's contract for these two calls: every call but cuInit fails with
   CUDA_ERROR_NOT_INITIALIZED (3) until cuInit has been called. */
static int initialised;
int cuInit(unsigned int flags) { (void)flags; initialised = 1; return 0; }
int cuDeviceGetCount(int* count) { if (!initialised) return 3; *count = 1; return 0; }
"""


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the stand-in CUDA driver")
    root = tmp_path_factory.mktemp("driver")
    (root / "driver.c").write_text(_DRIVER)
    library = root / "libcuda.so.1"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(library), str(root / "driver.c")], check=True
    )
    return library


@pytest.fixture
def modules(tmp_path: Path, driver: Path) -> Path:
    """Preload modules: one that initialises the driver, one that only loads it."""
    root = tmp_path / "modules"
    root.mkdir()
    (root / "initialises_cuda.py").write_text(f"import ctypes\nctypes.CDLL({str(driver)!r}).cuInit(0)\n")
    (root / "loads_driver.py").write_text(f"import ctypes\nctypes.CDLL({str(driver)!r})\n")
    (root / "after_refused.py").write_text("")
    return root


def _env(modules: Path) -> dict[str, str]:
    env = repo_env()
    env["PYTHONPATH"] = f"{modules}:{env['PYTHONPATH']}"
    return env


def test_the_check_refuses_the_module_that_initialised_the_driver(modules: Path) -> None:
    code = textwrap.dedent(
        """
        from torch_monarch.supervision.cuda_clean import CudaPreloadError, cuda_initialized, import_cuda_clean
        import_cuda_clean(["json", "loads_driver"])  # loaded, never initialised: accepted
        assert cuda_initialized() == "", cuda_initialized()
        try:
            import_cuda_clean(["initialises_cuda", "after_refused"])
        except CudaPreloadError as e:
            print("REFUSED", e)
        import sys
        print("IMPORTED AFTER", "after_refused" in sys.modules)
        """
    )
    result = run_bounded([sys.executable, "-c", code], 60, _env(modules))
    assert result.returncode == 0, result.stdout
    assert "REFUSED preload module 'initialises_cuda' initialised CUDA" in result.stdout
    assert "the CUDA driver was initialised (cuInit; 1 devices)" in result.stdout
    assert "IMPORTED AFTER False" in result.stdout  # nothing after the refused module


@pytest.mark.parametrize("orchestrator", ["embedded", "monarch"])
def test_monarch_run_refuses_the_preload_and_starts_no_worker(modules: Path, tmp_path: Path, orchestrator: str) -> None:
    if orchestrator == "monarch":
        pytest.importorskip("monarch.actor")
    ran = tmp_path / "worker_ran"
    script = tmp_path / "train.py"
    script.write_text(f"open({str(ran)!r}, 'w').close()\n")
    command = [sys.executable, "-m", "torch_monarch.run", "--replicas", "2", "--nproc-per-node", "1",
               "--max-restarts", "1", "--replace-replicas", "0", "--status", "none", "--run-dir", str(tmp_path / "run"),
               "--orchestrator", orchestrator, "--preload", "loads_driver,initialises_cuda", str(script)]  # fmt: skip
    # Well inside the bound: a refused replica ends the job at once (it held it until timeout under Monarch once).
    result = run_bounded(command, 150, _env(modules))
    assert result.returncode != 0, result.stdout
    assert "preload module 'initialises_cuda' initialised CUDA" in result.stdout, result.stdout[-3000:]
    assert "PreloadError" in result.stdout
    assert not ran.exists()


def test_a_preload_whose_import_hangs_is_refused_within_the_bound(tmp_path: Path) -> None:
    (tmp_path / "hangs_on_import.py").write_text("import threading\nthreading.Event().wait()\n")
    code = textwrap.dedent(
        """
        import os, signal, time
        from torch_monarch.supervision.preload import PreloadError, _server_pid, start_forkserver
        started = time.monotonic()
        try:
            start_forkserver(["json", "hangs_on_import"], timeout=3)
        except PreloadError as e:
            print("REFUSED", e, "after %.1f s" % (time.monotonic() - started))
        pid = _server_pid()
        status = os.waitpid(pid, 0)[1]  # the server is this process's child
        print("SERVER", "killed" if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL else status)
        """
    )
    env = repo_env()
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    result = run_bounded([sys.executable, "-c", code], 60, env)
    assert result.returncode == 0, result.stdout
    assert "REFUSED the workers' forkserver did not finish importing its preload within 3 s" in result.stdout, result.stdout
    assert "SERVER killed" in result.stdout


def test_the_monarch_replicas_forkserver_refuses_the_preload(modules: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torch_monarch.monarch.forkserver import ProcForkserver

    monkeypatch.setenv("PYTHONPATH", _env(modules)["PYTHONPATH"])
    server = ProcForkserver(["loads_driver", "initialises_cuda"])
    try:
        with pytest.raises(PreloadError, match="preload module 'initialises_cuda' initialised CUDA"):
            asyncio.run(server.start())
    finally:
        server.stop()
    assert server.pid is None


def test_the_monarch_replicas_forkserver_preloads_in_the_jobs_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Preload modules read the job's settings (the demo's warm-up its device) as the workers will."""
    from torch_monarch.monarch.forkserver import ProcForkserver

    (tmp_path / "reads_env.py").write_text(
        "import os\nopen(os.environ['SEEN_PATH'], 'w').write(os.environ.get('MONARCH_DEMO_DEVICE', 'unset'))\n"
    )
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{repo_env()['PYTHONPATH']}")
    monkeypatch.delenv("MONARCH_DEMO_DEVICE", raising=False)
    seen = tmp_path / "seen"
    server = ProcForkserver(["reads_env"], env={"MONARCH_DEMO_DEVICE": "cuda", "SEEN_PATH": str(seen)})
    try:
        asyncio.run(server.start())
    finally:
        server.stop()
    assert seen.read_text() == "cuda"


def test_demo_with_device_cuda_stops_before_training(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    command = [sys.executable, "-m", "torch_monarch.demo", "--device", "cuda", "--duration", "30", "--out", str(out),
               "--status", "none"]  # fmt: skip
    result = run_bounded(command, 90, repo_env())
    assert result.returncode == 2, result.stdout[-3000:]
    errors = [line for line in result.stdout.splitlines() if line.startswith("torch_monarch demo: --device cuda:")]
    assert len(errors) == 1, result.stdout[-3000:]
    if torch.version.cuda is None and torch.version.hip is None:
        assert f"this torch ({torch.__version__}) was built without GPU support" in errors[0]
    else:  # a CUDA build of torch on this GPU-less machine: the extension's build, or the device
        assert "torch_monarch's extension was built for" in errors[0] or "torch sees no GPU" in errors[0]
    assert not (out / "with_failures" / "replicas").exists()  # no replica was started
    assert "Traceback" not in result.stdout


def test_device_check_names_the_extensions_build_and_the_missing_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch_monarch import _platform

    require_device("cpu")
    monkeypatch.setattr(torch.version, "cuda", "12.8")  # a CUDA build of torch ...
    real = _platform.gpu_report()
    if real.platform == "cpu":  # ... with this CPU build of the extension: the 454 s case of issue 26
        with pytest.raises(DeviceUnavailableError, match="torch_monarch's extension was built for 'cpu'"):
            require_device("cuda")
    monkeypatch.setattr(_platform, "gpu_report", lambda: type(real)(**{**vars(real), "platform": "cuda"}))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(DeviceUnavailableError, match="torch sees no GPU on this host \\(CUDA_VISIBLE_DEVICES=''\\)"):
        require_device("cuda")


@pytest.mark.parametrize(
    ("flags", "gpu", "forks"),
    [
        ([], True, True),
        ([], False, False),
        (["--start-method", "spawn"], True, False),
        (["--preload", "json"], False, True),
        (["--no-python"], True, False),
    ],
)
def test_workers_fork_from_the_server_by_default_on_gpu_hosts(
    flags: list[str], gpu: bool, forks: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PET_START_METHOD", raising=False)
    monkeypatch.setattr(replica_main, "_gpus_visible", lambda: gpu)
    assert replica_main._forks_workers(parse_args([*flags, "train.py"])) is forks


def test_the_forkserver_is_told_the_workers_arguments(tmp_path: Path) -> None:
    """``monarch-run --preload``: the server's preload reads the arguments the workers then get."""
    seen, ran = tmp_path / "seen", tmp_path / "ran"
    (tmp_path / "reads_args.py").write_text(
        "import json, sys\n"
        "from torch_monarch.supervision.preload import worker_args\n"
        f"open({str(seen)!r}, 'a').write(json.dumps(worker_args()) + '\\n')\n"
        "print('reads_args: told', worker_args(), file=sys.stderr, flush=True)\n"
    )
    script = tmp_path / "train.py"
    script.write_text(f"import json, sys\nopen({str(ran)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
    command = [sys.executable, "-m", "torch_monarch.run", "--replicas", "2", "--nproc-per-node", "1", "--status", "none",
               "--run-dir", str(tmp_path / "run"), "--preload", "reads_args", str(script), "--lr", "0.1", "a b"]  # fmt: skip
    env = repo_env()
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    result = run_bounded(command, 150, env)
    assert result.returncode == 0, result.stdout[-3000:]
    assert seen.read_text().splitlines() == ['["--lr", "0.1", "a b"]'] * 2  # one server per replica, told once
    assert ran.read_text().splitlines() == ['["--lr", "0.1", "a b"]'] * 2
    # What a preload prints goes where its replica agent's output goes.
    for replica in "01":
        agent_log = (tmp_path / "run" / "replicas" / replica / "agent.log").read_text()
        assert "reads_args: told ['--lr', '0.1', 'a b']" in agent_log


def test_the_monarch_replicas_forkserver_gets_the_workers_arguments_with_the_jobs_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    job = JobConfig(replicas=1, min_replicas=1, trainer=TrainerSpec(script="train.py", args=("--steps", "5")), run_dir="run")
    monkeypatch.setenv(WORKER_ARGS_ENV, job.worker_env()[WORKER_ARGS_ENV])
    assert worker_args() == ["--steps", "5"]


def test_a_malformed_worker_arguments_variable_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    for malformed in ('{"steps": 5}', "[5]", "--steps 5"):
        monkeypatch.setenv(WORKER_ARGS_ENV, malformed)
        with pytest.raises(ValueError, match="MONARCH_WORKER_ARGS is not a JSON list of strings"):
            worker_args()
    monkeypatch.delenv(WORKER_ARGS_ENV)
    assert worker_args() is None
