"""Read the result files the report is built from.

Their paths are :mod:`embtransfer.core.paths`'s templates; a run's identity is parsed from a
path with the same template that names the file (under any results folder).

* Evaluation JSONs: ``results/eval/{stage}/{lang}/{source}/{target}/{method}/{task}.json``
  (stage ``transfer`` | ``lapt``) and ``results/eval/source/{lang}/{source}/{task}.json``
  (the untouched source model). The run's identity is read from the JSON where it
  is given, else from the path.
* LAPT metrics: ``results/lapt/{lang}/{source}/{target}/{method}.metrics.jsonl``, one
  JSON object per line (logging steps, evaluations, a final line).
* Coverage: ``results/overlap/{source}/{target}.coverage.json``
  (:func:`embtransfer.vocab.overlap.coverage`).
* Zero-shot records: ``results/zeroshot/{lang}/{source}/{target}/{method}.json``
  (:func:`embtransfer.evaluation.zeroshot.evaluate_text`): their tokens and bytes convert Table 5's
  per-token LAPT eval loss to bits per byte.
* The paper's reference numbers (``salt_paper_tables.csv``).

A file that exists but cannot be read as what it should be raises
:class:`MalformedResultError` naming the file; a file that does
not exist is not an error here: the tables say "missing" and list it.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embtransfer.core import paths
from embtransfer.core.grid import STAGES

ZEROSHOT_KEYS = ("lang", "source", "method", "loss", "bits_per_byte")


class MalformedResultError(ValueError):
    """A results file cannot be read as a record; the message names it."""


def read_records(paths: Iterable[str | os.PathLike], required: tuple[str, ...] = ZEROSHOT_KEYS
                 ) -> list[dict[str, Any]]:
    records = []
    for path in paths:
        try:
            record = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise MalformedResultError(f"results file {path} is malformed: {err}") from err
        missing = [k for k in required if k not in record] if isinstance(record, dict) else required
        if missing:
            raise MalformedResultError(f"results file {path} lacks the keys {list(missing)}")
        record["_path"] = str(path)
        records.append(record)
    return records


KINDS = ("knowledge", "mrc", "crosslingual")
REFERENCE_COLUMNS = ("table", "source_model", "target_arch", "method", "lang", "metric", "value",
                     "note")


@dataclass(frozen=True)
class EvalRecord:
    """One checkpoint's scores on one task (values in percent, paper-style metric names)."""

    path: str
    stage: str
    lang: str
    source: str
    target: str | None
    method: str | None
    task: str
    kind: str
    eval_language: str
    note: str
    scores: dict[str, float]
    #: lm-eval's standard error of each score (percent); None where it reports none.
    stderr: dict[str, float | None] = field(default_factory=dict)
    #: Each score's per-document values in document order (paired tests); empty if absent.
    per_document: dict[str, list[float]] = field(default_factory=dict)
    #: extractive QA: the protocol that scored the answers (``scoring.protocol``), else None.
    scoring_protocol: str | None = None


@dataclass
class LaptRun:
    """One LAPT run's metrics file: train-loss curve, evaluations, final line."""

    path: str
    lang: str
    source: str
    target: str
    method: str
    train: list[tuple[int, float]] = field(default_factory=list)  # (step, train_loss)
    evals: dict[float, float] = field(default_factory=dict)  # fraction -> eval_loss
    final: dict[str, Any] | None = None


