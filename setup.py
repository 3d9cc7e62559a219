"""Build for torch_monarch: the C++ c10d backend as torch_monarch._C.

The GPU platform comes from GPU_PLATFORM or MONARCH_GPU_PLATFORM (cuda, rocm or
cpu), else from the installed torch and toolchains:

  cuda  torch.version.cuda, a CUDA toolkit (CUDA_HOME) and nccl.h (NCCL_INCLUDE_DIR,
        or pip's nvidia-nccl-cu13). csrc/gpu/ is compiled against the CUDA runtime
        and NCCL headers; NCCL and the driver are dlopened at run time, never
        linked, so the same build imports and runs CPU collectives without a GPU.
  rocm  torch.version.hip and ROCM_HOME. csrc/ is hipified into build/hipified/
        (torch's hipify tables plus hipify_rules/rules.json), compiled with
        -D__HIP_PLATFORM_AMD__ -DUSE_ROCM and linked dynamically against amdhip64.
  cpu   anything else: the host backend only; GPU tensors raise NotImplementedError
        that says the build has no GPU support.

``python setup.py hipify`` only writes the hipified tree.
"""

from __future__ import annotations

import functools
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Optional

from setuptools import Command, find_packages, setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = Path(__file__).parent.resolve()
CSRC = ROOT / "csrc"
HIPIFIED = ROOT / "build" / "hipified" / "csrc"
PLATFORMS = ("cuda", "rocm", "cpu")
# The CPU build's stand-in for the GPU layer.
CPU_ONLY = {"gpu/cpu_stub.cc"}
# torch_monarch._frame_probe, a test-only extension (the frame decoder fuzz
# tests), and the transport sources it drives; never part of _C.
FRAME_PROBE = "python/frame_probe_module.cc"
FRAME_PROBE_DEPENDS = [
    "common/dtype.cc",
    "common/logging.cc",
    "common/status.cc",
    "transport/channel.cc",
    "transport/channel_registry.cc",
    "transport/connection.cc",
    "transport/event_loop.cc",
    "transport/host_identity.cc",
    "transport/remote_read/cross_memory.cc",
    "transport/remote_read/remote_read_path.cc",
    "transport/socket.cc",
    "transport/transfer.cc",
    "transport/wire.cc",
]
CXX_FLAGS = ["-O3", "-fvisibility=hidden"]


def _note(message: str) -> None:
    print(f"torch_monarch build: {message}", file=sys.stderr)


# These files of the rdma transport compile against libfabric's headers (the
# library itself is dlopen'd at run time); without them their stand-in says so
# at run time. The rest of transport/rdma/ (the payload path) always builds.
RDMA_SOURCES = ["transport/rdma/libfabric.cc", "transport/rdma/rdma_endpoint.cc", "transport/rdma/registration_cache.cc"]
RDMA_UNAVAILABLE = "transport/rdma/unavailable.cc"


def _has_libfabric_headers() -> bool:
    dirs = [*os.environ.get("CPATH", "").split(":"), "/usr/include", "/usr/local/include"]
    return any(d and (Path(d) / "rdma" / "fabric.h").is_file() for d in dirs)


@functools.lru_cache(maxsize=None)
def rdma_sources() -> tuple[str, ...]:
    """The rdma transport's translation units for this machine's headers."""
    if _has_libfabric_headers():
        return tuple(RDMA_SOURCES)
    _note("no rdma/fabric.h: building without the rdma transport (apt-get install libfabric-dev for it)")
    return (RDMA_UNAVAILABLE,)


def _all_sources() -> list[str]:
    """Every translation unit of _C under csrc/, relative to it."""
    sources = (p.relative_to(CSRC).as_posix() for p in CSRC.rglob("*.cc"))
    rdma = set(rdma_sources())
    return sorted(
        s for s in sources if s != FRAME_PROBE and (s not in (*RDMA_SOURCES, RDMA_UNAVAILABLE) or s in rdma)
    )


