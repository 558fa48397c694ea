"""The paper grid configs plan the whole grid: a dry run, no network, counts per rule.
So does .test/config.yaml, the small miniature-world config that plans every compute rule.

The expected job count of every rule is computed here from the config itself
(not from the workflow's helpers), and the GPU rules must carry their GPUs.
The downloaded inputs are missing, so the dry run plans the download rules too.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from itertools import product
from pathlib import Path

import pytest
import yaml
from test_workflow import job_stats

from embtransfer.config.validation import validate_config
from embtransfer.evaluation.task_catalog import CATALOG

REPO = Path(__file__).resolve().parents[1]
CONFIGS = ["config", "mini_full", "paper_salt", "paper_cva", "cluster_check"]
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "EMBTRANSFER_OFFLINE": "1"}


def _select(config: dict, groups: list | None, runs: set) -> set[tuple[str, str, str, str]]:
    """The runs of ``runs`` in the union of ``groups`` (a product of sources x targets x
    methods each; a missing key = all), by brute force over the whole grid."""
    chosen = set()
    for group in groups or [{}]:
        for lang, plms in config["targets"].items():
            sources = group.get("sources") or config["sources"]
            targets = [t for t in plms if t in (group.get("targets") or plms)]
            methods = group.get("methods") or config["transfer"]["methods"]
            chosen |= {(lang, s, t, m) for s, t, m in product(sources, targets, methods)}
    return chosen & runs


def transfer_runs(config: dict) -> set[tuple[str, str, str, str]]:
    grid = {(lang, s, t, m) for lang, plms in config["targets"].items()
            for s in config["sources"] for t in plms for m in config["transfer"]["methods"]}
    return _select(config, config["transfer"].get("select"), grid)


def lapt_runs(config: dict) -> set[tuple[str, str, str, str]]:
    lapt = config.get("lapt") or {}
    if not lapt.get("enabled", True):
        return set()
    return _select(config, lapt.get("select"), transfer_runs(config))


def world_pair(config: dict, run: tuple) -> bool:
    lang, source, target = run[:3]
    return (config["languages"][lang]["corpus"]["type"] == "mini"
            and config["models"][source]["type"] == config["models"][target]["type"] == "mini")


def held_out_half(config: dict, lang: str) -> bool:
    spec = config["languages"][lang].get("dictionary") or {"type": "world"}
    return config.get("dictionary_held_out", 0.5) > 0 and (
        spec.get("type", "world") == "world" or bool(spec.get("held_out")))


#: The neighbour table each method reads by default (SALT through its regression).
TABLE_OF = {"salt": "word", "omp_salt_k": "word", "focus": "token"}


def expected_jobs(config: dict) -> dict[str, int]:
    langs = config["languages"]
    targets = config["targets"]
    sources = config["sources"]
    methods = set(config["transfer"]["methods"])
    vectors = set(config.get("neighbors", {}).get("vectors", ["word", "token"]))
    plms = sorted({t for p in targets.values() for t in p})
    models = set(sources) | set(plms)
    pairs = [(lang, s, t) for lang, p in targets.items() for s in sources for t in p]
    aligned = bool(methods & {"wechsel", "ofa"})
    word_langs = set(targets) if ("word" in vectors or aligned) else set()
    if aligned:
        word_langs.add(config["source_language"])
    ft_type = {lang: langs[lang].get("fasttext", {"type": "train"})["type"] for lang in langs}
    evaluation = config.get("evaluation", {})
    stages = set(evaluation.get("stages", ["source", "transfer", "lapt"]))
    runs = lapt_runs(config)
    hub = [m for m in models if config["models"][m]["type"] == "hub"]
    # miniature models: trained here on their language's corpus mixed with their `mix` shares
    mini = [config["models"][m] for m in models if config["models"][m]["type"] == "mini"]
    corpora = set(targets) | {s["language"] for s in mini} | {
        lang for s in mini for lang in s.get("mix") or {}}
    world_tasks = [k for k in evaluation.get("tasks", []) if CATALOG[k].source == "world"]
    dictionaries = {langs[lang]["dictionary"]["path"] for lang in targets
                    if aligned and langs[lang].get("dictionary", {}).get("type") == "file"}
    wiki = [lang for lang in targets if langs[lang]["corpus"]["type"] == "wikipedia"]
    held_out = bool((config["transfer"].get("holdout") or {}).get("share"))
    jobs = {
        "fetch_model": len(hub),
        "fetch_wikipedia": len(wiki),
        "fetch_nltk_punkt": 1 if wiki else 0,
        "fetch_fasttext_crawl": len({langs[lang]["fasttext"].get("code", lang)
                                     for lang in word_langs if ft_type[lang] == "crawl"}),
        "fetch_muse_dictionary": len([d for d in dictionaries if "dictionaries/muse/" in d]),
        "world": 1 if any(langs[lang]["corpus"]["type"] == "mini" for lang in corpora) else 0,
        "corpus": len(corpora),
        "mix_corpus": len([s for s in mini if s.get("mix")]),
        "train_tokenizer": len(mini),
        "pretrain_model": len(mini),
        "world_benchmarks": len(targets) if world_tasks else 0,
        "fasttext_word": len([lang for lang in word_langs if ft_type[lang] == "train"]),
        "vocab": len(models),
        "overlap": len(sources) * len(plms),
        "fasttext_tokenize": len(plms) if "token" in vectors else 0,
        "fasttext_token": len(plms) if "token" in vectors else 0,
        "token_vectors": len(plms) * len(vectors),
        "neighbors": len(pairs) * len(vectors),
        "salt_regression": len({r[:3] for r in transfer_runs(config) if r[3] == "salt"}),
        "aligned_vectors": len({r[:3] for r in transfer_runs(config)
                                if r[3] in ("wechsel", "ofa")}),
        "transfer": len(transfer_runs(config)),
        # omp's and omp_salt_k's fits solved once per pair that runs both (one seed)
        "omp_solve": len({r[:3] for r in transfer_runs(config) if r[3] == "omp"}
                         & {r[:3] for r in transfer_runs(config) if r[3] == "omp_salt_k"}),
        # TokAlign's GloVe spaces: the language's corpus in the source's and the PLM's
        # tokenization, once each (one seed: the configs this checks)
        "tokalign_glove": len({(r[0], model) for r in transfer_runs(config)
                               if r[3] == "tokalign" for model in (r[1], r[2])}),
        # the aligned fastText spaces' held-out BLI: a language WECHSEL or OFA runs in whose
        # dictionary keeps a held-out half (the world's; a real one with held_out: true)
        "fasttext_bli": len({r[0] for r in transfer_runs(config) if r[3] in ("wechsel", "ofa")
                             and held_out_half(config, r[0])}),
        # the miniature world's truth and alignment scores: every world pair a checkpoint has
        "world_truth": len({r[:3] for r in transfer_runs(config) if world_pair(config, r)}),
        "alignment": len({r[:3] for r in transfer_runs(config) if world_pair(config, r)})
        + len({r[:3] for r in runs if world_pair(config, r)}),
        # one table of every world pair's shared-token kinds (docs/calibration.md)
        "shared_kinds": 1 if any(world_pair(config, p) for p in pairs) else 0,
        "holdout": len(pairs) if held_out else 0,
        # with the held-out tokens hidden: the neighbour tables SALT (word vectors) and FOCUS
        # (token vectors) read, SALT's regression, and every method but the world's oracle
        "holdout_neighbors": len({(r[:3], TABLE_OF[r[3]]) for r in transfer_runs(config)
                                  if held_out and r[3] in TABLE_OF}),
        "holdout_regression": len({r[:3] for r in transfer_runs(config)
                                   if held_out and r[3] in ("salt", "omp_salt_k")}),
        "holdout_transfer": len([r for r in transfer_runs(config) if held_out
                                 and r[3] not in ("world_oracle", "token_distillation")]),
        "calibration_table": 1 if any(world_pair(config, p) for p in pairs) else 0,
        # the target-PLM probes: every world pair (docs/world.md)
        "plm_probe": len([p for p in pairs if world_pair(config, p)]),
        "zeroshot_source": len(targets) * len(sources),
        "lapt": len(runs),
        # Tokenised once per (language, source, target): train, valid (and replay) blocks.
        "lapt_blocks": len({r[:3] for r in runs}) * (
            3 if (config.get("lapt") or {}).get("replay") else 2),
        "evaluate": len(runs) * len(stages & {"transfer", "lapt"}) if evaluation.get(
            "tasks", ["x"]) else 0,
        "evaluate_source": len(targets) * len(sources) if "source" in stages and evaluation.get(
            "tasks", ["x"]) else 0,
        "fetch_lm_eval_datasets": 1 if any(
            CATALOG[k].source != "world" for k in evaluation.get("tasks", [])) else 0,
        "lapt_zeroshot": len(runs) if evaluation.get("lapt_zeroshot", True) else 0,
        "tokenizer_stats": len(targets) if evaluation.get("tokenizer_stats", True) else 0,
        "report": 1,
        "all": 1,
    }
    return {rule: n for rule, n in jobs.items() if n}


def dry_run(workdir: Path, configfile: Path, *args: str) -> str:
    """Snakemake's output of a dry run of ``configfile`` (offline), asserting it succeeds."""
    env = dict(os.environ, PYTHONPATH=str(workdir / "workflow"), **OFFLINE)
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--directory", str(workdir),
         "--snakefile", str(workdir / "Snakefile"), "--configfile", str(configfile), *args],
        capture_output=True, text=True, env=env, cwd=workdir,
    )
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-4000:]
    return text


