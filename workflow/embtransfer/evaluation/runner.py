"""Run lm-eval tasks on one checkpoint and write one contract JSON per task.

The model is loaded once (lm-eval's ``HFLM`` on the local checkpoint directory) and each
task runs through ``lm_eval.simple_evaluate`` with its own number of shots and the
config's seed for every random choice (python, numpy, torch, few-shot sampling).

Task lookup: world tasks come from the benchmark directory (relocated copies of its
YAMLs, :func:`relocated_include_dir`), shipped tasks from ``workflow/lm_eval_tasks``, and
lm-eval's own index is scanned only when a stock task is asked for.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from embtransfer.atomic import write_json
from embtransfer.evaluation.catalog import SHIPPED_TASK_DIR, TaskSpec
from embtransfer.evaluation.record import make_record
from embtransfer.evaluation.world_tasks import relocated_include_dir
from embtransfer.models import load_tokenizer

log = logging.getLogger("embtransfer.evaluation")


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def context_token_id(tokenizer: Any) -> int | None:
    """bos, else cls, else eos, else sep (as embtransfer.intrinsic starts its sequences)."""
    for role in ("bos", "cls", "eos", "sep"):
        value = getattr(tokenizer, f"{role}_token_id", None)
        if value is not None:
            return int(value)
    return None


def task_manager(specs: Sequence[TaskSpec], world_dir: str | Path | None, tmp: str | Path):
    """A TaskManager that knows ``specs``' tasks, scanning lm-eval's own tasks only if needed."""
    from lm_eval.tasks import TaskManager

    include: list[str] = []
    if any(s.source == "world" for s in specs):
        if world_dir is None:
            raise ValueError("world tasks need the benchmark directory (world_dir)")
        include.append(str(relocated_include_dir(world_dir, Path(tmp) / "world")))
    if any(s.source == "shipped" for s in specs):
        include.append(str(SHIPPED_TASK_DIR))
    stock = any(s.source == "stock" for s in specs)
    return TaskManager(include_path=include or None, include_defaults=stock)


def evaluate_checkpoint(
    model_dir: str | Path,
    specs: Sequence[TaskSpec],
    outputs: Sequence[str | Path],
    *,
    meta: dict[str, Any],
    world_dir: str | Path | None = None,
    device: str = "auto",
    batch_size: int | str = 16,
    limit: int | None = None,
    seed: int = 1234,
    max_length: int | None = None,
    trust_remote_code: bool = False,
) -> list[dict[str, Any]]:
    """Evaluate ``model_dir`` on each task of ``specs`` and write ``outputs[i]`` for
    ``specs[i]`` (atomically, contract of :mod:`embtransfer.evaluation.record`).

    ``meta`` gives stage, lang, source, target and method (the last two None for the
    source stage).
    """
    import lm_eval
    from lm_eval.models.huggingface import HFLM

    if len(specs) != len(outputs):
        raise ValueError("one output per task spec")
    dev = resolve_device(device)
    kwargs: dict[str, Any] = {}
    if max_length is not None:
        kwargs["max_length"] = max_length
    # The token a context-free continuation is scored after: lm-eval takes bos, else eos;
    # WordPiece tokenizers (BERT target PLMs) have neither, their [CLS] starts a sequence.
    prefix = context_token_id(load_tokenizer(model_dir, trust_remote_code=trust_remote_code))
    if prefix is not None:
        kwargs["prefix_token_id"] = prefix
    t0 = time.perf_counter()
    lm = HFLM(pretrained=str(model_dir), device=dev, batch_size=batch_size,
              trust_remote_code=trust_remote_code, **kwargs)
    tok = lm.tokenizer
    if tok.eos_token is None and tok.sep_token is not None:
        tok.eos_token = tok.sep_token  # generation tasks stop at the end-of-sequence token
    log.info("loaded %s on %s in %.1f s", model_dir, dev, time.perf_counter() - t0)
    version = lm_eval.__version__
    records = []
    with tempfile.TemporaryDirectory(prefix="embt-eval-") as tmp:
        manager = task_manager(specs, world_dir, tmp)
        for spec, out in zip(specs, outputs, strict=True):
            start = time.perf_counter()
            result = lm_eval.simple_evaluate(
                model=lm, tasks=[spec.lm_eval_task], num_fewshot=spec.num_fewshot,
                limit=limit, task_manager=manager, random_seed=seed,
                numpy_random_seed=seed, torch_random_seed=seed, fewshot_random_seed=seed,
                log_samples=False,
            )
            if result is None:  # non-zero ranks of a distributed run
                continue
            task_results = result["results"][spec.lm_eval_task]
            n = result.get("n-samples", {}).get(spec.lm_eval_task, {})
            n_samples = n.get("effective", task_results.get("sample_len", 0))
            record = make_record(
                spec, **meta, task_results=task_results, n_samples=n_samples, limit=limit,
                lm_eval_version=version, model=str(model_dir), device=dev,
                batch_size=batch_size, seed=seed, prefix_token_id=lm.prefix_token_id,
            )
            write_json(out, record)  # no timings inside: the same run gives the same file
            log.info("%s (%s): %s on %d documents in %.1f s", spec.key, spec.lm_eval_task,
                     record["scores"], record["n_samples"], time.perf_counter() - start)
            records.append(record)
    return records