def host_sources() -> list[str]:
    """The CPU build: everything but csrc/gpu/, whose CPU stub stands in for it."""
    return [s for s in _all_sources() if not s.startswith("gpu/") or s in CPU_ONLY]


def gpu_sources() -> list[str]:
    """The CUDA and ROCm builds: everything but the CPU stub."""
    return [s for s in _all_sources() if s not in CPU_ONLY]


def require_shared_libstdcxx() -> None:
    """Stops a build whose compiler would link libstdc++ statically.

    torch uses the shared libstdc++; an extension with its own static copy
    crashes in its first iostream use once torch is loaded (seen with a
    toolchain that ships only libstdc++.a). Checked before compiling anything.
    """
    compiler = shlex.split(os.environ.get("CXX", "c++"))
    try:
        found = subprocess.run(
            [*compiler, "-print-file-name=libstdc++.so"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return  # BuildExtension reports a missing or broken compiler itself
    if not os.path.isabs(found):
        raise SystemExit(
            f"{' '.join(compiler)} has no shared libstdc++ (it would link libstdc++.a into the extension, "
            "which crashes next to torch's shared one); set CXX to a compiler that has it, e.g. CXX=/usr/bin/g++"
        )


def requested_platform() -> Optional[str]:
    for name in ("MONARCH_GPU_PLATFORM", "GPU_PLATFORM"):
        value = os.environ.get(name, "").strip().lower()
        if value:
            if value not in PLATFORMS:
                raise SystemExit(f"{name}={value!r}: expected one of {', '.join(PLATFORMS)}")
            return value
    return None


def cuda_home() -> Optional[Path]:
    """The CUDA toolkit with the runtime headers: CUDA_HOME, CUDA_PATH, torch's guess, /usr/local/cuda."""
    from torch.utils import cpp_extension

    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), cpp_extension.CUDA_HOME, "/usr/local/cuda"]
    for candidate in candidates:
        if candidate and (Path(candidate) / "include" / "cuda_runtime_api.h").exists():
            return Path(candidate)
    return None


def nccl_include_dir() -> Optional[Path]:
    """Where nccl.h is: NCCL_INCLUDE_DIR, pip's nvidia-nccl wheel, the CUDA toolkit, /usr/include."""
    import importlib.util

    candidates: list[Optional[Path]] = [Path(p) for p in [os.environ.get("NCCL_INCLUDE_DIR", "")] if p]
    try:
        spec = importlib.util.find_spec("nvidia.nccl")
    except ModuleNotFoundError:
        spec = None
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(p) / "include" for p in spec.submodule_search_locations]
    home = cuda_home()
    candidates += [home / "include" if home else None, Path("/usr/include"), Path("/usr/local/include")]
    for candidate in candidates:
        if candidate is not None and (candidate / "nccl.h").exists():
            return candidate
    return None


def rocm_home() -> Optional[Path]:
    from torch.utils import cpp_extension

    home = os.environ.get("ROCM_HOME") or os.environ.get("ROCM_PATH") or cpp_extension.ROCM_HOME
    return Path(home) if home and Path(home).exists() else None


def detect_platform() -> tuple[str, str]:
    """(platform, why) for the installed torch and toolchains."""
    import torch

    if getattr(torch.version, "hip", None):
        if rocm_home() is None:
            return "cpu", f"torch {torch.__version__} is a ROCm build, but ROCM_HOME was not found"
        return "rocm", f"torch {torch.__version__} is a ROCm build"
    if torch.version.cuda:
        if cuda_home() is None:
            return "cpu", f"torch {torch.__version__} is a CUDA build, but no CUDA toolkit was found (set CUDA_HOME)"
        if nccl_include_dir() is None:
            return "cpu", (
                f"torch {torch.__version__} is a CUDA build, but nccl.h was not found "
                "(pip install nvidia-nccl-cu13, or set NCCL_INCLUDE_DIR)"
            )
        return "cuda", f"torch {torch.__version__} is a CUDA {torch.version.cuda} build"
    return "cpu", f"torch {torch.__version__} has no GPU support"


