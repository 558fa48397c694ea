"""What the evaluation stage's rules (workflow/rules/evaluation.smk) read: each evaluated
checkpoint and the benchmarks and datasets its tasks need, the jobs' options and
identities, the tokenizer statistics' and alignment's inputs, and the evaluation files the
run asks for. Functions of the validated config, importable and tested without Snakemake
(tests/test_rule_inputs.py)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from embtransfer.core import paths
from embtransfer.core.grid import (
    alignment_groups,
    evaluated_runs,
    evaluated_sources,
    floor_sources,
    held_out_dictionary,
    lapt_runs,
    model_wildcards,
    real_pairs,
    seeds,
    target_models,
    transfer_runs,
    world_pairs,
)
from embtransfer.evaluation.task_catalog import (
    CATALOG,
    shipped_tasks_hash,
    spec_dicts,
    world_task_keys,
)
from embtransfer.models.inputs import model_dir, tokenizer_dir

# The name (log and benchmark paths) of one evaluated checkpoint's job, and a source model's.
CHECKPOINT_JOB = "seed{seed}/{stage}/{lang}/{source}/{target}/{method}"
SOURCE_JOB = "source/{lang}/{source}"
# The evaluate rule's knobs the evaluation script takes as one dict.
OPTION_KEYS = ("device", "batch_size", "limit", "max_length")


def per_task(config: dict[str, Any]) -> bool:
    """Whether each (checkpoint, task) is a job of its own (`evaluation.jobs: task`) rather
    than each checkpoint (the model and lm-eval then load once for all its tasks)."""
    return config["evaluation"]["jobs"] == "task"


def job_name(config: dict[str, Any], name: str) -> str:
    """``name`` (CHECKPOINT_JOB, SOURCE_JOB) of an evaluate job, with its task if per task."""
    return f"{name}/{{task}}" if per_task(config) else name


def evaluation_outputs(config: dict[str, Any], template: paths.Template) -> list[str]:
    """An evaluate job's result files (``template``: paths.EVAL or paths.EVAL_SOURCE)."""
    if per_task(config):
        return [template]
    return [template.fill(task=task) for task in config["evaluation"]["tasks"]]


def evaluation_options(config: dict[str, Any]) -> dict[str, Any]:
    evaluation = config["evaluation"]
    return {k: evaluation[k] for k in OPTION_KEYS} | {"nfc": evaluation["scoring"]["nfc"]}


def evaluation_resources(config: dict[str, Any]) -> dict[str, int]:
    """An evaluate job's resources: a GPU unless it runs on the CPU."""
    resources = {"mem_mb": 8000, "runtime": 120}
    if config["evaluation"]["device"] != "cpu":
        resources["gpu"] = 1
    return resources


def shipped_tasks_code(config: dict[str, Any]) -> str:
    # The shipped task configs are code too (their scoring is the runner's): hashed into
    # the evaluate rule's params when a shipped task is evaluated.
    if any(CATALOG[k].source == "shipped" for k in config["evaluation"]["tasks"]):
        return shipped_tasks_hash()
    return ""


def eval_checkpoint(config: dict[str, Any], wildcards: Mapping[str, str]) -> str:
    """The evaluated checkpoint: the source LLM, a transferred or a LAPT checkpoint."""
    stage = wildcards.get("stage", "source")
    if stage == "source":
        return model_dir(config, wildcards["source"])
    if stage == "lapt":
        return paths.LAPT_MODEL.fill(**wildcards)
    return paths.TRANSFER_MODEL.fill(**wildcards)


def hub_datasets(config: dict[str, Any], keys: Iterable[str]) -> dict[str, str]:
    # Stock and shipped tasks read their datasets from evaluation.datasets_dir, which the
    # local download rule fills (data.smk), so compute jobs run offline.
    if any(CATALOG[k].source != "world" for k in keys):
        return {"datasets": paths.lm_eval_index(config["evaluation"]["datasets_dir"])}
    return {}


def world_benchmark_inputs(config: dict[str, Any], wildcards: Mapping[str, str]) -> dict:
    # world_words keeps the choices that no (source, target) pair of the language shares a
    # token of: the world, and each pair's target tokenizer and overlap, in the same order.
    pairs = [(s, t) for lang, s, t in world_pairs(config) if lang == wildcards["lang"]]
    return {
        "world": paths.WORLD,
        "tokenizers": [tokenizer_dir(config, t) for _, t in pairs],
        "overlaps": [paths.OVERLAP.fill(source=s, target=t) for s, t in pairs],
    }


def job_tasks(config: dict[str, Any], wildcards: Mapping[str, str]) -> list[str]:
    """The tasks of one evaluate job: its `{task}`, else every task of the config."""
    if "task" in wildcards.keys():
        return [wildcards["task"]]
    return config["evaluation"]["tasks"]


def eval_inputs(config: dict[str, Any], wildcards: Mapping[str, str]) -> dict[str, str]:
    """The evaluate rule's inputs: the checkpoint, the world's benchmarks for world tasks,
    the downloaded datasets for the others."""
    inputs = {"model": eval_checkpoint(config, wildcards)}
    keys = job_tasks(config, wildcards)
    if any(CATALOG[k].source == "world" for k in keys):
        inputs["benchmarks"] = paths.WORLD_BENCHMARKS.fill(lang=wildcards["lang"])
    return inputs | hub_datasets(config, keys)


def eval_meta(wildcards: Mapping[str, str]) -> dict[str, str | None]:
    """Who was evaluated, as the result JSONs record it."""
    stage = wildcards.get("stage", "source")
    return {
        "stage": stage,
        "lang": wildcards["lang"],
        "source": wildcards["source"],
        "target": wildcards["target"] if stage != "source" else None,
        "method": wildcards["method"] if stage != "source" else None,
    }


