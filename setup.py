"""Build for torch_monarch: the C++ c10d backend as torch_monarch._C."""

from pathlib import Path

from setuptools import find_packages, setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = Path(__file__).parent
CSRC = ROOT / "csrc"


def host_sources() -> list[str]:
    """Every translation unit of the host (CPU) backend."""
    return sorted(str(p.relative_to(ROOT)) for p in CSRC.rglob("*.cc"))


setup(
    name="torch_monarch",
    version="0.1.0",
    description="Fault-tolerant collective backend and supervision layer for PyTorch",
    long_description=(ROOT / "README.md").read_text(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["torch_monarch", "torch_monarch.*"]),
    install_requires=["torch>=2.6"],
    extras_require={
        "test": ["pytest", "pytest-timeout", "expecttest", "hypothesis", "numpy"],
    },
    ext_modules=[
        CppExtension(
            name="torch_monarch._C",
            sources=host_sources(),
            include_dirs=[str(CSRC)],
            extra_compile_args={"cxx": ["-O3", "-fvisibility=hidden"]},
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
    entry_points={
        # `import torch` loads this, so the backend is registered without
        # importing torch_monarch explicitly.
        "torch.backends": ["monarch = torch_monarch._autoload:register"],
    },
)