def hipify() -> dict[str, str]:
    """Writes build/hipified/csrc; returns {csrc path: hipified path}."""
    sys.path.insert(0, str(ROOT / "hipify_rules"))
    from hipify import hipify_tree  # hipify_rules/hipify.py

    return hipify_tree(CSRC, HIPIFIED)


def extension(platform: str) -> CppExtension:
    name = "torch_monarch._C"
    if platform == "cpu":
        return CppExtension(
            name=name,
            sources=[str((CSRC / s).relative_to(ROOT)) for s in host_sources()],
            include_dirs=[str(CSRC)],
            extra_compile_args={"cxx": CXX_FLAGS},
        )
    if platform == "cuda":
        home, nccl = cuda_home(), nccl_include_dir()
        if home is None or nccl is None:
            raise SystemExit(
                f"GPU_PLATFORM=cuda needs the CUDA toolkit (found: {home}) and nccl.h (found: {nccl}); "
                "set CUDA_HOME / NCCL_INCLUDE_DIR or pip install nvidia-nccl-cu13"
            )
        _note(f"CUDA headers from {home}, nccl.h from {nccl}")
        return CppExtension(
            name=name,
            sources=[str((CSRC / s).relative_to(ROOT)) for s in gpu_sources()],
            include_dirs=[str(CSRC), str(home / "include"), str(nccl)],
            library_dirs=[str(home / "lib64"), str(home / "lib")],
            # torch's CUDA libraries and the runtime torch itself uses; NCCL and
            # libcuda are dlopened (csrc/gpu/nccl_library.cc, driver_api.cc).
            libraries=["c10_cuda", "torch_cuda", "cudart"],
            extra_compile_args={"cxx": CXX_FLAGS},
        )
    home = rocm_home()
    if home is None:
        raise SystemExit("GPU_PLATFORM=rocm needs ROCm (set ROCM_HOME)")
    mapping = hipify()
    _note(f"hipified csrc/ into {HIPIFIED.relative_to(ROOT)}; ROCm from {home}")
    return CppExtension(
        name=name,
        sources=[str((HIPIFIED / mapping[s]).relative_to(ROOT)) for s in gpu_sources()],
        include_dirs=[str(HIPIFIED), str(home / "include")],
        library_dirs=[str(home / "lib")],
        # ROCm ships no static HIP runtime: amdhip64 is linked dynamically.
        libraries=["c10_hip", "torch_hip", "amdhip64"],
        extra_compile_args={"cxx": CXX_FLAGS + ["-D__HIP_PLATFORM_AMD__", "-DUSE_ROCM"]},
    )


def frame_probe_extension() -> CppExtension:
    """torch_monarch._frame_probe (test-only); host code, the same on every platform."""
    return CppExtension(
        name="torch_monarch._frame_probe",
        # Absolute paths put its objects apart from _C's, which are compiled with
        # other flags from the same sources.
        sources=[str(CSRC / s) for s in [FRAME_PROBE, *FRAME_PROBE_DEPENDS, *rdma_sources()]],
        include_dirs=[str(CSRC)],
        extra_compile_args={"cxx": CXX_FLAGS},
    )


class Hipify(Command):
    """``python setup.py hipify``: writes the ROCm source tree and lists the renamed files."""

    description = "write csrc/ hipified (torch's tables + hipify_rules/rules.json) to build/hipified/csrc"
    user_options: list = []

    def initialize_options(self) -> None:
        pass

    def finalize_options(self) -> None:
        pass

    def run(self) -> None:
        renamed = {src: dst for src, dst in hipify().items() if src != dst}
        for src, dst in renamed.items():
            print(f"  {src} -> {dst}")
        print(f"hipified tree: {HIPIFIED} ({len(renamed)} files renamed)")