def job_resources(text: str) -> dict[str, list[str]]:
    """Rule -> the `resources:` line of each of its planned jobs."""
    found: dict[str, list[str]] = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", text):
        head = re.match(r"(?:local)?rule (\w+):", block)
        res = re.search(r"^\s+resources: (.*)$", block, re.M)
        if head and res:
            found.setdefault(head.group(1), []).append(res.group(1))
    return found


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    from test_workflow import copy_workflow

    path = copy_workflow(tmp_path_factory.mktemp("grid"))
    # The report reads the paper's published numbers, which the repository ships.
    reference = REPO / "resources" / "reference"
    if reference.is_dir():
        shutil.copytree(reference, path / "resources" / "reference", dirs_exist_ok=True)
    return path


@pytest.mark.parametrize("name", CONFIGS)
def test_paper_config_plans_the_whole_grid(workdir, name):
    config = validate_config(yaml.safe_load((REPO / "config" / f"{name}.yaml").read_text()))
    # local corpora (the CVA study's OSCAR and CC-100 text) are the user's files: a dry
    # run only needs them to exist
    for spec in config["languages"].values():
        if spec.get("corpus", {}).get("type") == "local":
            for key in ("train", "valid"):
                if key in spec["corpus"]:
                    (workdir / spec["corpus"][key]).parent.mkdir(parents=True, exist_ok=True)
                    (workdir / spec["corpus"][key]).touch()
    started = time.monotonic()
    text = dry_run(workdir, workdir / "config" / f"{name}.yaml")
    seconds = time.monotonic() - started
    total = sum(job_stats(text).values())
    print(f"\n{name}: dry run {seconds:.1f} s, {total} jobs")
    assert job_stats(text) == expected_jobs(config)
    # the README's job count of this grid is this dry run's, not a figure written by hand
    readme = re.search(rf"`{name}\.yaml` (\d+)", (REPO / "README.md").read_text())
    assert readme and int(readme.group(1)) == total, (
        f"README says {readme and readme.group(1)} jobs for {name}.yaml, the dry run plans {total}"
        " (update the README's job counts from `make jobs`)")

    resources = job_resources(text)
    gpus = (config.get("lapt") or {}).get("gpus", 1)
    assert resources["salt_regression" if "salt" in config["transfer"]["methods"] else "lapt"]
    for rule, want in (("salt_regression", "gpu=1"), ("lapt", f"gpu={gpus}")):
        for line in resources.get(rule, []):
            assert want in line.split(", "), (rule, line)
    # Without a GPU to declare, CPU rules ask for none.
    for rule in ("transfer", "neighbors", "vocab"):
        assert not any("gpu=" in line for line in resources.get(rule, [])), rule


