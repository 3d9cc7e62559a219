"""What this machine and this build of torch_monarch offer: the GPU platform the
extension was built for, the collectives library (NCCL/RCCL) and driver it
loads, RDMA devices, and the transports a group would use. Read by
``python -m torch_monarch.doctor``; nothing here needs a GPU.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from torch_monarch.options import Options

__all__ = [
    "GpuReport",
    "LibfabricReport",
    "RdmaDevice",
    "gpu_report",
    "gpu_routes",
    "libfabric_report",
    "rdma_devices",
    "transports",
]

# Providers "auto" takes between hosts, in order: RDMA hardware only.
RDMA_HARDWARE_PROVIDERS = ("verbs;ofi_rxm", "efa")

SYS_INFINIBAND = Path("/sys/class/infiniband")


@dataclass
class GpuReport:
    """The GPU layer as the built extension sees it (see csrc/gpu/device_backend.cc)."""

    platform: str
    collectives: str
    collectives_library: str
    collectives_version: str
    collectives_shrink: str
    collectives_error: str
    driver_library: str
    driver_version: int
    driver_devices: int
    driver_error: str
    dmabuf_export: bool
    extension_path: str = ""
    extension_error: str = ""

    @property
    def collectives_found(self) -> bool:
        return self.collectives_library not in ("", "not found")


def gpu_report() -> GpuReport:
    """Asks the extension; when it cannot be imported, says why."""
    try:
        from torch_monarch import _C
    except ImportError as e:
        return GpuReport(
            platform="unknown",
            collectives="-",
            collectives_library="not found",
            collectives_version="-",
            collectives_shrink="-",
            collectives_error="the extension did not load",
            driver_library="not found",
            driver_version=-1,
            driver_devices=-1,
            driver_error="the extension did not load",
            dmabuf_export=False,
            extension_error=str(e),
        )
    facts = dict(_C.gpu_report())
    return GpuReport(
        platform=facts["platform"],
        collectives=facts["collectives"],
        collectives_library=facts["collectives_library"],
        collectives_version=facts["collectives_version"],
        collectives_shrink=facts["collectives_shrink"],
        collectives_error=facts["collectives_error"],
        driver_library=facts["driver_library"],
        driver_version=int(facts["driver_version"]),
        driver_devices=int(facts["driver_devices"]),
        driver_error=facts["driver_error"],
        dmabuf_export=facts["dmabuf_export"] == "yes",
        extension_path=str(getattr(_C, "__file__", "")),
    )


@dataclass
class RdmaDevice:
    """An RDMA device (InfiniBand or RoCE NIC) and its ports."""

    name: str
    node_guid: str = ""
    # port number -> "ACTIVE InfiniBand 200 Gb/sec (4X HDR)"
    ports: dict[str, str] = field(default_factory=dict)
    source: str = "sysfs"


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _sysfs_devices(root: Path) -> list[RdmaDevice]:
    devices: list[RdmaDevice] = []
    if not root.is_dir():
        return devices
    for entry in sorted(root.iterdir()):
        device = RdmaDevice(name=entry.name, node_guid=_read(entry / "node_guid"))
        ports = entry / "ports"
        if ports.is_dir():
            for port in sorted(ports.iterdir(), key=lambda p: p.name):
                state = _read(port / "state").split(":")[-1].strip()
                described = " ".join(
                    part for part in (state, _read(port / "link_layer"), _read(port / "rate")) if part
                )
                device.ports[port.name] = described
        devices.append(device)
    return devices


def _ibverbs_devices() -> tuple[Optional[list[str]], str]:
    """Device names from libibverbs (None when it cannot be loaded) and the library's status."""
    try:
        lib = ctypes.CDLL("libibverbs.so.1")
    except OSError:
        return None, "libibverbs.so.1 not found"
    lib.ibv_get_device_list.restype = ctypes.POINTER(ctypes.c_void_p)
    lib.ibv_get_device_list.argtypes = [ctypes.POINTER(ctypes.c_int)]
    lib.ibv_get_device_name.restype = ctypes.c_char_p
    lib.ibv_get_device_name.argtypes = [ctypes.c_void_p]
    lib.ibv_free_device_list.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    count = ctypes.c_int(0)
    devices = lib.ibv_get_device_list(ctypes.byref(count))
    if not devices:
        return [], "libibverbs.so.1 loaded; ibv_get_device_list failed"
    try:
        names = [lib.ibv_get_device_name(devices[i]).decode() for i in range(count.value)]
    finally:
        lib.ibv_free_device_list(devices)
    return names, "libibverbs.so.1 loaded"


def rdma_devices(root: Path = SYS_INFINIBAND) -> tuple[list[RdmaDevice], str]:
    """RDMA devices from sysfs, plus any only libibverbs knows; and libibverbs' status."""
    devices = _sysfs_devices(root)
    names, status = _ibverbs_devices()
    known = {device.name for device in devices}
    for name in names or []:
        if name not in known:
            devices.append(RdmaDevice(name=name, source="libibverbs"))
    return devices, status