# The two TorchFT generations CI tests (the "ft" and "ft-nightly" extras).
TORCHFT = "torchft==0.2.0"
TORCHFT_NIGHTLY = "torchft-nightly==2026.10.26"
# What the tests need besides TorchFT.
TEST_DEPS = [
    "pytest",
    "pytest-timeout",
    "expecttest",
    "hypothesis",
    "numpy",
    # nccl.h for the compile-only check of the CUDA sources (test/test_gpu_compile.py).
    "nvidia-nccl-cu13; platform_system == 'Linux'",
    # TorchFT's own tests (test/test_torchft_suites.py) use it.
    "parameterized",
    # TorchX job specs (dry run). torchx 0.7 is the first release whose specs
    # import on Python 3.11; an unpinned resolve can fall back to 0.3, which does not.
    "torchx==0.7.0",
    # the type check of .ci/run (mypy.ini)
    "mypy==2.4.1",
    "kubernetes",
    "matplotlib",
    # the Monarch orchestrator's tests run real Monarch (CPU wheel).
    "torchmonarch==0.7.0",
    # The TorchTitan hook's wiring (test/test_torchtitan_hook.py).
    "torchtitan==0.3.0",
]

require_shared_libstdcxx()
PLATFORM = requested_platform()
if PLATFORM is not None:
    _note(f"GPU platform {PLATFORM} (requested)")
else:
    PLATFORM, _why = detect_platform()
    _note(f"GPU platform {PLATFORM}: {_why} (set GPU_PLATFORM to choose)")

setup(
    name="torch_monarch",
    version="0.1.0",
    description="Fault-tolerant collective backend and supervision layer for PyTorch",
    long_description=(ROOT / "README.md").read_text(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["torch_monarch", "torch_monarch.*"]),
    # The types of the C++ extensions (_C.pyi, _frame_probe.pyi).
    package_data={"torch_monarch": ["*.pyi"]},
    install_requires=["torch>=2.6"],
    extras_require={
        # CI's first stack (torch 2.13.0): the whole suite.
        "test": [*TEST_DEPS, TORCHFT],
        # CI's second stack (torch 2.14.1): the tests marked newest_stack (.ci/run).
        "test-nightly": [*TEST_DEPS, TORCHFT_NIGHTLY],
        # Fault tolerance across replicas (quorum, monarch-run --replicas,
        # torch_monarch.torchft, and what the extras below run) needs one of the
        # two TorchFT generations that CI tests, never both (they install the same
        # package): "ft" is TorchFT 0.2 (configure()), with torch 2.13 on CI's
        # first stack; "ft-nightly" is TorchFT 0.3's reconfigure API, with torch
        # 2.14.1 on CI's second stack. The extras below add no TorchFT of their
        # own, e.g. pip install 'torch_monarch[ft,demo]'.
        "ft": [TORCHFT],
        "ft-nightly": [TORCHFT_NIGHTLY],
        # python -m torch_monarch.demo (timeline.png needs matplotlib).
        "demo": ["matplotlib"],
        # --orchestrator monarch: real Monarch actors supervise the job (torch_monarch.monarch).
        "monarch": ["torchmonarch==0.7.0"],
        # torch_monarch.integrations.torchtitan: TorchTitan's fault tolerance over ProcessGroupMonarch.
        "torchtitan": ["torchtitan>=0.2.2"],
        # SLURM / Kubernetes replicas through TorchX (Kubernetes also needs its client).
        "cluster": ["torchx==0.7.0", "kubernetes"],
    },
    ext_modules=[extension(PLATFORM), frame_probe_extension()],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True), "hipify": Hipify},
    entry_points={
        # `import torch` loads this, so the backend is registered without
        # importing torch_monarch explicitly.
        "torch.backends": ["monarch = torch_monarch._autoload:register"],
        "console_scripts": ["monarch-run = torch_monarch.launch.main:console_main"],
    },
)