# Rules that only gather targets or download (the test config's world needs no download).
NOT_COMPUTE = {"all", "neighbors_only", "zeroshot_only", "evaluation", "download_all"}
# the real-text run's rules: its inputs are fetched (real_data and the two it gathers), the
# others are planned by tests/test_bench_real.py's dry run of config/real_text.yaml
REAL_TEXT_ONLY = {"real_data", "real_corpus", "freedict_dictionary", "random_model",
                  "aligned_search"}
# a source pretrained on real text and a dictionary with a held-out half: config/real_small.yaml
# plans them (test_real_small_plans_its_own_rules below)
REAL_SMALL_ONLY = {"source_floor", "dictionary_truth"}


def test_the_test_config_plans_every_compute_rule(workdir):
    configfile = REPO / ".test" / "config.yaml"
    config = yaml.safe_load(configfile.read_text())
    text = dry_run(workdir, configfile)
    planned = job_stats(text)
    assert planned == expected_jobs(config)
    # every rule of the workflow is exercised, bar the targets and the downloads
    # one rule name a line (Snakemake's note that it uses the workflow profile aside)
    listing = dry_run(workdir, configfile, "--list-rules").splitlines()
    rules = {line.strip() for line in listing if line.strip().isidentifier()}
    compute = {r for r in rules if r not in NOT_COMPUTE | REAL_TEXT_ONLY | REAL_SMALL_ONLY
               and not r.startswith("fetch_")}
    assert "salt_regression" in compute and "pretrain_model" in compute
    assert compute - set(planned) == set()



