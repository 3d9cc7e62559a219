"""The part of a TorchTitan worker's start-up that outlives a restart: the tokenizer and the dataset.

Every TorchTitan worker loads its tokenizer (``HuggingFaceTokenizer``) and
its dataset (HF ``datasets.load_dataset``: the Arrow index, memory-mapped
from HF's cache) from its arguments; a restarted worker of the same job
loads the very same ones. :func:`keep` makes both loads remember what they
loaded, per process, and :func:`warm` loads them once in the forkserver
from the workers' arguments (``supervision.preload.worker_args``), so every
worker forked afterwards, restarted ones included, finds them loaded.

What is kept is read-only after loading and holds no thread, no socket and
no CUDA state, so it is sound to fork: the Rust tokenizer (the fork happens
before it ever encodes in parallel) and a map-style dataset (Arrow tables
memory-mapped from files). A streaming dataset is not kept: it is an
iterator over remote shards with no index to save. Whatever the worker
builds from them per run (its data shard, its position, the dataloader's
state in a checkpoint) is still built by the worker.

TorchTitan 0.2.x and 0.3.x: the tokenizer's loader and the text datasets'
module-level ``load_dataset`` are where both versions load.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable, Hashable, Optional, Sequence

from torch_monarch.integrations.patching import wrap_once

__all__ = ["keep", "warm"]

logger: logging.Logger = logging.getLogger(__name__)

# What this process loaded: (tokenizer directory) -> the Rust tokenizer; load_dataset's arguments -> dataset.
_tokenizers: dict[str, Any] = {}
_datasets: dict[Hashable, Any] = {}


def _keeping_tokenizer(load: Callable[..., Any]) -> Callable[..., Any]:
    """``HuggingFaceTokenizer._load_tokenizer_from_path`` that loads each directory once."""

    @functools.wraps(load)
    def wrapper(self: Any, tokenizer_path: str) -> Any:
        if tokenizer_path not in _tokenizers:
            _tokenizers[tokenizer_path] = load(self, tokenizer_path)
        return _tokenizers[tokenizer_path]

    return wrapper


def _keeping_dataset(load_dataset: Callable[..., Any]) -> Callable[..., Any]:
    """``datasets.load_dataset`` (as TorchTitan's text datasets call it) that loads a map-style dataset once."""

    @functools.wraps(load_dataset)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        key = (args, tuple(sorted(kwargs.items())))
        try:
            hash(key)
        except TypeError:
            return load_dataset(*args, **kwargs)  # arguments we cannot tell apart: load afresh
        if kwargs.get("streaming"):
            return load_dataset(*args, **kwargs)
        if key not in _datasets:
            _datasets[key] = load_dataset(*args, **kwargs)
        return _datasets[key]

    return wrapper


def keep() -> None:
    """Makes this process's TorchTitan remember the tokenizers and map-style datasets it loads. Idempotent."""
    from torchtitan.components.tokenizer import HuggingFaceTokenizer
    from torchtitan.hf_datasets import text_datasets

    wrap_once(HuggingFaceTokenizer, "_load_tokenizer_from_path", _keeping_tokenizer)
    wrap_once(text_datasets, "load_dataset", _keeping_dataset)


def _startup_inputs(config: Any) -> tuple[Optional[str], Optional[str], Optional[str]]:
    """(tokenizer directory, dataset name, dataset path) in a parsed TorchTitan config, None where absent."""
    model = getattr(config, "model", None)
    assets = getattr(model, "hf_assets_path", None) or getattr(config, "hf_assets_path", None)  # 0.2.x / 0.3.x
    training = getattr(config, "training", None)
    data = training if hasattr(training, "dataset") else getattr(config, "dataloader", None)  # 0.2.x / 0.3.x
    return assets, getattr(data, "dataset", None), getattr(data, "dataset_path", None)


def warm(args: Sequence[str]) -> list[str]:
    """Loads the tokenizer and the dataset that workers started with ``args`` will load; returns what it loaded.

    Called in the forkserver (after :func:`keep`). Anything that fails here
    is only logged: the workers then load it themselves, and report the
    error where there is one.
    """
    from datasets.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars
    from torchtitan.components.tokenizer import HuggingFaceTokenizer
    from torchtitan.config.manager import ConfigManager
    from torchtitan.hf_datasets import text_datasets

    loaded: list[str] = []
    # A progress bar starts tqdm's monitor thread: no thread may run in a server that forks.
    bars = not are_progress_bars_disabled()
    disable_progress_bars()
    try:
        assets, name, path = _startup_inputs(ConfigManager().parse_args(list(args)))
        if assets:
            HuggingFaceTokenizer(tokenizer_path=assets)
            loaded.append(f"tokenizer {assets}")
        dataset = text_datasets.DATASETS.get(name.lower()) if name else None
        if dataset is not None:
            dataset.loader(path or dataset.path)
            loaded.append(f"dataset {name} ({path or dataset.path})")
    except (Exception, SystemExit) as e:  # noqa: BLE001 - the workers load it themselves, and raise there
        # (SystemExit: TorchTitan's argument parser exits on arguments it rejects)
        logger.warning("TorchTitan's start-up not done in the forkserver (%s: %s); every worker does it", type(e).__name__, e)
    finally:
        if bars:
            enable_progress_bars()
    return loaded
