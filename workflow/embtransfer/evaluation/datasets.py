"""The lm-eval tasks' datasets as local files: one place they are written and read from.

Layout of the datasets directory (config ``evaluation.datasets_dir``, default
``resources/lm_eval_datasets``)::

    {datasets_dir}/{dataset_path}/{dataset_name or "default"}/{split}.jsonl
    e.g. resources/lm_eval_datasets/facebook/mlqa/mlqa.de.en/test.jsonl
         resources/lm_eval_datasets/alexandrainst/m_arc/de/{train,val,test}.jsonl

one JSON object per line with the hub dataset's own columns, one file per split the hub
dataset has, under the hub's split names. The download rule (``fetch_lm_eval_datasets``)
writes it by building each task once with lm-eval (which downloads the dataset) and saving
the raw splits (:func:`export_task_dataset`); a site without hub access copies a directory
made that way, or writes the files itself in the same layout.

Evaluation reads it: every stock or shipped task runs with its own lm-eval config, except
that ``dataset_path``/``dataset_name``/``dataset_kwargs`` point ``datasets``' JSON loader
at these files (:func:`local_dataset_overrides`). Nothing is read from the hub or from the
``datasets`` cache, so what is evaluated is exactly what the directory holds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from embtransfer.core.atomic import atomic_path

DEFAULT_NAME = "default"  # directory of a dataset without a config name
SUFFIX = ".jsonl"


class DatasetMissing(FileNotFoundError):
    """A task's dataset is not in the datasets directory; the message says how to fill it."""


def dataset_dir(root: str | Path, dataset_path: str, dataset_name: str | None) -> Path:
    """Where dataset ``dataset_path`` (a hub id such as ``facebook/mlqa``), config
    ``dataset_name``, lives under ``root``."""
    if not dataset_path or Path(dataset_path).is_absolute() or ".." in Path(dataset_path).parts:
        raise ValueError(f"dataset_path {dataset_path!r} is not a hub dataset id")
    return Path(root) / dataset_path / (dataset_name or DEFAULT_NAME)


def local_splits(directory: Path) -> dict[str, Path]:
    """``{split: file}`` of the JSONL files in ``directory``."""
    if not directory.is_dir():
        return {}
    return {p.name[: -len(SUFFIX)]: p for p in sorted(directory.glob(f"*{SUFFIX}"))}


def task_config(manager: Any, name: str) -> dict[str, Any]:
    """The full config of registered lm-eval task ``name`` (its YAML with includes and
    ``!function`` references resolved), as lm-eval would build it."""
    # the Snakefile imports this module (through download)
    from lm_eval.tasks._yaml_loader import load_yaml  # noqa: PLC0415 (Snakefile start-up)

    entry = manager.task_index.get(name)
    if entry is None or entry.yaml_path is None:
        raise KeyError(f"lm-eval task {name!r} has no YAML config in the task index")
    return dict(load_yaml(entry.yaml_path, resolve_func=True))


def used_splits(cfg: dict[str, Any]) -> list[str]:
    """The split names a task config names (training, validation, test, few-shot)."""
    keys = ("training_split", "validation_split", "test_split", "fewshot_split")
    return sorted({cfg[k] for k in keys if cfg.get(k)})


def local_dataset_overrides(cfg: dict[str, Any], root: str | Path,
                            cache_dir: str | Path | None = None) -> dict[str, Any]:
    """Task-config overrides that load ``cfg``'s dataset from ``root`` (the JSON loader,
    one data file per split present). Raises :class:`DatasetMissing` when the directory
    holds no split or misses the split the task evaluates on."""
    path, name = cfg.get("dataset_path"), cfg.get("dataset_name")
    directory = dataset_dir(root, path, name)
    splits = local_splits(directory)
    eval_split = cfg.get("test_split") or cfg.get("validation_split")
    if not splits or (eval_split and eval_split not in splits):
        raise DatasetMissing(
            f"lm-eval task {cfg.get('task')!r}: dataset {path!r} (config {name!r}) is not in "
            f"the datasets directory: expected {directory}/{{split}}{SUFFIX} for split "
            f"{eval_split!r} (the task names splits {used_splits(cfg)}; found "
            f"{sorted(splits) or 'none'}). Fill evaluation.datasets_dir with "
            f"`snakemake --cores 1 fetch_lm_eval_datasets` on a machine with hub access, "
            f"or write the hub dataset's splits there as JSON lines in that layout."
        )
    kwargs: dict[str, Any] = {"data_files": {s: str(p) for s, p in splits.items()}}
    if cache_dir is not None:
        kwargs["cache_dir"] = str(cache_dir)
    return {"dataset_path": "json", "dataset_name": None, "dataset_kwargs": kwargs}


def export_task_dataset(task: Any, root: str | Path) -> list[Path]:
    """Write every split of a built lm-eval task's raw dataset (``task.dataset``, before
    ``process_docs``) under ``root`` in the layout above, atomically. Returns the files."""
    cfg = task.config
    directory = dataset_dir(root, cfg.dataset_path, cfg.dataset_name)
    written = []
    for split, data in task.dataset.items():
        path = directory / f"{split}{SUFFIX}"
        with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as out:
            for row in data:
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
        written.append(path)
    return written
