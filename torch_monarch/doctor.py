"""``python -m torch_monarch.doctor``: what torch_monarch can use on this machine.

Prints the platform the extension was built for, the collectives library
(NCCL/RCCL) and GPU driver it loads with their versions, the GPUs torch sees,
the RDMA devices, and the transports a group would select. Works without a GPU;
``--json`` prints one JSON object instead.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any, Optional, Sequence

from torch_monarch._platform import (
    GpuReport,
    LibfabricReport,
    RdmaDevice,
    gpu_report,
    libfabric_report,
    rdma_devices,
    transports,
)

__all__ = ["collect", "main", "render"]


def _driver_version(report: GpuReport) -> str:
    if report.driver_version < 0:
        return "unknown"
    if report.platform == "cuda":
        major, minor = divmod(report.driver_version, 1000)
        return f"{report.driver_version} (CUDA {major}.{minor // 10})"
    return str(report.driver_version)


def _torch_gpus() -> list[str]:
    import torch

    try:
        if not torch.cuda.is_available():
            return []
        return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception as e:  # noqa: BLE001 - the doctor reports, it never fails
        return [f"error: {e}"]


def collect() -> dict[str, Any]:
    """Everything the doctor knows, as plain data."""
    import torch

    report = gpu_report()
    rdma, ibverbs = rdma_devices()
    libfabric = libfabric_report()
    return {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "torch_hip": getattr(torch.version, "hip", None),
        "gpu": dataclasses.asdict(report),
        "torch_gpus": _torch_gpus(),
        "rdma_devices": [dataclasses.asdict(device) for device in rdma],
        "ibverbs": ibverbs,
        "libfabric": dataclasses.asdict(libfabric),
        "transports": transports(report, rdma, libfabric),
    }


def render(facts: dict[str, Any]) -> str:
    """The human-readable report."""
    gpu = GpuReport(**facts["gpu"])
    rows: list[tuple[str, str]] = []
    if facts["torch_cuda"]:
        flavour = f"CUDA {facts['torch_cuda']}"
    else:
        flavour = f"ROCm {facts['torch_hip']}" if facts["torch_hip"] else "CPU"
    rows.append(("torch", f"{facts['torch']} ({flavour})"))
    if gpu.extension_error:
        rows.append(("extension", f"did not load: {gpu.extension_error}"))
    else:
        rows.append(("built for", gpu.platform))
        rows.append(("extension", gpu.extension_path))
    if gpu.collectives_found:
        rows.append(("collectives", f"{gpu.collectives} {gpu.collectives_version} from {gpu.collectives_library}"))
        rows.append(("shrink", "ncclCommShrink" if gpu.collectives_shrink == "ncclCommShrink" else "by rebuilding"))
    else:
        name = gpu.collectives if gpu.collectives != "-" else "NCCL/RCCL"
        rows.append(("collectives", f"{name} not found ({gpu.collectives_error})"))
    if gpu.driver_library != "not found":
        devices = f"{gpu.driver_devices} device(s)" if gpu.driver_devices >= 0 else f"no devices ({gpu.driver_error})"
        rows.append(("driver", f"{gpu.driver_library}, version {_driver_version(gpu)}, {devices}"))
        rows.append(("dma-buf export", "available" if gpu.dmabuf_export else "not in this driver"))
    else:
        rows.append(("driver", f"not found ({gpu.driver_error})"))
    gpus = facts["torch_gpus"]
    rows.append(("GPUs (torch)", ", ".join(f"{i}: {name}" for i, name in enumerate(gpus)) if gpus else "none"))
    rdma = [RdmaDevice(**device) for device in facts["rdma_devices"]]
    if rdma:
        for device in rdma:
            ports = "; ".join(f"port {port} {state}" for port, state in device.ports.items()) or "no ports listed"
            rows.append(("RDMA device", f"{device.name} ({device.source}): {ports}"))
    else:
        rows.append(("RDMA devices", "none (/sys/class/infiniband is empty or absent)"))
    rows.append(("libibverbs", facts["ibverbs"]))
    libfabric = LibfabricReport(**facts["libfabric"])
    if libfabric.library:
        rows.append(("libfabric", f"{libfabric.version} ({libfabric.library})"))
        names = sorted({name for name, _, _, rma in libfabric.providers if rma})
        for name in names:
            rows.append(("libfabric provider", f"{name}: {', '.join(libfabric.domains(name))}"))
        if not names:
            rows.append(("libfabric providers", libfabric.error or "none with RMA"))
    else:
        rows.append(("libfabric", f"not loaded: {libfabric.error}"))
    for name, use in facts["transports"]:
        rows.append((f"transport {name}", use))
    width = max(len(key) for key, _ in rows)
    return "\n".join(["torch_monarch doctor"] + [f"  {key.ljust(width)}  {value}" for key, value in rows])


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_monarch.doctor", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    facts = collect()
    print(json.dumps(facts) if args.json else render(facts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
