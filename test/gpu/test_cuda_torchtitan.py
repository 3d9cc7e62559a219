"""TorchTitan's own trainer over ProcessGroupMonarch, through a kill.

``monarch-run`` starts 2 replica groups of TorchTitan's trainer (llama3 debug
model, DiLoCo every 5 steps) on the one GPU, with
``--fault_tolerance.process_group monarch``
(torch_monarch.integrations.torchtitan). A worker of replica 1 is killed
mid-training: replica 0 keeps committing steps, replica 1 is restarted by its
supervisor, heals from replica 0 (its first step after the restart is past
the step it died at) and trains in the full quorum again.

TorchTitan's debug configs read a tokenizer and a dataset from its source
tree, which its wheel does not ship: the test trains a small BPE tokenizer
(``tokenizers``) and writes a small local text dataset.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.cuda, pytest.mark.timeout(480)]

# Seen on the H200 (TorchTitan 0.2.2, 2026-12-01): both replicas trained under
# monarch-run through this module, but TorchTitan's fault tolerance stayed off
# in the run (no quorum, no DiLoCo sync), although the same arguments parse to
# enable=True and build a ProcessGroupMonarch where checked without a GPU.
KNOWN_FAILURE = "TorchTitan's fault tolerance did not turn on under monarch-run on the H200; cause not found yet"

REPO_ROOT = Path(__file__).resolve().parents[2]
SYNC_STEPS = 5
STEPS = 2000  # far more than the run lasts: it is stopped once it has shown the rejoin


def _assets(root: Path) -> tuple[Path, Path]:
    tokenizers = pytest.importorskip("tokenizers")
    rng = random.Random(0)
    nouns = ["cat", "dog", "bird", "fish", "tree", "river", "stone", "cloud", "house", "road"]
    verbs = ["sees", "likes", "finds", "follows", "paints", "carries", "hears", "moves"]
    adjectives = ["red", "small", "quiet", "old", "bright", "green", "slow", "tall"]
    texts = [
        " ".join(
            f"the {rng.choice(adjectives)} {rng.choice(nouns)} {rng.choice(verbs)} the {rng.choice(nouns)} ."
            for _ in range(rng.randint(8, 30))
        )
        for _ in range(2000)
    ]
    assets = root / "tokenizer"
    assets.mkdir(parents=True)
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    special = ["<unk>", "<|begin_of_text|>", "<|end_of_text|>"]
    tokenizer.train_from_iterator(texts, tokenizers.trainers.BpeTrainer(vocab_size=256, special_tokens=special))
    tokenizer.save(str(assets / "tokenizer.json"))
    (assets / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": special[1], "eos_token": special[2], "add_bos_token": True, "add_eos_token": True})
    )
    data = root / "data"
    data.mkdir()
    with open(data / "train.jsonl", "w") as f:
        for text in texts:
            f.write(json.dumps({"text": text}) + "\n")
    return assets, data


def _steps(run_dir: Path, replica: str) -> list[dict[str, Any]]:
    path = run_dir / "replicas" / replica / "steps.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _worker_pid(run_dir: Path, replica: str) -> int:
    status = json.loads((run_dir / "replicas" / replica / "rank0.json").read_text())
    return int(status["pid"])


@pytest.mark.xfail(reason=KNOWN_FAILURE, strict=False)
def test_torchtitan_trains_through_a_killed_worker(tmp_path: Path) -> None:
    pytest.importorskip("torchtitan")
    pytest.importorskip("torchft")
    assets, data = _assets(tmp_path)
    run_dir = tmp_path / "run"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        "NCCL_NVLS_ENABLE": "0",
    }
    command = [
        sys.executable, "-m", "torch_monarch.run", "--replicas", "2", "--nproc-per-node", "1",
        "--min-replicas", "1", "--max-restarts", "3", "--restart-backoff", "0.5", "--run-dir", str(run_dir),
        "-m", "torch_monarch.integrations.torchtitan",
        "--model.name", "llama3_ft", "--model.flavor", "debugmodel", "--model.hf_assets_path", str(assets),
        "--training.dataset", "c4_test", "--training.dataset_path", str(data),
        "--training.local_batch_size", "4", "--training.seq_len", "128", "--training.steps", str(STEPS),
        "--lr_scheduler.warmup_steps", "2", "--metrics.log_freq", "5", "--activation_checkpoint.mode", "none",
        "--parallelism.data_parallel_shard_degree", "1", "--job.dump_folder", str(tmp_path / "outputs"),
        "--job.custom_config_module", "torchtitan.components.ft.config",
        "--fault_tolerance.enable", "--fault_tolerance.process_group", "monarch",
        "--fault_tolerance.semi_sync_method", "diloco", "--fault_tolerance.sync_steps", str(SYNC_STEPS),
        "--fault_tolerance.min_replica_size", "1",
    ]  # fmt: skip
    log = open(tmp_path / "monarch-run.log", "w")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    report: dict[str, Any] = {}
    try:
        # 1. Both replicas train, in one quorum.
        deadline = time.monotonic() + 240
        while not (_steps(run_dir, "1") and _steps(run_dir, "0") and _steps(run_dir, "0")[-1].get("participants") == 2):
            assert process.poll() is None, "monarch-run ended early"
            assert time.monotonic() < deadline, "the replicas did not start training together"
            time.sleep(0.5)
        report["start_up_s"] = 240 - (deadline - time.monotonic())
        # 2. Kill replica 1's worker mid-training.
        killed_at_step = _steps(run_dir, "1")[-1]["step"]
        os.kill(_worker_pid(run_dir, "1"), signal.SIGKILL)
        killed = time.monotonic()
        healthy_before = len(_steps(run_dir, "0"))
        # 3. Replica 1 restarts, heals from replica 0 and trains with it again.
        deadline = killed + 180
        while True:
            assert process.poll() is None, "monarch-run ended early"
            assert time.monotonic() < deadline, "replica 1 did not rejoin"
            after = [s for s in _steps(run_dir, "1") if s["attempt"] > 0]  # steps of the restarted worker
            if after and after[-1].get("participants") == 2:
                break
            time.sleep(0.5)
        report["rejoin_s"] = time.monotonic() - killed
        report["killed_at_step"] = killed_at_step
        report["first_step_after_restart"] = after[0]["step"]
        report["healthy_steps_while_down"] = len(_steps(run_dir, "0")) - healthy_before
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()
        for path in sorted(run_dir.glob("replicas/*/logs/*/attempt_*/0/std*.log")):
            lines = [line for line in path.read_text(errors="replace").splitlines() if "GC]" not in line]
            print(f"--- {path.relative_to(run_dir)}\n" + "\n".join(lines[-15:]))
    print(f"torchtitan through a kill: {report}")
    print((tmp_path / "monarch-run.log").read_text()[-4000:])
    assert report["healthy_steps_while_down"] > 0, report
    # Healed from the donor: it resumes at the donor's step, not from scratch.
    assert report["first_step_after_restart"] > SYNC_STEPS, report
