"""``torch_monarch.integrations.torchtitan_startup``: a TorchTitan worker's tokenizer and dataset, loaded once.

In a forkserver they are loaded before any worker forks, so restarted
workers skip loading them. Checked on CPU against TorchTitan 0.3.0's
tokenizer and text datasets (the loaders 0.2.x has too), and its own
argument parser on CI's second stack (it needs triton); the GPU run of
TorchTitan 0.2.2's trainer (test/gpu/test_cuda_torchtitan.py) shows the
workers' logs without the loads.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torchtitan.hf_datasets.text_datasets")
tokenizers = pytest.importorskip("tokenizers")

from torchtitan.components import tokenizer as tokenizer_module  # noqa: E402
from torchtitan.hf_datasets import text_datasets  # noqa: E402

from torch_monarch.integrations import torchtitan_startup as startup  # noqa: E402
from torchtitan_assets import write_assets  # noqa: E402

pytestmark = pytest.mark.timeout(120)
TEXTS = [f"the cat number {i} sees the dog number {i * 7 % 13} ." for i in range(64)]


@pytest.fixture
def assets(tmp_path: Path) -> tuple[Path, Path]:
    """(tokenizer directory, dataset directory): a small BPE tokenizer and a local text dataset."""
    return write_assets(tmp_path, TEXTS, vocab_size=80)


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every tokenizer file TorchTitan reads from now on; this process's kept loads forgotten."""
    read: list[str] = []
    original = tokenizer_module.Tokenizer

    class CountingTokenizer:
        @staticmethod
        def from_file(path: str) -> Any:
            read.append(path)
            return original.from_file(path)

    monkeypatch.setattr(tokenizer_module, "Tokenizer", CountingTokenizer)
    monkeypatch.setattr(startup, "_tokenizers", {})
    monkeypatch.setattr(startup, "_datasets", {})
    startup.keep()
    return read


def _tokenizer(directory: Path) -> Any:
    return tokenizer_module.HuggingFaceTokenizer(tokenizer_path=str(directory))


def test_a_tokenizer_directory_is_read_once_and_encodes_as_loaded_afresh(assets: tuple[Path, Path], loads: list[str]) -> None:
    directory, _ = assets
    first, second = _tokenizer(directory), _tokenizer(directory)
    assert loads == [str(directory / "tokenizer.json")]
    assert second.tokenizer is first.tokenizer
    fresh = tokenizers.Tokenizer.from_file(str(directory / "tokenizer.json"))
    assert second.tokenizer.encode(TEXTS[3]).ids == fresh.encode(TEXTS[3]).ids


def test_a_map_style_dataset_is_kept_a_stream_is_not(assets: tuple[Path, Path], loads: list[str]) -> None:
    _, data = assets
    dataset = text_datasets.load_dataset(str(data), split="train")
    assert text_datasets.load_dataset(str(data), split="train") is dataset
    assert [row["text"] for row in dataset] == TEXTS
    assert text_datasets.load_dataset(str(data), split="train", streaming=True) is not text_datasets.load_dataset(
        str(data), split="train", streaming=True
    )
    # TorchTitan's own c4_test entry loads through the kept function.
    assert text_datasets.DATASETS["c4_test"].loader(str(data)) is dataset


class _Config02:
    """Stands in for TorchTitan 0.2.x's ConfigManager (its configs need triton to import on this machine)."""

    def parse_args(self, args: list[str]) -> Any:
        p = argparse.ArgumentParser()
        for flag in ("--model.hf_assets_path", "--training.dataset", "--training.dataset_path"):
            p.add_argument(flag)
        parsed = vars(p.parse_args(args))
        return argparse.Namespace(
            model=argparse.Namespace(hf_assets_path=parsed["model.hf_assets_path"]),
            training=argparse.Namespace(dataset=parsed["training.dataset"], dataset_path=parsed["training.dataset_path"]),
        )


def test_warm_loads_what_the_workers_arguments_name(assets: tuple[Path, Path], loads: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import torchtitan.config.manager

    directory, data = assets
    monkeypatch.setattr(torchtitan.config.manager, "ConfigManager", _Config02)
    args = ["--model.hf_assets_path", str(directory), "--training.dataset", "C4_test", "--training.dataset_path", str(data)]
    assert startup.warm(args) == [f"tokenizer {directory}", f"dataset C4_test ({data})"]
    assert loads == [str(directory / "tokenizer.json")]
    # What a worker then does (forked after warm, it has this process's memory) reads nothing again.
    worker_tokenizer = _tokenizer(directory)
    worker_dataset = text_datasets.HuggingFaceTextDataset("c4_test", str(data), worker_tokenizer, seq_len=8)
    assert loads == [str(directory / "tokenizer.json")]
    sample, label = next(iter(worker_dataset))
    assert sample["input"].shape == label.shape == (8,)


@pytest.mark.newest_stack
def test_warm_parses_torchtitan_0_3_arguments(assets: tuple[Path, Path], loads: list[str]) -> None:
    """TorchTitan 0.3's own ConfigManager (``--module``/``--config``, then the overrides a job passes)."""
    pytest.importorskip("triton", reason="TorchTitan 0.3's model configs import triton (CI's second stack has it)")
    from torchtitan.config.manager import ConfigManager
    from torchtitan.trainer import Trainer

    directory, data = assets
    args = ["--module", "llama3", "--config", "llama3_debugmodel", "--hf_assets_path", str(directory),
            "--dataloader.dataset", "c4_test", "--dataloader.dataset_path", str(data)]  # fmt: skip
    assert startup.warm(args) == [f"tokenizer {directory}", f"dataset c4_test ({data})"]
    # A 0.3 worker builds its tokenizer from the same config (Trainer's way) and reads no file again.
    config = ConfigManager().parse_args(args)
    assert isinstance(config, Trainer.Config)
    worker_tokenizer = config.tokenizer.build(tokenizer_path=config.hf_assets_path)
    assert loads == [str(directory / "tokenizer.json")]
    assert worker_tokenizer.encode(TEXTS[5]) == _tokenizer(directory).encode(TEXTS[5])
    assert text_datasets.DATASETS["c4_test"].loader(str(data)) is text_datasets.DATASETS["c4_test"].loader(str(data))


def test_warm_that_fails_leaves_the_loading_to_the_workers(tmp_path: Path, loads: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import torchtitan.config.manager

    monkeypatch.setattr(torchtitan.config.manager, "ConfigManager", _Config02)
    assert startup.warm(["--model.hf_assets_path", str(tmp_path / "missing")]) == []
    # Arguments the parser rejects (it exits, as TorchTitan's does): the workers will say so themselves.
    assert startup.warm(["--no-such-flag"]) == []
    assert startup._tokenizers == {}
