"""What TorchTitan's text training reads, written for a test: a BPE tokenizer and a local text dataset.

TorchTitan's debug configs read them from its source tree, which its wheel
does not ship.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

SPECIAL_TOKENS = ["<unk>", "<|begin_of_text|>", "<|end_of_text|>"]


def write_assets(root: Path, texts: Sequence[str], vocab_size: int) -> tuple[Path, Path]:
    """(tokenizer directory, dataset directory) under ``root``: a tokenizer trained on ``texts``, and ``texts``.

    The dataset is ``train.jsonl`` with one ``{"text": ...}`` per text, as
    TorchTitan's ``c4_test`` entry loads it.
    """
    import tokenizers

    assets = root / "tokenizer"
    assets.mkdir(parents=True)
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS)
    tokenizer.train_from_iterator(texts, trainer)
    tokenizer.save(str(assets / "tokenizer.json"))
    config = {"bos_token": SPECIAL_TOKENS[1], "eos_token": SPECIAL_TOKENS[2], "add_bos_token": True, "add_eos_token": True}
    (assets / "tokenizer_config.json").write_text(json.dumps(config))
    data = root / "data"
    data.mkdir()
    (data / "train.jsonl").write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
    return assets, data
