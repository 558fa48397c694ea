"""The result file of one (checkpoint, stage, task): the contract the report reads.

``results/eval/{stage}/{lang}/{source}/{target}/{method}/{task}.json`` (stages transfer,
lapt) and ``results/eval/source/{lang}/{source}/{task}.json`` hold::

    {"task": task key (e.g. "mlqa_ctx_en"), "lm_eval_task": lm-eval's name ("mlqa_en_de"),
     "stage": "transfer" | "lapt" | "source", "lang", "source",
     "target": PLM key | null (source stage), "method": method | null (source stage),
     "kind": "knowledge" | "mrc" | "crosslingual", "eval_language": "target" | "english",
     "note": the reference CSV's note ("", "eval_language=english",
             "context=en,question=target", ...),
     "scores": {paper-style name: percent, e.g. "MLQA EM": 10.0, "MLQA F1": 20.3},
     "stderr": {same names: percent or null}, "num_fewshot": int, "limit": int | null,
     "n_samples": documents scored, "lm_eval_version": str,
     ... extra keys: "metrics_used" (score name -> lm-eval "metric,filter"),
     "lm_eval_results" (lm-eval's raw numbers for the task, non-finite ones as null),
     "per_document" (score name -> its value per document, in document order: what the
     report's paired tests compare),
     "model", "device", "batch_size", "seed", and for extractive QA "scoring":
     {"protocol": "squad_v1.1" | "mlqa_official" (embtransfer.evaluation.squad),
      "answer_language", "nfc"}; timings go to the job's log}

Scores are lm-eval's aggregated values (fractions) times 100, never filled in: a metric
the task does not report, or a non-finite value, is an error and no file is written.
"""

from __future__ import annotations

import math
from typing import Any

from embtransfer.core.grid import STAGES
from embtransfer.evaluation.task_catalog import KINDS, TaskSpec

REQUIRED = {
    "task": str, "lm_eval_task": str, "stage": str, "lang": str, "source": str,
    "target": (str, type(None)), "method": (str, type(None)), "kind": str,
    "eval_language": str, "note": str, "scores": dict, "stderr": dict, "num_fewshot": int,
    "limit": (int, type(None)), "n_samples": int, "lm_eval_version": str,
}


class ScoreError(ValueError):
    """lm-eval's output lacks a metric, or holds a value that is not a finite number."""


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def pick_metric(task_results: dict[str, Any], candidates: tuple[str, ...]) -> str:
    """The ``"metric,filter"`` key of the first candidate metric the task reports.

    A metric reported under several filters must be disambiguated: ``none`` (no filter)
    wins, otherwise it is an error.
    """
    for metric in candidates:
        keys = sorted(k for k in task_results
                      if k.split(",", 1)[0] == metric and "," in k)
        if not keys:
            continue
        if len(keys) == 1:
            return keys[0]
        if f"{metric},none" in keys:
            return f"{metric},none"
        raise ScoreError(f"metric {metric!r} is reported under several filters: {keys}")
    raise ScoreError(
        f"none of the metrics {list(candidates)} is in lm-eval's results "
        f"(reported: {sorted(k for k in task_results if ',' in k)})"
    )


def extract_scores(task_results: dict[str, Any], metrics: dict[str, tuple[str, ...]]
                   ) -> tuple[dict[str, float], dict[str, float | None], dict[str, str]]:
    """(scores, stderr, metrics_used) in percent from one task's lm-eval results."""
    scores: dict[str, float] = {}
    stderr: dict[str, float | None] = {}
    used: dict[str, str] = {}
    for name, candidates in metrics.items():
        key = pick_metric(task_results, candidates)
        value = _number(task_results[key])
        if value is None or not math.isfinite(value):
            raise ScoreError(f"{name}: lm-eval reported {task_results[key]!r} for {key}")
        metric, filt = key.split(",", 1)
        err = _number(task_results.get(f"{metric}_stderr,{filt}"))
        scores[name] = 100.0 * value
        stderr[name] = 100.0 * err if err is not None and math.isfinite(err) else None
        used[name] = key
    return scores, stderr, used


def per_document(samples: list[dict[str, Any]] | None, used: dict[str, str]
                 ) -> dict[str, list[float]]:
    """Each score's per-document values in document order (``doc_id``), from lm-eval's logged
    samples: what a paired test between two checkpoints compares question by question."""
    if not samples:
        return {}
    ordered = sorted(samples, key=lambda s: s["doc_id"])
    out: dict[str, list[float]] = {}
    for name, key in used.items():
        metric = key.split(",", 1)[0]
        values = [_number(s.get(metric)) for s in ordered]
        if all(v is not None and math.isfinite(v) for v in values):
            out[name] = [float(v) for v in values]
    return out


def sanitize(obj: Any) -> Any:
    """Non-finite floats to None (for lm-eval's raw numbers, kept for reference only)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): sanitize(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [sanitize(v) for v in obj]
    return obj


def make_record(spec: TaskSpec, *, stage: str, lang: str, source: str, target: str | None,
                method: str | None, task_results: dict[str, Any], n_samples: int,
                limit: int | None, lm_eval_version: str,
                samples: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    scores, stderr, used = extract_scores(task_results, spec.metrics)
    documents = per_document(samples, used)
    if documents:
        extra["per_document"] = documents
    record = {
        "task": spec.key, "lm_eval_task": spec.lm_eval_task, "stage": stage, "lang": lang,
        "source": source, "target": target, "method": method, "kind": spec.kind,
        "eval_language": spec.eval_language, "note": spec.note, "scores": scores,
        "stderr": stderr, "num_fewshot": spec.num_fewshot, "limit": limit,
        "n_samples": int(n_samples), "lm_eval_version": lm_eval_version,
        "metrics_used": used, "lm_eval_results": sanitize(task_results), **extra,
    }
    check_record(record)
    return record


def check_record(record: dict[str, Any]) -> None:
    """Raise :class:`ScoreError` unless ``record`` follows the contract."""
    for key, types in REQUIRED.items():
        if key not in record:
            raise ScoreError(f"result record lacks {key!r}")
        if not isinstance(record[key], types) or isinstance(record[key], bool):
            raise ScoreError(f"result record: {key} = {record[key]!r} has the wrong type")
    if record["stage"] not in STAGES:
        raise ScoreError(f"result record: unknown stage {record['stage']!r}")
    if record["kind"] not in KINDS:
        raise ScoreError(f"result record: unknown kind {record['kind']!r}")
    if record["eval_language"] not in ("target", "english"):
        raise ScoreError(f"result record: eval_language {record['eval_language']!r}")
    is_source = record["stage"] == "source"
    if any((record[k] is None) != is_source for k in ("target", "method")):
        raise ScoreError("result record: target/method are null exactly for the source stage")
    if not record["scores"]:
        raise ScoreError("result record has no scores")
    if set(record["stderr"]) != set(record["scores"]):
        raise ScoreError("result record: stderr names differ from score names")
    for name, value in record["scores"].items():
        if _number(value) is None or not math.isfinite(value):
            raise ScoreError(f"result record: score {name} = {value!r} is not a finite number")
        if not 0.0 <= value <= 100.0:
            raise ScoreError(f"result record: score {name} = {value!r} is not a percentage")
    for name, value in record["stderr"].items():
        if value is not None and (_number(value) is None or not math.isfinite(value)
                                  or value < 0):
            raise ScoreError(f"result record: stderr {name} = {value!r} is not a finite "
                             "non-negative number")
    if record["n_samples"] < 1:
        raise ScoreError("result record: no documents were scored")
