"""torch_monarch.Options on its one path: the fields the C++ backend reads are
exactly the Options fields, ``MONARCH_*`` overrides are parsed from the field
types (durations as seconds into timedeltas), and the op timeout follows the
documented precedence, on the TorchFT path too (``options.timeout`` beats
``ProcessGroupMonarch(timeout=)``; ``set_timeout()`` beats both)."""

from __future__ import annotations

import dataclasses
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Optional

import pytest
import torch
import torch.distributed as dist
from torch.distributed import TCPStore

from multiproc import WorkerContext, run_workers_ok
from torch_monarch import _C, Options
from torch_monarch._env import with_env_overrides
from torch_monarch.backend import new_backend
from torch_monarch.errors import CollectiveTimeoutError

pytestmark = pytest.mark.timeout(120)


def test_the_backend_reads_every_options_field_and_no_other() -> None:
    assert sorted(_C.backend_option_names()) == sorted(f.name for f in dataclasses.fields(Options))


def _readme_option_defaults() -> dict[str, str]:
    """The default column of the README's Options table, by field."""
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    rows: dict[str, str] = {}
    for line in text[text.index("## Options") :].splitlines()[1:]:
        if line.startswith("## "):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells[2]
    return rows


def test_the_readme_states_the_defaults_that_options_holds() -> None:
    # options.py owns every default (the C++ side takes each value from it).
    documented = _readme_option_defaults()
    assert sorted(documented) == sorted(f.name for f in dataclasses.fields(Options))
    defaults = Options()
    for name, cell in documented.items():
        value = getattr(defaults, name)
        if isinstance(value, timedelta):
            assert cell == f"{value.total_seconds():g} s", (name, cell)
        elif isinstance(value, int):
            assert cell == str(value), (name, cell)
        elif value:
            assert cell == f"`{value}`", (name, cell)
        # None and "": the README says in words what they stand for.


def test_durations_are_timedeltas_and_numbers_still_mean_seconds() -> None:
    assert Options().heartbeat_timeout == timedelta(seconds=3)
    assert Options(heartbeat_timeout=1.5).heartbeat_timeout == timedelta(seconds=1.5)
    assert Options(timeout=2).timeout == timedelta(seconds=2)
    assert Options(timeout=None).timeout is None
    with pytest.raises(TypeError, match="duration"):
        Options(heartbeat_timeout="3")  # type: ignore[arg-type]