def eval_specs(config: dict[str, Any], wildcards: Mapping[str, str]) -> list[dict[str, Any]]:
    """The resolved specs of one evaluate job's tasks."""
    return spec_dicts(config, wildcards["lang"], job_tasks(config, wildcards))


def tokenizer_stats_models(config: dict[str, Any], lang: str) -> dict[str, str]:
    """model -> role (source/target) of the tokenizers compared on ``lang``'s eval sets."""
    models = {s: "source" for s in config["sources"]}
    models.update({t: "target" for t in target_models(config, lang)})
    return models


def tokenizer_stats_inputs(config: dict[str, Any], wildcards: Mapping[str, str]) -> dict:
    lang = wildcards["lang"]
    inputs = {
        "tokenizers": [tokenizer_dir(config, m) for m in tokenizer_stats_models(config, lang)],
        "valid": paths.CORPUS.fill(lang=lang, split="valid"),
    }
    if world_task_keys(config):
        inputs["benchmarks"] = paths.WORLD_BENCHMARKS.fill(lang=lang)
    return inputs | hub_datasets(config, config["evaluation"]["tasks"])


def all_evaluation(config: dict[str, Any]) -> list[str]:
    """The lm-eval result JSONs (the report's inputs): every evaluated checkpoint x task."""
    tasks = config["evaluation"]["tasks"]
    files = [
        paths.EVAL.fill(stage=stage, **r._asdict(), task=task)
        for stage in ("transfer", "lapt")
        for r in evaluated_runs(config, stage)
        for task in tasks
    ]
    files += [
        paths.EVAL_SOURCE.fill(lang=lang, source=source, task=task)
        for lang, source in evaluated_sources(config)
        for task in tasks
    ]
    return files


def alignment_methods(config: dict[str, Any], wildcards: Mapping[str, str]) -> list[str]:
    """The methods of one alignment job's (stage, language, source, target), in run order."""
    runs = transfer_runs(config) if wildcards["stage"] == "transfer" else lapt_runs(config)
    pair = (wildcards["lang"], wildcards["source"], wildcards["target"], int(wildcards["seed"]))
    return [r.method for r in runs if (r.lang, r.source, r.target, r.seed) == pair]


def alignment_inputs(config: dict[str, Any], wildcards: Mapping[str, str]) -> dict:
    model = paths.TRANSFER_MODEL if wildcards["stage"] == "transfer" else paths.LAPT_MODEL
    plm = model_wildcards(wildcards)
    return {
        "source": model_dir(config, wildcards["source"]),
        "source_vocab": paths.VOCAB.fill(model=wildcards["source"]),
        # an extended checkpoint's rows are read by the target's tokens (target_rows)
        "target_tokenizer": tokenizer_dir(config, plm["target"]),
        # a real language's truth is its dictionary's held-out half, the world's its lexicon
        "truth": (
            paths.DICTIONARY_TRUTH if held_out_dictionary(config, wildcards["lang"])
            else paths.WORLD_TRUTH
        ).fill(**plm),
        "checkpoints": [
            model.fill(**wildcards, method=m) for m in alignment_methods(config, wildcards)
        ],
    }


def all_alignment(config: dict[str, Any]) -> list[str]:
    return [
        paths.ALIGNMENT.fill(stage=stage, **r._asdict()) for stage, r in alignment_groups(config)
    ]


def all_plm_probes(config: dict[str, Any]) -> list[str]:
    """The target-PLM probes (evaluation/plm_probes.py) of every world pair, and of every
    pair of a real-text run (the span probe only: real text has no concept classes)."""
    return [
        paths.PLM_PROBE.fill(lang=lang, source=source, target=target, seed=seed)
        for seed in seeds(config)
        for lang, source, target in world_pairs(config) + real_pairs(config)
    ]


def plm_probe_inputs(config: dict[str, Any], wildcards: Mapping[str, str]) -> dict[str, str]:
    """What one PLM's probes read besides SALT's neighbour table (the rule names it): its
    rows and the pair's overlap (the span probe), and for a world pair the world's truth
    and concept classes (the class probe)."""
    inputs = {
        "plm": model_dir(config, wildcards["target"]),
        "overlap": paths.OVERLAP.fill(source=wildcards["source"], target=wildcards["target"]),
    }
    pair = (wildcards["lang"], wildcards["source"], wildcards["target"])
    if pair in world_pairs(config):
        inputs |= {"truth": paths.WORLD_TRUTH.fill(**wildcards), "world": paths.WORLD}
    return inputs


def all_intrinsic(config: dict[str, Any]) -> list[str]:
    """Held-out loss of the LAPT checkpoints, the tokenizer statistics, and the count-model
    floor of each source pretrained here on real text."""
    files = all_source_floors(config) + all_lapt_zeroshot(config)
    if config["evaluation"]["tokenizer_stats"]:
        files += [paths.TOKENIZER_STATS.fill(lang=lang) for lang in config["targets"]]
    return files


def all_lapt_zeroshot(config: dict[str, Any]) -> list[str]:
    """The final LAPT checkpoints' zero-shot records (rule lapt_zeroshot), when
    ``evaluation.lapt_zeroshot`` is on: the report's LAPT comparison reads them."""
    if not config["evaluation"]["lapt_zeroshot"]:
        return []
    return [paths.LAPT_ZEROSHOT.fill(**r._asdict()) for r in evaluated_runs(config, "lapt")]


def all_source_floors(config: dict[str, Any]) -> list[str]:
    return [paths.SOURCE_FLOOR.fill(source=s) for s in floor_sources(config)]
