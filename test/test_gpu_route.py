"""Which route CUDA tensors take (csrc/contract/gpu_route.cc), checked without a GPU.

A group's ranks tell each other their GPU's UUID and whether they loaded NCCL
at the first op on CUDA tensors; every rank then picks the same route from
the same facts. The GPU side is in test/gpu/test_cuda_host_staged.py.
"""

from __future__ import annotations

import pytest

from torch_monarch import Options, _C
from torch_monarch._platform import GpuReport, gpu_routes

GPU_A = bytes(range(16))
GPU_B = bytes(range(16, 32))


def test_auto_takes_nccl_when_every_rank_has_its_own_gpu() -> None:
    route, reason = _C.choose_gpu_route("auto", [(GPU_A, True), (GPU_B, True)])
    assert route == "nccl", reason


def test_auto_stages_through_the_host_when_ranks_share_a_gpu() -> None:
    route, reason = _C.choose_gpu_route("auto", [(GPU_A, True), (GPU_B, True), (GPU_A, True)])
    assert route == "host"
    assert "ranks [0, 2] share GPU-00010203" in reason


def test_auto_stages_through_the_host_when_a_rank_has_no_nccl() -> None:
    route, reason = _C.choose_gpu_route("auto", [(GPU_A, True), (GPU_B, False)])
    assert route == "host"
    assert "could not be loaded on ranks [1]" in reason


def test_a_single_rank_takes_nccl_when_it_has_it() -> None:
    assert _C.choose_gpu_route("auto", [(GPU_A, True)])[0] == "nccl"
    assert _C.choose_gpu_route("auto", [(GPU_A, False)])[0] == "host"


@pytest.mark.parametrize("requested", ["nccl", "host"])
def test_an_explicit_transport_wins(requested: str) -> None:
    # Even where auto would choose otherwise: NCCL over per-rank host ids
    # (NCCL_HOSTID) serves ranks sharing a GPU, and host serves any group.
    for ranks in ([(GPU_A, True), (GPU_A, True)], [(GPU_A, True), (GPU_B, True)]):
        assert _C.choose_gpu_route(requested, ranks)[0] == requested


def test_bad_arguments_raise_value_errors() -> None:
    with pytest.raises(ValueError, match="gpu_transport must be 'auto', 'nccl' or 'host'"):
        _C.choose_gpu_route("rdma", [(GPU_A, True)])
    with pytest.raises(ValueError, match="16 bytes"):
        _C.choose_gpu_route("auto", [(b"short", True)])


def test_option_and_environment_override(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Options().gpu_transport == "auto"
    monkeypatch.setenv("MONARCH_GPU_TRANSPORT", "host")
    assert Options(gpu_transport="nccl").with_env_overrides().gpu_transport == "host"
    monkeypatch.setenv("MONARCH_GPU_TRANSPORT", "gloo")
    with pytest.raises(ValueError, match="gpu_transport must be one of"):
        Options().with_env_overrides()
    with pytest.raises(ValueError, match="gpu_transport"):
        Options(gpu_transport="Host").validate()


def _cuda_report(nccl_found: bool) -> GpuReport:
    return GpuReport(
        platform="cuda",
        collectives="NCCL",
        collectives_library="/lib/libnccl.so.2" if nccl_found else "not found",
        collectives_version="2.28.3" if nccl_found else "-",
        collectives_shrink="ncclCommShrink",
        collectives_error="",
        driver_library="libcuda.so.1",
        driver_version=13000,
        driver_devices=1,
        driver_error="",
        dmabuf_export=True,
    )


def test_the_doctor_says_which_route_is_in_use() -> None:
    rows = dict(gpu_routes(_cuda_report(nccl_found=True), "auto"))
    assert rows["GPU tensors, own GPU"].startswith("NCCL (NCCL 2.28.3)")
    assert rows["GPU tensors, shared GPU"].startswith("host-staged")
    rows = dict(gpu_routes(_cuda_report(nccl_found=False), "auto"))
    assert rows["GPU tensors, own GPU"].startswith("host-staged")
    assert "could not be loaded" in rows["GPU tensors, own GPU"]
