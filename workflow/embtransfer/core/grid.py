"""The experiment grid: which (language, source, target PLM, method) runs each stage makes.

One place for the selection, so the rules, the report and the dry-run tests agree
on what exists: the (language, source, target) pairs, the transferred and LAPT runs, the
evaluated checkpoints and source models, and the report's :class:`Grid` (the rows its
tables should have). Where each run's files lie: :mod:`embtransfer.core.paths`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from embtransfer.core.vocab_modes import VOCAB_MODES, method_modes

#: The checkpoint stages, in pipeline order: the untouched source LLM, the transferred
#: checkpoint, the LAPT checkpoint.
STAGES = ("source", "transfer", "lapt")


class Run(NamedTuple):
    lang: str
    source: str
    target: str
    method: str
    #: The replicate seed the run's seed-dependent artifacts are drawn with (:func:`seeds`).
    seed: int


def seeds(config: dict[str, Any]) -> list[int]:
    """The replicate seeds (``seeds``; absent: ``[seed]``), the primary first. Every stage
    that depends on a draw but not on pretraining runs once per seed (paths under
    ``results/seed<N>/``); the world, the corpora and the pretrained models stay fixed."""
    return [int(s) for s in config.get("seeds") or [config.get("seed", 0)]]


def primary_seed(config: dict[str, Any]) -> int:
    """The seed LAPT, the lm-eval benchmarks and the paper tables run for."""
    return seeds(config)[0]


#: A target written ``<model>@<mode>`` under ``targets`` is a setting of that target PLM in that
#: vocabulary mode (``gpt2_de@extend``); a bare name takes ``transfer.vocab_mode``. The name
#: as written is the setting's ``target`` in paths, runs and the report; what is the model's
#: own (its vocabulary, the overlap, neighbour tables, SALT's regression) is read by model.
MODE_SEPARATOR = "@"


def target_model(target: str) -> str:
    """The target PLM of a setting's target name (``gpt2_de@extend`` -> ``gpt2_de``)."""
    return target.split(MODE_SEPARATOR, 1)[0]


def written_mode(target: str) -> str | None:
    """The vocabulary mode a target name states (``@extend``), None for a bare name."""
    return target.split(MODE_SEPARATOR, 1)[1] if MODE_SEPARATOR in target else None


def target_mode(config: dict[str, Any], target: str) -> str:
    """The vocabulary mode of a setting: the one its name states, else ``transfer.vocab_mode``."""
    mode = written_mode(target) or config["transfer"].get("vocab_mode", "replace")
    if mode not in VOCAB_MODES:
        raise ValueError(f"target {target!r}: vocabulary mode {mode!r} is not one of "
                         f"{', '.join(VOCAB_MODES)}")
    return mode


def model_wildcards(wildcards: Any) -> dict[str, str]:
    """A rule's wildcards with the setting's target name replaced by its PLM: the name the
    model's own artifacts (vocabulary, overlap, neighbours, regression, held-out split) carry."""
    values = dict(wildcards)
    if "target" in values:
        values["target"] = target_model(values["target"])
    return values