@dataclass
class LibfabricReport:
    """libfabric as the rdma transport loads it (csrc/transport/rdma/libfabric.cc)."""

    library: str = ""
    version: str = ""
    error: str = ""
    # (provider, fabric, domain, rma) for every reliable-datagram endpoint offered
    providers: list[tuple[str, str, str, bool]] = field(default_factory=list)

    def domains(self, provider: str) -> list[str]:
        """The domains (devices, for verbs and efa) ``provider`` offers with RMA."""
        return sorted({domain for name, _, domain, rma in self.providers if name == provider and rma})


def libfabric_report() -> LibfabricReport:
    """Asks the extension; when it cannot be imported, says why."""
    try:
        from torch_monarch import _C
    except ImportError as e:
        return LibfabricReport(error=f"the extension did not load: {e}")
    facts = _C.rdma_report()
    return LibfabricReport(
        library=facts["library"],
        version=facts["version"],
        error=facts["error"],
        providers=list(facts["providers"]),
    )


def _rdma_use(setting: str, options: "Options", libfabric: LibfabricReport, devices: list[RdmaDevice]) -> str:
    """What the rdma transport does for a group with ``setting``."""
    if setting not in ("auto", "rdma"):
        return f"off (MONARCH_TRANSPORT={setting})"
    if setting == "auto" and not options.rdma_provider and not devices:
        return "off: no RDMA device (verbs and efa devices show in /sys/class/infiniband)"
    if not libfabric.library:
        return f"off: {libfabric.error}"
    wanted = (options.rdma_provider,) if options.rdma_provider else RDMA_HARDWARE_PROVIDERS
    chosen = next((name for name in wanted if libfabric.domains(name)), None)
    if chosen is None:
        missing = ", ".join(wanted)
        if setting == "rdma":
            return f"unavailable: no {missing} provider with RMA; creating a group raises RdmaUnavailableError"
        return f"off: no {missing} provider here (Options.rdma_provider names another)"
    return (
        f"payloads of {options.rdma_min_bytes} bytes or more to peers on other hosts by RDMA read through "
        f"{chosen} ({', '.join(libfabric.domains(chosen))}); never within a host"
    )


def _shm_free() -> str:
    try:
        stats = os.statvfs("/dev/shm")
    except OSError as e:
        return f"unavailable: {e.strerror}; groups fall back to their links"
    return f"{stats.f_bavail * stats.f_frsize // (1 << 20)} MiB free"


def gpu_routes(report: GpuReport, gpu_transport: str) -> list[tuple[str, str]]:
    """(GPU route, what it is) for ranks on GPUs of their own and ranks sharing one, as a group decides it."""
    from torch_monarch import _C

    library = f"{report.collectives} {report.collectives_version}" if report.collectives_found else "not found"
    names = {"nccl": f"{report.collectives} ({library})", "host": "host-staged (pinned host memory, host algorithms)"}
    one, other = bytes(range(16)), bytes(range(1, 17))
    rows: list[tuple[str, str]] = []
    for label, uuids in (("own GPU", [one, other]), ("shared GPU", [one, one])):
        ranks = [(uuid, report.collectives_found) for uuid in uuids]
        route, reason = _C.choose_gpu_route(gpu_transport, ranks)
        rows.append((f"GPU tensors, {label}", f"{names[route]}: {reason} (gpu_transport={gpu_transport})"))
    return rows


def transports(report: GpuReport, rdma: list[RdmaDevice], libfabric: LibfabricReport) -> list[tuple[str, str]]:
    """(transport, when it is used) for a group created with the current environment."""
    from torch_monarch.options import Options

    try:
        options = Options().with_env_overrides()
        setting = options.transport
    except ValueError as e:
        options, setting = Options(), f"invalid ({e})"
    selected = [("tcp", "every peer: handshake, control frames, heartbeats, payloads")]
    if setting in ("auto", "rdma"):
        selected.append(
            (
                "shared memory",
                f"collectives of {options.shm_min_bytes} bytes or more among a group's ranks on one host: "
                f"a {options.shm_segment_bytes}-byte segment per rank from /dev/shm ({_shm_free()})",
            )
        )
        selected.append(
            (
                "same-host remote read",
                "other large payloads between processes on one host (point-to-point, all_to_all, gather, "
                "scatter; process_vm_readv), where the kernel lets peers read each other's memory (probed at "
                "connect); MONARCH_TRANSPORT=tcp turns both off",
            )
        )
    else:
        off = f"off (MONARCH_TRANSPORT={os.environ.get('MONARCH_TRANSPORT')})"
        selected.append(("shared memory", off))
        selected.append(("same-host remote read", off))
    if report.platform in ("cuda", "rocm"):
        selected.extend(gpu_routes(report, options.gpu_transport))
    else:
        selected.append(("GPU", "none (the extension was built without GPU support)"))
    selected.append(("rdma", f"{_rdma_use(setting, options, libfabric, rdma)} ({len(rdma)} RDMA device(s) found)"))
    return selected