def test_real_small_plans_its_own_rules(workdir):
    text = dry_run(workdir, REPO / "config" / "real_small.yaml")
    assert REAL_SMALL_ONLY <= set(job_stats(text))
    # `make real-run` gives Snakemake 8,000 MB: every job asks for at most half, so no job
    # (a transfer asking for a paper model's 8,000) runs alone while the other core idles.
    budget = int(re.search(r"real-run:.*\n.*--resources mem_mb=(\d+)",
                           (REPO / "Makefile").read_text()).group(1))
    asked = {rule: max(int(m) for line in lines for m in re.findall(r"mem_mb=(\d+)", line))
             for rule, lines in job_resources(text).items() if "mem_mb=" in "".join(lines)}
    assert {"transfer", "salt_regression", "pretrain_model"} <= set(asked)
    assert {rule: mb for rule, mb in asked.items() if 2 * mb > budget} == {}

def test_the_source_llms_pretraining_chain_and_the_long_transfers_are_scheduled_first(
        workdir):
    """The longest job, which every transfer waits for, and the jobs it waits on carry
    priority 1 in the default run, and so do the OMP solves, the longest transfer work at
    real shapes: rule omp_solve and every OMP transfer job, held-out or not
    (method_catalog.transfer_priority); no other job does (core/grid.source_first)."""
    text = dry_run(workdir, REPO / "config" / "config.yaml")
    prioritised, transfers = set(), {"all": set(), "first": set()}
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", text):
        head = re.match(r"(?:local)?rule (\w+):", block)
        wildcards = re.search(r"^\s+wildcards: (.*)$", block, re.M)
        first = bool(re.search(r"^\s+priority: 1$", block, re.M))
        if head and head.group(1) in ("transfer", "holdout_transfer"):
            job = (head.group(1), wildcards.group(1))
            transfers["all"].add(job)
            if first:
                transfers["first"].add(job)
        elif head and first:
            prioritised.add((head.group(1), wildcards.group(1) if wildcards else ""))
    solves = {job for job in prioritised if job[0] == "omp_solve"}
    assert {w.split("target=")[1] for _, w in solves} == {"gpt2_ar_mini", "gpt2_vi_mini"}
    assert prioritised - solves == {("corpus", "lang=en_mini"), ("corpus", "lang=ar_mini"),
                                    ("corpus", "lang=vi_mini"), ("mix_corpus", "model=llama_mini"),
                                    ("train_tokenizer", "model=llama_mini"),
                                    ("pretrain_model", "model=llama_mini")}
    omp = {job for job in transfers["all"]
           if re.search(r"method=(omp|omp_salt_k)$", job[1])}
    assert {rule for rule, _ in omp} == {"transfer", "holdout_transfer"}
    assert transfers["first"] == omp
