"""Config checks of the evaluation section (task names against lm-eval's index).

Run by :func:`embtransfer.config.validation.validate_config` when the config is read,
before any job: an unknown task key, a language a task has no version for, or a task name
the installed lm-eval does not know stops the run with a message naming the config key.
lm-eval's index is consulted (through the on-disk cache of
:mod:`embtransfer.evaluation.taskindex`) only when the config asks for stock lm-eval tasks.
"""

from __future__ import annotations

from typing import Any

from embtransfer.core.errors import ConfigError
from embtransfer.core.grid import evaluation_languages
from embtransfer.evaluation import taskindex  # the module: tests replace its index
from embtransfer.evaluation.task_catalog import CATALOG, SHIPPED_TASK_DIR, resolve


def check_evaluation(config: dict[str, Any]) -> None:
    """Raise ConfigError for a bad ``evaluation`` section."""
    ev = config.get("evaluation")
    if not ev:
        return
    _check_names(config, ev)
    stock = _check_task_languages(config, ev.get("tasks", []))
    if stock:
        _check_stock(stock)


def _check_names(config: dict[str, Any], ev: dict[str, Any]) -> None:
    """Languages, tasks, few-shot keys and the selection name what the config defines."""
    languages = config["languages"]
    for lang in ev.get("languages", {}):
        if lang not in languages:
            raise ConfigError(
                f"config key evaluation.languages.{lang}: {lang!r} is not defined under "
                f"languages (defined: {', '.join(sorted(languages))})"
            )
    tasks = ev.get("tasks", [])
    for key in tasks:
        if key not in CATALOG:
            raise ConfigError(
                f"config key evaluation.tasks: unknown task {key!r}; known tasks: "
                f"{', '.join(sorted(CATALOG))}"
            )
    for key in ev.get("num_fewshot", {}):
        if key not in tasks:
            raise ConfigError(
                f"config key evaluation.num_fewshot.{key}: {key!r} is not in evaluation.tasks"
            )
    select = ev.get("select", {})
    known = {"sources": set(config["sources"]),
             "targets": {t for plms in config["targets"].values() for t in plms},
             "methods": set(config.get("transfer", {}).get("methods", []))}
    for field, values in select.items():
        for value in values or []:
            if value not in known[field]:
                raise ConfigError(
                    f"config key evaluation.select.{field}: {value!r} is not one of the "
                    f"configured {field} ({', '.join(sorted(known[field]))})"
                )


def _check_task_languages(config: dict[str, Any], tasks: list[str]) -> dict[str, str]:
    """Each task has a version for each evaluation language; returns the stock lm-eval
    tasks to look up (task name -> what asks for it)."""
    world_languages = set((config.get("world") or {}).get("languages") or {})
    stock: dict[str, str] = {}
    for key in tasks:
        bench = CATALOG[key]
        for lang in evaluation_languages(config):
            if bench.source == "world":
                # Built from the world JSON: the language must be one of the world's (its
                # corpus may still come from elsewhere).
                if lang not in world_languages:
                    raise ConfigError(
                        f"config key evaluation.tasks: task {key!r} is a miniature-world "
                        f"benchmark, but language {lang!r} is not a language of the miniature "
                        f"world (world.languages: {', '.join(sorted(world_languages)) or '-'})"
                    )
                continue
            try:
                spec = resolve(config, key, lang)
            except LookupError as err:
                raise ConfigError(
                    f"config key evaluation.tasks: {err} (needed for target language "
                    f"{lang!r}; set its lm-eval language code in evaluation.languages.{lang} "
                    f"or drop the task)"
                ) from None
            if bench.source == "stock":
                stock.setdefault(spec.lm_eval_task, f"{key} for language {lang!r}")
            elif bench.source == "shipped":
                _check_shipped(spec.lm_eval_task, key, lang)
    return stock


def _check_stock(stock: dict[str, str]) -> None:
    """The installed lm-eval knows each stock task (its index, cached on disk)."""
    index = taskindex.stock_task_index()
    for name, what in stock.items():
        if name not in index:
            raise ConfigError(
                f"config key evaluation.tasks: lm-eval has no task {name!r} (task {what}); "
                "is it a newer lm-eval task? (the installed lm-eval's task index is "
                "cached in ~/.cache/embtransfer)"
            )


def _check_shipped(name: str, key: str, lang: str) -> None:
    if not any(SHIPPED_TASK_DIR.glob(f"*/{name}.yaml")):
        raise ConfigError(
            f"config key evaluation.tasks: task {key!r} for language {lang!r} needs "
            f"{name}.yaml under {SHIPPED_TASK_DIR}, which is missing"
        )
