"""Run lm-eval tasks on one checkpoint and write one contract JSON per task.

The model is loaded once (lm-eval's ``HFLM`` on the local checkpoint directory, encoding
each distinct string once: :class:`ReusingHFLM`) and each task runs through
``lm_eval.simple_evaluate`` with its own number of shots and the config's seed for every
random choice (python, numpy, torch, few-shot sampling).

Task lookup: world tasks come from the benchmark directory (relocated copies of its
YAMLs, :func:`relocated_include_dir`), shipped tasks from ``workflow/lm_eval_tasks``, and
lm-eval's own index is scanned only when a stock task is asked for.

Stock and shipped tasks run with their own lm-eval config and two overrides
(:func:`task_spec`): the dataset is read from the local datasets directory
(:mod:`embtransfer.evaluation.datasets`), and extractive QA (MLQA, XQuAD) is scored by
:mod:`embtransfer.evaluation.squad` with the spec's protocol (by default the dataset's own:
lm-eval's MLQA scoring removes the Arabic article only at the start of a word, MLQA's script
everywhere; the shipped XQuAD tasks score by SQuAD v1.1 when run without this override).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import lm_eval
import lm_eval.evaluator
from lm_eval.models.huggingface import HFLM
from lm_eval.tasks import TaskManager

from embtransfer.core.atomic import write_json
from embtransfer.core.devices import inference_dtype, resolve_device
from embtransfer.evaluation.datasets import local_dataset_overrides, task_config
from embtransfer.evaluation.record import make_record
from embtransfer.evaluation.squad import process_results_for
from embtransfer.evaluation.task_catalog import SHIPPED_TASK_DIR, TaskSpec
from embtransfer.evaluation.world_tasks import relocated_include_dir
from embtransfer.models.loading import load_tokenizer

log = logging.getLogger("embtransfer.evaluation")


class ReusingHFLM(HFLM):
    """lm-eval's HFLM that encodes each distinct string once per checkpoint.

    A multiple-choice request is scored as ``encode(context)`` and ``encode(context +
    choice)``, so a context is encoded once per choice (four times a question: with a
    passage, a tenth of an evaluation job), and ``max_length`` reads the model config
    on every request. Both answers are the same for the life of the object, so they are
    kept; the tokens, and so every score, are lm-eval's own (tests/test_evaluation.py).
    """

    @functools.cached_property
    def max_length(self) -> int:  # type: ignore[override]
        return HFLM.max_length.fget(self)

    def tok_encode(
        self,
        string: str,
        add_special_tokens: bool | None = None,
        left_truncate_len: int | None = None,
        **kwargs: Any,
    ) -> list[int]:
        if kwargs:
            return super().tok_encode(string, add_special_tokens, left_truncate_len, **kwargs)
        cache = self.__dict__.setdefault("_encodings", {})
        key = (string, add_special_tokens, left_truncate_len)
        if key not in cache:
            cache[key] = tuple(super().tok_encode(string, add_special_tokens, left_truncate_len))
        return list(cache[key])  # a new list: callers may change theirs


class TaskRunError(RuntimeError):
    """An lm-eval task failed on its data (e.g. a column its config reads is missing)."""


def context_token_id(tokenizer: Any) -> int | None:
    """bos, else cls, else eos, else sep (as embtransfer.evaluation.zeroshot starts its
    sequences)."""
    for role in ("bos", "cls", "eos", "sep"):
        value = getattr(tokenizer, f"{role}_token_id", None)
        if value is not None:
            return int(value)
    return None


def hflm_kwargs(tokenizer: Any) -> dict[str, Any]:
    """How lm-eval's HFLM must encode text for this tokenizer.

    ``prefix_token_id``: the token a context-free continuation is scored after (lm-eval
    takes bos, else eos; WordPiece tokenizers have neither, their [CLS] starts a sequence).
    ``add_bos_token``: whether lm-eval lets the tokenizer add its special tokens. Left to
    itself it does, and cuts the continuation off ``encode(context + continuation)`` at
    ``len(encode(context))``: right when the tokenizer only prepends (a BOS, as Llama's and
    Gemma's do: kept), wrong when it appends (T5's ``</s>``, BERT's ``[SEP]``), where every
    choice would be scored as its last piece plus the appended token. Those get none.
    """
    kwargs: dict[str, Any] = {}
    prefix = context_token_id(tokenizer)
    if prefix is not None:
        kwargs["prefix_token_id"] = prefix
    probe = "a b"
    plain = tokenizer(probe, add_special_tokens=False)["input_ids"]
    full = tokenizer(probe)["input_ids"]
    kwargs["add_bos_token"] = len(full) > len(plain) and full[len(full) - len(plain) :] == plain
    return kwargs


def task_manager(specs: Sequence[TaskSpec], world_dir: str | Path | None, tmp: str | Path):
    """A TaskManager that knows ``specs``' tasks, scanning lm-eval's own tasks only if needed."""
    include: list[str] = []
    if any(s.source == "world" for s in specs):
        if world_dir is None:
            raise ValueError("world tasks need the benchmark directory (world_dir)")
        include.append(str(relocated_include_dir(world_dir, Path(tmp) / "world")))
    if any(s.source == "shipped" for s in specs):
        include.append(str(SHIPPED_TASK_DIR))
    stock = any(s.source == "stock" for s in specs)
    return TaskManager(include_path=include or None, include_defaults=stock)


def task_spec(
    spec: TaskSpec,
    manager: Any,
    datasets_dir: str | Path | None,
    cache_dir: str | Path | None = None,
    nfc: bool = False,
) -> str | dict[str, Any]:
    """What ``simple_evaluate`` is given for ``spec``: the task name (world tasks, or no
    override needed), else the task's full lm-eval config with the overrides above."""
    if spec.source == "world" or (datasets_dir is None and spec.answer_language is None):
        return spec.lm_eval_task
    cfg = task_config(manager, spec.lm_eval_task)
    if datasets_dir is not None:
        cfg.update(local_dataset_overrides(cfg, datasets_dir, cache_dir))
    if spec.answer_language is not None:
        cfg["process_results"] = process_results_for(
            spec.answer_language, protocol=spec.scoring_protocol, nfc=nfc
        )
    return cfg


@contextlib.contextmanager
def without_environment_survey() -> Iterator[None]:
    """Skip lm-eval's survey of the machine inside ``simple_evaluate``.

    Every call runs ``torch.utils.collect_env`` (``pip list``, conda, ``nvidia-smi``,
    ``lscpu``): 0.3-2 s a task, a sixth of a miniature-world evaluation job, for an
    ``env_info`` field the records never read (they name their own versions). lm-eval has
    no switch for it, so its ``add_env_info`` is a no-op for the duration; a release
    without that function is left alone.
    """
    survey = getattr(lm_eval.evaluator, "add_env_info", None)
    if survey is None:
        yield
        return
    lm_eval.evaluator.add_env_info = lambda storage: None
    try:
        yield
    finally:
        lm_eval.evaluator.add_env_info = survey


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
    datasets_dir: str | Path | None = None,
    nfc: bool = False,
    manager: Any | None = None,
) -> list[dict[str, Any]]:
    """Evaluate ``model_dir`` on each task of ``specs`` and write ``outputs[i]`` for
    ``specs[i]`` (atomically, contract of :mod:`embtransfer.evaluation.record`).

    ``meta`` gives stage, lang, source, target and method (the last two None for the
    source stage). ``datasets_dir``: the local datasets of stock and shipped tasks (None:
    lm-eval loads them itself). ``nfc``: NFC-normalise answers before scoring extractive QA.
    ``manager``: an lm-eval TaskManager that knows the tasks (default: built here).
    """
    if len(specs) != len(outputs):
        raise ValueError("one output per task spec")
    dev = resolve_device(device)
    lm = load_lm(model_dir, dev, batch_size, max_length, trust_remote_code)
    records = []
    with tempfile.TemporaryDirectory(prefix="embt-eval-") as tmp, without_environment_survey():
        if manager is None:
            manager = task_manager(specs, world_dir, tmp)
        # Check every task's data before the first one spends compute.
        task_specs = [
            task_spec(s, manager, datasets_dir, Path(tmp) / "datasets", nfc) for s in specs
        ]
        for spec, out, tspec in zip(specs, outputs, task_specs, strict=True):
            start = time.perf_counter()
            result = run_task(lm, spec, tspec, manager, limit, seed)
            if result is None:  # non-zero ranks of a distributed run
                continue
            record = task_record(
                spec,
                result,
                meta,
                limit=limit,
                nfc=nfc,
                model=str(model_dir),
                device=dev,
                batch_size=batch_size,
                seed=seed,
                prefix_token_id=lm.prefix_token_id,
            )
            write_json(out, record)  # no timings inside: the same run gives the same file
            log.info(
                "%s (%s): %s on %d documents in %.1f s",
                spec.key,
                spec.lm_eval_task,
                record["scores"],
                record["n_samples"],
                time.perf_counter() - start,
            )
            records.append(record)
    return records