def test_environment_overrides_follow_the_field_types(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONARCH_HEARTBEAT_TIMEOUT", "1.5")
    monkeypatch.setenv("MONARCH_TIMEOUT", "7")
    monkeypatch.setenv("MONARCH_THREADS", "3")  # an Optional[int] field
    monkeypatch.setenv("MONARCH_TRANSPORT", "tcp")
    monkeypatch.setenv("MONARCH_SHM_SEGMENT_BYTES", "")  # empty: unset
    resolved = Options(heartbeat_timeout=9, threads=1).with_env_overrides()
    assert resolved.heartbeat_timeout == timedelta(seconds=1.5)
    assert resolved.timeout == timedelta(seconds=7)
    assert resolved.threads == 3
    assert resolved.transport == "tcp"
    assert resolved.shm_segment_bytes == Options().shm_segment_bytes


def test_a_bad_environment_value_names_the_variable_and_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONARCH_HEARTBEAT_TIMEOUT", "soon")
    with pytest.raises(ValueError, match=r"MONARCH_HEARTBEAT_TIMEOUT='soon'.*Options\.heartbeat_timeout"):
        Options().with_env_overrides()
    monkeypatch.setenv("MONARCH_HEARTBEAT_TIMEOUT", "-1")
    with pytest.raises(ValueError, match="heartbeat_timeout must be positive"):
        Options().with_env_overrides()


@dataclasses.dataclass(frozen=True)
class _Flags:
    enabled: bool = False
    limit: Optional[float] = None


def test_the_one_env_reader_parses_booleans_and_optionals() -> None:
    env = {"X_ENABLED": "yes", "X_LIMIT": "2.5"}
    assert with_env_overrides(_Flags(), "X_", env) == _Flags(enabled=True, limit=2.5)
    with pytest.raises(ValueError, match="X_ENABLED='maybe'"):
        with_env_overrides(_Flags(), "X_", {"X_ENABLED": "maybe"})


def _created_options(monkeypatch: pytest.MonkeyPatch, options: Optional[Options], timeout: timedelta) -> Options:
    """The resolved Options new_backend passes across the binding."""
    seen: list[Options] = []
    monkeypatch.setattr(_C, "create_backend", lambda **kwargs: seen.append(kwargs["options"]))
    new_backend(dist.HashStore(), 0, 1, "g", timeout, options)
    return seen[0]


def test_op_timeout_precedence_env_over_options_over_group(monkeypatch: pytest.MonkeyPatch) -> None:
    group = timedelta(seconds=60)
    assert _created_options(monkeypatch, None, group).timeout == group
    assert _created_options(monkeypatch, Options(timeout=timedelta(seconds=5)), group).timeout == timedelta(seconds=5)
    monkeypatch.setenv("MONARCH_TIMEOUT", "2")
    assert _created_options(monkeypatch, Options(timeout=timedelta(seconds=5)), group).timeout == timedelta(seconds=2)
    # threads alone crosses the binding unresolved: its default depends on the group's ranks on this host,
    # which the backend knows once joined (test_helper_threads.py).
    assert _created_options(monkeypatch, None, group).threads is None


def test_an_unresolved_field_is_a_type_error_naming_it() -> None:
    unresolved = Options()  # timeout still None
    with pytest.raises(TypeError, match=r"Options\.timeout"):
        _C.create_backend(store=dist.HashStore(), rank=0, size=1, group_name="g", options=unresolved)


def test_every_field_crosses_the_binding_into_a_working_group() -> None:
    options = Options(
        timeout=timedelta(seconds=20),
        heartbeat_timeout=timedelta(seconds=2),
        transport="tcp",
        small_message_bytes=128,
        chunk_bytes=4096,
        direct_max_ranks=0,
        threads=2,
        host_name="options-test",
        shm_min_bytes=1024,
        shm_segment_bytes=64 << 10,
        rdma_provider="tcp;ofi_rxm",  # read by transport "rdma" and "auto" only
        rdma_min_bytes=4096,
    )
    backend = new_backend(dist.HashStore(), 0, 1, "fields", timedelta(seconds=30), options)
    try:
        tensor = torch.arange(4096, dtype=torch.float32)
        backend.allreduce([tensor]).wait()
        assert torch.equal(tensor, torch.arange(4096, dtype=torch.float32))
    finally:
        backend.shutdown()


def test_transport_and_rdma_fields_are_checked() -> None:
    for transport in ("auto", "tcp", "rdma"):
        Options(transport=transport).validate()
    with pytest.raises(ValueError, match=r"Options.transport must be one of \('auto', 'tcp', 'rdma'\), got 'ib'"):
        Options(transport="ib").validate()
    with pytest.raises(ValueError, match="Options.rdma_min_bytes must be >= 0, got -1"):
        Options(rdma_min_bytes=-1).validate()


# The op timeout a rank 0 sees when rank 1 skips its op, far below the 60 s
# that ProcessGroupMonarch(timeout=) alone would give.
OPTIONS_TIMEOUT_S = 5.0
SET_TIMEOUT_S = 1.0
BOUND_S = 20.0


def torchft_timeout_worker(ctx: WorkerContext, store_port: int) -> dict[str, Any]:
    from torch_monarch.torchft import ProcessGroupMonarch

    store = TCPStore("localhost", store_port, is_master=False, wait_for_workers=False)
    pg = ProcessGroupMonarch(
        timeout=timedelta(seconds=60), options=Options(timeout=timedelta(seconds=OPTIONS_TIMEOUT_S))
    )
    elapsed: dict[str, float] = {}
    for quorum, set_timeout in ((1, None), (2, SET_TIMEOUT_S)):
        if set_timeout is not None:
            pg.set_timeout(timedelta(seconds=set_timeout))
        pg.configure(f"localhost:{store_port}/precedence/q{quorum}", "replica", ctx.rank, 2, quorum_id=quorum)
        pg.barrier().wait()
        if ctx.rank == 0:
            start = time.perf_counter()
            with pytest.raises(CollectiveTimeoutError):
                pg.allreduce([torch.ones(4)], dist.ReduceOp.SUM).wait()
            elapsed[f"q{quorum}"] = time.perf_counter() - start
            store.set(f"done/{quorum}", "1")
        else:
            store.wait([f"done/{quorum}"], timedelta(seconds=60))
    pg.shutdown()
    return elapsed


def test_torchft_options_timeout_beats_the_constructor_and_set_timeout_beats_both() -> None:
    store = TCPStore("localhost", 0, is_master=True, wait_for_workers=False)
    results = run_workers_ok(torchft_timeout_worker, 2, store.port)
    elapsed = results[0]
    # Options.timeout (5 s), not the constructor's 60 s; then set_timeout's 1 s, not 5 s.
    assert OPTIONS_TIMEOUT_S - 0.5 <= elapsed["q1"] < BOUND_S, elapsed
    assert SET_TIMEOUT_S - 0.5 <= elapsed["q2"] < OPTIONS_TIMEOUT_S - 1.5, elapsed
