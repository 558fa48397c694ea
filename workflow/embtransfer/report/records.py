"""Read the result files the report is built from, each named by a template of
:mod:`embtransfer.core.paths` that also gives its run's identity: evaluation JSONs (held to
:mod:`embtransfer.evaluation.record`'s contract, an identity key a file lacks taken from its
path), LAPT metrics, coverage, zero-shot records (whose tokens and bytes turn Table 5's LAPT
eval loss into bits per byte) and the paper's numbers (``salt_paper_tables.csv``). A file
that exists but cannot be read as what it should be raises :class:`MalformedResultError`
naming it; a missing file is no error here: the tables say "missing" and list it.
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
from embtransfer.evaluation.record import ScoreError, check_record

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
    seed: str = ""  # the replicate seed (paths.SEEDED)
    train: list[tuple[int, float]] = field(default_factory=list)  # (step, train_loss)
    evals: dict[float, float] = field(default_factory=dict)  # fraction -> eval_loss
    final: dict[str, Any] | None = None


def _numbers(record: dict[str, Any], keys: tuple[str, ...], where: str,
             positive: bool = False) -> list[float]:
    """``record``'s values at ``keys`` as floats; one that is not a finite number (a positive
    one when ``positive``) raises naming ``where``."""
    for key in keys:
        value = record.get(key)
        if (isinstance(value, bool) or not isinstance(value, int | float)
                or not math.isfinite(value) or (positive and value <= 0)):
            kind = "positive" if positive else "finite"
            raise MalformedResultError(f"{where}: {key} is {value!r}, not a {kind} number")
    return [float(record[key]) for key in keys]


def identity(template: paths.Template, path: str | os.PathLike, what: str) -> dict[str, str]:
    """The wildcards of ``path``, ``what`` (with its article) named by ``template``."""
    ident = template.parse(path)
    if ident is None:
        raise MalformedResultError(f"{path} is not {what}: the path is not {template}")
    return ident


def lapt_path_identity(path: str | os.PathLike) -> dict[str, str]:
    """(seed, lang, source, target, method) of a LAPT metrics file (:data:`paths.LAPT_METRICS`)."""
    return identity(paths.LAPT_METRICS, path, "a LAPT metrics file")


def zeroshot_identity(path: str | os.PathLike) -> tuple[str, ...]:
    """(lang, source, target, method) of a zero-shot record (:data:`paths.ZEROSHOT`)."""
    ident = identity(paths.ZEROSHOT, path, "a zero-shot record")
    return tuple(ident[k] for k in ("lang", "source", "target", "method"))


def coverage_identity(path: str | os.PathLike) -> tuple[str, ...]:
    """(source, target) of a coverage record (:data:`paths.COVERAGE`)."""
    return tuple(identity(paths.COVERAGE, path, "a coverage file").values())


def eval_path_identity(path: str | os.PathLike) -> dict[str, str | None]:
    """Run identity from an evaluation path (:data:`paths.EVAL` or :data:`paths.EVAL_SOURCE`,
    under any results folder)."""
    if (source := paths.EVAL_SOURCE.parse(path)) is not None:
        return {"stage": "source", "target": None, "method": None, **source}
    if (ident := paths.EVAL.parse(path)) is None:
        raise MalformedResultError(f"evaluation input {path} is neither {paths.EVAL} nor "
                                   f"{paths.EVAL_SOURCE}")
    return ident


def read_eval_records(paths: list[str | os.PathLike]) -> tuple[list[EvalRecord], list[str]]:
    """Parse the evaluation JSONs that exist, each checked by :func:`check_record` once an
    identity key the file lacks (or holds as null) is taken from its path; returns (records,
    paths that do not exist)."""
    records = []
    for raw in read_records([p for p in paths if Path(p).is_file()], required=()):
        path = raw.pop("_path")
        record = {**raw, **{k: v for k, v in eval_path_identity(path).items()
                            if raw.get(k) is None}}
        try:
            check_record(record)
        except ScoreError as err:
            raise MalformedResultError(f"results file {path}: {err}") from err
        records.append(EvalRecord(
            path=path, stage=record["stage"], lang=record["lang"], source=record["source"],
            target=record["target"], method=record["method"], task=record["task"],
            kind=record["kind"], eval_language=record["eval_language"], note=record["note"],
            scores={k: float(v) for k, v in record["scores"].items()},
            stderr={k: None if v is None else float(v) for k, v in record["stderr"].items()},
            per_document={k: [float(x) for x in v] for k, v in
                          (record.get("per_document") or {}).items() if k in record["scores"]},
            scoring_protocol=(record.get("scoring") or {}).get("protocol"),
        ))
    return records, [str(p) for p in paths if not Path(p).is_file()]


def read_lapt_metrics(path: str | os.PathLike) -> LaptRun:
    """Parse one metrics.jsonl; a bad line raises naming the file and line number."""
    run = LaptRun(path=str(path), **lapt_path_identity(path))
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise MalformedResultError(f"LAPT metrics file {path} cannot be read: {err}") from err
    for number, line in enumerate(text.splitlines(), start=1):
        where = f"LAPT metrics file {path}, line {number}"
        try:
            entry = json.loads(line) if line.strip() else {}  # a blank line holds nothing
        except json.JSONDecodeError as err:
            raise MalformedResultError(f"{where} is not JSON: {err}") from err
        if not isinstance(entry, dict):
            raise MalformedResultError(f"{where} is not a JSON object")
        if entry.get("final"):
            if entry.get("final_train_loss") is not None:
                _numbers(entry, ("final_train_loss",), where)
            run.final = entry
        elif "eval_loss" in entry:
            loss, fraction = _numbers(entry, ("eval_loss", "fraction"), where)
            run.evals[round(fraction, 6)] = loss
        elif "train_loss" in entry:
            step, loss = _numbers(entry, ("step", "train_loss"), where)
            run.train.append((int(step), loss))
    return run


def read_coverage(path: str | os.PathLike) -> dict[str, Any]:
    """One coverage.json (copied, initialized, coverage_pct, optional corpus_coverage_pct)."""
    keys = ("copied", "initialized", "coverage_pct")
    record = read_records([path], required=keys)[0]
    _numbers(record, keys, f"results file {path}")
    return record


def read_zeroshot(path: str | os.PathLike) -> dict[str, Any]:
    """One zero-shot record; its ``tokens`` and ``bytes`` must be positive numbers."""
    record = read_records([path], required=("loss", "bits_per_byte", "tokens", "bytes"))[0]
    _numbers(record, ("tokens", "bytes"), f"results file {path}", positive=True)
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
        if key in reference:
            raise MalformedResultError(f"reference file {path}, line {number}: duplicate {key}")
        try:
            reference[key] = float(row["value"])
        except (TypeError, ValueError) as err:
            raise MalformedResultError(
                f"reference file {path}, line {number}: value {row['value']!r} is not a number"
            ) from err
    return reference