def target_settings(config: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Every (language, source model, target name) setting of the experiment grid: a target
    PLM once per vocabulary mode it is written with."""
    return [
        (lang, source, target)
        for lang, plms in config["targets"].items()
        for source in config["sources"]
        for target in plms
    ]


def target_models(config: dict[str, Any], lang: str | None = None) -> list[str]:
    """The target PLMs (of ``lang``, or of every language), each once, in config order."""
    langs = [lang] if lang is not None else list(config["targets"])
    return list(dict.fromkeys(target_model(t) for one in langs for t in config["targets"][one]))


def target_pairs(config: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Every (language, source model, target PLM) combination of the experiment grid, each
    once however many vocabulary modes its settings take (:func:`target_settings`)."""
    return list(dict.fromkeys(
        (lang, source, target_model(target)) for lang, source, target in target_settings(config)
    ))


def _chosen(run: Run, group: dict[str, Any]) -> bool:
    """Whether ``run`` is in ``group``: the product of its sources, targets and methods
    (a missing or null key = all of the grid's)."""
    return all(
        group.get(key) is None or value in group[key]
        for key, value in (("sources", run.source), ("targets", run.target),
                           ("methods", run.method))
    )


def _selected(runs: list[Run], groups: list[dict[str, Any]] | None) -> list[Run]:
    """The runs in the union of ``groups`` (all when there are none), in grid order."""
    groups = groups or [{}]
    return [run for run in runs if any(_chosen(run, g) for g in groups)]


def _selected_runs(config: dict[str, Any]) -> list[Run]:
    """The union of ``transfer.select``'s groups of the product language x source x target
    PLM x method (no groups: the whole product), once per seed (the primary's first)."""
    grid = [
        Run(lang, source, target, method, seed)
        for seed in seeds(config)
        for lang, source, target in target_settings(config)
        for method in config["transfer"]["methods"]
        # a method runs in the settings whose vocabulary mode it works in
        if target_mode(config, target) in method_modes(method)
    ]
    return _selected(grid, config["transfer"].get("select"))


def gpu_declared(config: dict[str, Any]) -> bool:
    """Whether the run declares a GPU for its transfers (``transfer.device: cuda``); ``auto``
    does not, since where the jobs will run is not known when the run is planned."""
    return config["transfer"].get("device") == "cuda"


def _left_to_gpu(config: dict[str, Any], run: Run) -> bool:
    """Whether ``run`` is in one of ``transfer.gpu_only``'s groups."""
    return any(_chosen(run, g) for g in config["transfer"].get("gpu_only") or [])


def gpu_only_runs(config: dict[str, Any]) -> list[Run]:
    """The selected runs in ``transfer.gpu_only``'s groups: transfers too costly for a CPU
    run (OMP on the largest pair of config/real_text.yaml), planned only where
    :func:`gpu_declared`."""
    return [run for run in _selected_runs(config) if _left_to_gpu(config, run)]


def gpu_only_note(config: dict[str, Any]) -> str | None:
    """The line a CPU run prints about the transfers it leaves to a GPU run; None when there
    are none (or the run declares a GPU)."""
    left = [] if gpu_declared(config) else gpu_only_runs(config)
    if not left:
        return None
    # one name per combination, however many seeds repeat it
    names = ", ".join(dict.fromkeys(f"{r.lang} {r.target} {r.method}" for r in left))
    return (f"transfer.gpu_only: {len(left)} transfer(s) left out, as transfer.device is not "
            f"cuda: {names}")


def transfer_runs(config: dict[str, Any]) -> list[Run]:
    """Every transferred checkpoint: the union of ``transfer.select``'s groups of the product
    language x source x target PLM x method (no groups: the whole product), less
    :func:`gpu_only_runs` where the run declares no GPU; once per seed."""
    runs = _selected_runs(config)
    if gpu_declared(config):
        return runs
    return [run for run in runs if not _left_to_gpu(config, run)]


def lapt_runs(config: dict[str, Any]) -> list[Run]:
    """The transferred checkpoints that are trained further: the union of ``lapt.select``'s
    groups (each a product of sources x targets x methods; null = all), in grid order, of
    the primary seed only. Empty when LAPT is disabled."""
    lapt = config.get("lapt", {})
    if not lapt.get("enabled", True):
        return []
    primary = [run for run in transfer_runs(config) if run.seed == primary_seed(config)]
    return _selected(primary, lapt.get("select"))


def world_pairs(config: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The (language, source, target) pairs the miniature world knows the truth of: its own
    language and models (:mod:`embtransfer.world.truth`, the alignment metric)."""
    def mini(model: str) -> bool:
        return config["models"][model].get("type") == "mini"

    return [(lang, source, target) for lang, source, target in target_pairs(config)
            if config["languages"][lang]["corpus"]["type"] == "mini"
            and mini(source) and mini(target)]


def floor_sources(config: dict[str, Any]) -> list[str]:
    """The sources pretrained here on real text (a ``mini`` source whose language is not a
    miniature one): each is checked against the count-model floor (rule source_floor)."""
    return [
        source
        for source in config["sources"]
        if config["models"][source]["type"] == "mini"
        and config["languages"][config["models"][source]["language"]]["corpus"]["type"] != "mini"
    ]


def real_text_run(config: dict[str, Any]) -> bool:
    """Whether the run compares the methods on real text: no pair of the miniature world,
    and a source pretrained here on real text (:func:`floor_sources`). Its report outputs
    show under their own category (embtransfer/report/inputs.py) and its findings state
    the limits of real text (embtransfer/report/findings.py)."""
    return not world_pairs(config) and bool(floor_sources(config))


def real_pairs(config: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The (language, source, target) pairs of a real-text run (:func:`real_text_run`):
    every pair of its grid. What :func:`world_pairs` are to the miniature world's probes and
    shared-token figures, these are to a real-text run's (none in any other run)."""
    return target_pairs(config) if real_text_run(config) else []


def held_out_dictionary(config: dict[str, Any], lang: str) -> bool:
    """Whether ``lang``'s real dictionary keeps a held-out half as alignment truth
    (``held_out: true``; :mod:`embtransfer.data.dictionary_split`)."""
    return bool((config["languages"][lang].get("dictionary") or {}).get("held_out"))


def alignment_groups(config: dict[str, Any]) -> list[tuple[str, Run]]:
    """(stage, run with method ``*``) of every checkpoint group the alignment metric scores:
    the transferred and LAPT checkpoints of each world pair and of each pair whose language's
    dictionary keeps a held-out half, one group per (stage, seed, language, source, target)."""
    pairs = set(world_pairs(config)) | {
        pair for pair in target_pairs(config) if held_out_dictionary(config, pair[0])
    }
    groups = []
    for stage, runs in (("transfer", transfer_runs(config)), ("lapt", lapt_runs(config))):
        seen = []
        for run in runs:
            key = (run.lang, run.source, run.target, run.seed)
            if (run.lang, run.source, target_model(run.target)) in pairs and key not in seen:
                seen.append(key)
        groups += [(stage, Run(lang, source, target, "*", seed))
                   for lang, source, target, seed in seen]
    return groups


# --- which checkpoints are evaluated --------------------------------------------------------


def evaluation_languages(config: dict[str, Any]) -> list[str]:
    """The config languages whose checkpoints are evaluated (the target languages)."""
    return list(config["targets"])


def _keep(config: dict[str, Any], value: str, key: str) -> bool:
    chosen = config["evaluation"]["select"].get(key)
    return chosen is None or value in chosen


def evaluated_runs(config: dict[str, Any], stage: str) -> list[Run]:
    """The checkpoints evaluated at ``stage`` (``transfer`` or ``lapt``).

    ``lapt``: the runs LAPT trains (:func:`lapt_runs`). ``transfer``: the
    same runs before LAPT, so every LAPT checkpoint has its before/after pair; when LAPT is
    disabled (no LAPT runs), every transferred checkpoint of the primary seed. Both are
    then narrowed by
    ``evaluation.select`` (sources/targets/methods; null keeps all).
    """
    if stage not in config["evaluation"]["stages"]:
        return []
    if stage == "lapt":
        base = lapt_runs(config)
    elif stage == "transfer":
        base = lapt_runs(config) or [run for run in transfer_runs(config)
                                     if run.seed == primary_seed(config)]
    else:
        raise ValueError(f"evaluated_runs: stage {stage!r} has no transfer runs")
    return [
        r for r in base
        if _keep(config, r.source, "sources") and _keep(config, r.target, "targets")
        and _keep(config, r.method, "methods")
    ]


def evaluated_sources(config: dict[str, Any]) -> list[tuple[str, str]]:
    """(language, source model) pairs whose untouched source LLM is evaluated."""
    if "source" not in config["evaluation"]["stages"]:
        return []
    return [
        (lang, source)
        for lang in evaluation_languages(config)
        for source in config["sources"]
        if _keep(config, source, "sources")
    ]


# --- what the report's tables show ----------------------------------------------------------


def report_stages(config: dict[str, Any]) -> list[str]:
    """``report.stages``, or by default the checkpoint stages the evaluation covers
    (``evaluation.stages``: transfer, lapt), lapt only when LAPT is enabled."""
    chosen = (config.get("report") or {}).get("stages")
    if chosen:
        return list(chosen)
    evaluated = (config.get("evaluation") or {}).get("stages", ["transfer", "lapt"])
    lapt_on = (config.get("lapt") or {}).get("enabled", True)
    stages = [s for s in ("transfer", "lapt") if s in evaluated and (s != "lapt" or lapt_on)]
    return stages or ["lapt"]


def source_first(config: dict[str, Any], model: str | None = None,
                 lang: str | None = None) -> int:
    """Scheduling priority of a job of ``model`` or ``lang``: 1 for the source LLMs'
    pretraining and the jobs it waits on (the corpora of its language and mix, its mix,
    its tokenizer), 0 otherwise. That pretraining is the longest job and every transfer
    waits for it; Snakemake otherwise starts the target PLMs' chains first (larger inputs),
    and on 2 cores the default run waited 140 s for the source to start (benchmarks/README.md).
    """
    sources = set(config["sources"])
    langs = set()
    for source in sources:
        spec = config["models"][source]
        langs |= {spec.get("language"), *(spec.get("mix") or {})}
    return int(model in sources or (lang is not None and lang in langs))


def evaluated_stages(config: dict[str, Any]) -> list[str]:
    """``evaluation.stages`` (the schema's default: every stage)."""
    return list((config.get("evaluation") or {}).get("stages", STAGES))


@dataclass(frozen=True)
class Grid:
    """What the configuration asks the report for: the rows every table should have."""

    targets: dict[str, list[str]]  # lang -> target PLM keys, in config order
    sources: list[str]
    methods: list[str]
    stages: list[str]
    focus_method: str
    overlap_match: str = "fuzzy"
    #: The results folder the report's expected paths (:mod:`embtransfer.core.paths`) lie under.
    results_dir: str = "results"
    #: Runs the workflow evaluates / trains (from the rule's input paths): (stage, lang,
    #: source, target, method) and (lang, source, target, method). None: the whole grid.
    planned_eval: frozenset[tuple] | None = None
    planned_lapt: frozenset[tuple] | None = None
    #: ``evaluation.stages`` has ``source``: Tables 1-3 open with the source model's rows.
    source_control: bool = True
    #: The primary seed (:func:`primary_seed`), whose checkpoints the paper tables read.
    seed: int = 0

    def wants_eval(self, stage: str, lang: str, source: str, target: str | None,
                   method: str | None) -> bool:
        return self.planned_eval is None or (stage, lang, source, target, method) in (
            self.planned_eval)

    def wants_lapt(self, lang: str, source: str, target: str | None, method: str) -> bool:
        return self.planned_lapt is None or (lang, source, target, method) in self.planned_lapt

    @property
    def langs(self) -> list[str]:
        return list(self.targets)

    @classmethod
    def from_config(cls, config: dict[str, Any], results_dir: str = "results") -> Grid:
        report = config.get("report") or {}
        methods = report.get("methods") or config.get("transfer", {}).get("methods", [])
        return cls(
            targets={lang: list(plms) for lang, plms in config["targets"].items()},
            sources=list(config["sources"]),
            methods=list(methods),
            stages=report_stages(config),
            focus_method=report.get("focus_method") or "salt",
            overlap_match=config.get("overlap", {}).get("match", "fuzzy"),
            results_dir=results_dir,
            source_control="source" in evaluated_stages(config),
            seed=primary_seed(config),
        )