def task_record(
    spec: TaskSpec,
    result: dict[str, Any],
    meta: dict[str, Any],
    *,
    limit: int | None,
    nfc: bool,
    model: str,
    device: str,
    batch_size: int | str,
    seed: int,
    prefix_token_id: int | None,
) -> dict[str, Any]:
    """The contract record (:func:`embtransfer.evaluation.record.make_record`) of one task's
    ``simple_evaluate`` result, with how it was run."""
    task_results = result["results"][spec.lm_eval_task]
    n = result.get("n-samples", {}).get(spec.lm_eval_task, {})
    n_samples = n.get("effective", task_results.get("sample_len", 0))
    scoring = {
        "protocol": spec.scoring_protocol,
        "answer_language": spec.answer_language,
        "nfc": nfc,
    }
    return make_record(
        spec,
        **meta,
        task_results=task_results,
        n_samples=n_samples,
        limit=limit,
        samples=(result.get("samples") or {}).get(spec.lm_eval_task),
        lm_eval_version=lm_eval.__version__,
        model=model,
        device=device,
        batch_size=batch_size,
        seed=seed,
        prefix_token_id=prefix_token_id,
        **({"scoring": scoring} if spec.answer_language else {}),
    )


def load_lm(
    model_dir: str | Path,
    dev: str,
    batch_size: int | str,
    max_length: int | None,
    trust_remote_code: bool,
) -> ReusingHFLM:
    """lm-eval's model of the checkpoint on ``dev``, encoding as its tokenizer needs
    (:func:`hflm_kwargs`)."""
    kwargs: dict[str, Any] = {}
    if max_length is not None:
        kwargs["max_length"] = max_length
    kwargs.update(hflm_kwargs(load_tokenizer(model_dir, trust_remote_code=trust_remote_code)))
    t0 = time.perf_counter()
    lm = ReusingHFLM(
        pretrained=str(model_dir),
        device=dev,
        batch_size=batch_size,
        dtype=inference_dtype(dev),
        trust_remote_code=trust_remote_code,
        **kwargs,
    )
    tok = lm.tokenizer
    if tok.eos_token is None and tok.sep_token is not None:
        tok.eos_token = tok.sep_token  # generation tasks stop at the end-of-sequence token
    log.info("loaded %s on %s in %.1f s", model_dir, dev, time.perf_counter() - t0)
    return lm


def run_task(
    lm: Any, spec: TaskSpec, tspec: str | dict[str, Any], manager: Any, limit: int | None, seed: int
) -> dict[str, Any] | None:
    """``lm_eval.simple_evaluate`` of one task with the seed for every random choice; a
    failure names the task and its data."""
    try:
        return lm_eval.simple_evaluate(
            model=lm,
            tasks=[tspec],
            num_fewshot=spec.num_fewshot,
            limit=limit,
            task_manager=manager,
            random_seed=seed,
            numpy_random_seed=seed,
            torch_random_seed=seed,
            fewshot_random_seed=seed,
            log_samples=True,  # per-document scores, for paired tests
        )
    except Exception as err:  # name the task and its data (a field lm-eval lacks)
        data = (
            (tspec.get("dataset_kwargs") or {}).get("data_files")
            if isinstance(tspec, dict)
            else None
        )
        raise TaskRunError(
            f"task {spec.key!r} (lm-eval {spec.lm_eval_task!r}) failed"
            + (f" on {sorted(data.values())}" if data else "")
            + f": {type(err).__name__}: {err}"
        ) from err