def _finite_number(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def eval_path_identity(path: str | os.PathLike) -> dict[str, str | None]:
    """Run identity from an evaluation path (:data:`paths.EVAL` or :data:`paths.EVAL_SOURCE`,
    under any results folder); {} if it is neither."""
    source = paths.EVAL_SOURCE.parse(path)
    if source is not None:
        return {"stage": "source", "lang": source["lang"], "source": source["source"],
                "target": None, "method": None, "task": source["task"]}
    return paths.EVAL.parse(path) or {}


def read_eval_records(paths: list[str | os.PathLike]) -> tuple[list[EvalRecord], list[str]]:
    """Parse the evaluation JSONs that exist; returns (records, paths that do not exist)."""
    present = [str(p) for p in paths if Path(p).is_file()]
    absent = [str(p) for p in paths if not Path(p).is_file()]
    records = [_eval_record(raw) for raw in read_records(present, required=("scores",))]
    return records, absent


def _eval_run(raw: dict[str, Any]) -> dict[str, Any]:
    """stage, lang, source, target, method and task of a results file: its own, else its
    path's; a stage it lacks is an error, and so is a key the stage needs."""
    path = raw["_path"]
    ident = eval_path_identity(path)
    values: dict[str, Any] = {}
    for key in ("stage", "lang", "source", "target", "method", "task"):
        values[key] = raw[key] if raw.get(key) is not None else ident.get(key)
    if values["stage"] not in STAGES:
        raise MalformedResultError(
            f"results file {path}: stage {values['stage']!r} is not one of {list(STAGES)}"
        )
    required = ["lang", "source", "task"]
    if values["stage"] != "source":
        required += ["target", "method"]
    lacking = [k for k in required if not values[k]]
    if lacking:
        raise MalformedResultError(
            f"results file {path}: no {lacking} in the file and none in its path "
            f"(expected .../eval/{{stage}}/{{lang}}/{{source}}/{{target}}/{{method}}/"
            f"{{task}}.json)"
        )
    return values


def _check_eval_fields(raw: dict[str, Any]) -> None:
    """The kind, scores, standard errors, evaluation language and note have their types."""
    path = raw["_path"]
    kind = raw.get("kind")
    if kind not in KINDS:
        raise MalformedResultError(
            f"results file {path}: kind {kind!r} is not one of {list(KINDS)}"
        )
    scores = raw["scores"]
    if not isinstance(scores, dict) or not scores or not all(
        isinstance(k, str) and _finite_number(v) for k, v in scores.items()
    ):
        raise MalformedResultError(
            f"results file {path}: scores must be a non-empty mapping of metric name to "
            f"a finite number, got {scores!r}"
        )
    stderr = raw.get("stderr") or {}
    if not isinstance(stderr, dict) or not all(
        name in scores and (value is None or (_finite_number(value) and value >= 0))
        for name, value in stderr.items()
    ):
        raise MalformedResultError(
            f"results file {path}: stderr must map score names to a finite non-negative "
            f"number or null, got {stderr!r}"
        )
    eval_language = raw.get("eval_language") or "target"
    note = raw.get("note") or ""
    if not isinstance(eval_language, str) or not isinstance(note, str):
        raise MalformedResultError(
            f"results file {path}: eval_language and note must be strings"
        )


def _eval_record(raw: dict[str, Any]) -> EvalRecord:
    """The record of one results file (:func:`read_records`' dict), checked."""
    values = _eval_run(raw)
    _check_eval_fields(raw)
    scores = raw["scores"]
    stderr = raw.get("stderr") or {}
    stage = values["stage"]
    return EvalRecord(
        path=raw["_path"], stage=stage, lang=values["lang"], source=values["source"],
        target=values["target"] if stage != "source" else None,
        method=values["method"] if stage != "source" else None,
        task=str(values["task"]), kind=raw.get("kind"),
        eval_language=raw.get("eval_language") or "target", note=raw.get("note") or "",
        scores={k: float(v) for k, v in scores.items()},
        stderr={k: None if stderr.get(k) is None else float(stderr[k]) for k in scores},
        per_document={k: [float(x) for x in v]
                      for k, v in (raw.get("per_document") or {}).items() if k in scores},
        scoring_protocol=(raw.get("scoring") or {}).get("protocol"),
    )


def lapt_path_identity(path: str | os.PathLike) -> dict[str, str]:
    """(lang, source, target, method) of a LAPT metrics file (:data:`paths.LAPT_METRICS`)."""
    ident = paths.LAPT_METRICS.parse(path)
    if ident is None:
        raise MalformedResultError(
            f"LAPT metrics file {path}: the path is not {paths.LAPT_METRICS}"
        )
    return ident


def read_lapt_metrics(path: str | os.PathLike) -> LaptRun:
    """Parse one metrics.jsonl; a bad line raises naming the file and line number."""
    run = LaptRun(path=str(path), **lapt_path_identity(path))
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise MalformedResultError(f"LAPT metrics file {path} cannot be read: {err}") from err
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"LAPT metrics file {path}, line {number}"
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as err:
            raise MalformedResultError(f"{where} is not JSON: {err}") from err
        if not isinstance(entry, dict):
            raise MalformedResultError(f"{where} is not a JSON object")
        if entry.get("final"):
            loss = entry.get("final_train_loss")
            if loss is not None and not _finite_number(loss):
                raise MalformedResultError(f"{where}: final_train_loss {loss!r} is not a number")
            run.final = entry
        elif "eval_loss" in entry:
            loss, fraction = entry.get("eval_loss"), entry.get("fraction")
            if not (_finite_number(loss) and _finite_number(fraction)):
                raise MalformedResultError(
                    f"{where}: eval_loss and fraction must be numbers, got {entry!r}"
                )
            run.evals[round(float(fraction), 6)] = float(loss)
        elif "train_loss" in entry:
            step, loss = entry.get("step"), entry.get("train_loss")
            if not (_finite_number(step) and _finite_number(loss)):
                raise MalformedResultError(
                    f"{where}: step and train_loss must be finite numbers, got {entry!r}"
                )
            run.train.append((int(step), float(loss)))
    return run


def read_lapt_runs(paths: list[str | os.PathLike]) -> tuple[list[LaptRun], list[str]]:
    """Parse the metrics files that exist; returns (runs, paths that do not exist)."""
    runs = [read_lapt_metrics(p) for p in paths if Path(p).is_file()]
    return runs, [str(p) for p in paths if not Path(p).is_file()]


def read_coverage(path: str | os.PathLike) -> dict[str, Any]:
    """One coverage.json (copied, initialized, coverage_pct, optional corpus_coverage_pct)."""
    record = read_records([path], required=("copied", "initialized", "coverage_pct"))[0]
    for key in ("copied", "initialized", "coverage_pct"):
        if not _finite_number(record[key]):
            raise MalformedResultError(
                f"results file {path}: {key} is {record[key]!r}, not a number"
            )
    return record


def zeroshot_identity(path: str | os.PathLike) -> tuple[str, str, str, str]:
    """(lang, source, target, method) of a zero-shot record (:data:`paths.ZEROSHOT`)."""
    ident = paths.ZEROSHOT.parse(path)
    if ident is None:
        raise MalformedResultError(f"zero-shot record {path}: the path is not {paths.ZEROSHOT}")
    return ident["lang"], ident["source"], ident["target"], ident["method"]


def coverage_identity(path: str | os.PathLike) -> tuple[str, str]:
    """(source, target) of a coverage record (:data:`paths.COVERAGE`)."""
    ident = paths.COVERAGE.parse(path)
    if ident is None:
        raise MalformedResultError(f"coverage file {path}: the path is not {paths.COVERAGE}")
    return ident["source"], ident["target"]


def read_zeroshot(path: str | os.PathLike) -> dict[str, Any]:
    """One zero-shot record; its ``tokens`` and ``bytes`` must be positive numbers."""
    record = read_records([path], required=("loss", "bits_per_byte", "tokens", "bytes"))[0]
    for key in ("tokens", "bytes"):
        if not (_finite_number(record[key]) and record[key] > 0):
            raise MalformedResultError(
                f"results file {path}: {key} is {record[key]!r}, not a positive number"
            )
    return record


def read_reference(path: str | os.PathLike) -> dict[tuple[str, ...], float]:
    """The paper's numbers, keyed (table, source_model, target_arch, method, lang, metric, note)."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            columns = tuple(reader.fieldnames or ())
            rows = list(reader)
    except (OSError, csv.Error, UnicodeDecodeError) as err:
        raise MalformedResultError(f"reference file {path} cannot be read: {err}") from err
    lacking = [c for c in REFERENCE_COLUMNS if c not in columns]
    if lacking:
        raise MalformedResultError(f"reference file {path} lacks the columns {lacking}")
    reference: dict[tuple[str, ...], float] = {}
    for number, row in enumerate(rows, start=2):
        key = tuple((row[c] or "").strip() for c in REFERENCE_COLUMNS if c != "value")
        try:
            value = float(row["value"])
        except (TypeError, ValueError) as err:
            raise MalformedResultError(
                f"reference file {path}, line {number}: value {row['value']!r} is not a number"
            ) from err
        if key in reference:
            raise MalformedResultError(f"reference file {path}, line {number}: duplicate {key}")
        reference[key] = value
    return reference
