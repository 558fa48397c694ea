"""What the transfer stage's rules (workflow/rules/transfer.smk) read: the inputs each
method needs (by the catalog), its options, the code a method's jobs hash, the zero-shot
files the run asks for and the BLI of the aligned fastText spaces. Functions of the
validated config, importable and tested without Snakemake (tests/test_rule_inputs.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from embtransfer.core import codehash, paths
from embtransfer.core.grid import (
    held_out_dictionary,
    model_wildcards,
    seeds,
    target_model,
    target_pairs,
    transfer_runs,
)
from embtransfer.data.dictionaries import freedict_data
from embtransfer.fasttext.inputs import fasttext_word_bin
from embtransfer.models.inputs import model_dir, tokenizer_dir
from embtransfer.transfer.method_catalog import (
    COMPETING_ROLES,
    METHODS,
    method_needs,
    resolve_options,
    role,
)

# A language without a `dictionary` entry takes the miniature world's.
WORLD_DICTIONARY = {"type": "world"}


def method_options(config: dict[str, Any], method: str) -> dict[str, Any]:
    """The options the config gives ``method`` (`transfer.options`), unresolved."""
    return config["transfer"]["options"].get(method, {})


def salt_vectors(config: dict[str, Any]) -> str:
    """The vector space (word or token) of the neighbour tables SALT's regression reads."""
    return resolve_options("salt", method_options(config, "salt"))["vectors"]


def salt_rcond(config: dict[str, Any]) -> float:
    """The rcond of SALT's least squares (the target-PLM probes fit with the same)."""
    return resolve_options("salt", method_options(config, "salt"))["rcond"]


def method_code(method: str) -> str:
    # Only the module of this method (beside the script's hash): editing SALT reruns
    # SALT's jobs.
    return codehash.code_hash(f"embtransfer.transfer.methods.{METHODS[method]['module']}")


def dictionary_spec(config: dict[str, Any], lang: str) -> dict[str, Any]:
    """The bilingual dictionary entry of ``lang`` (the world's when it names none)."""
    return config["languages"][lang].get("dictionary", WORLD_DICTIONARY)


def dictionary_input(config: dict[str, Any], lang: str) -> str | list[str]:
    """The file(s) the aligned_vectors rule reads ``lang``'s dictionary from."""
    spec = dictionary_spec(config, lang)
    if spec["type"] == "world":
        return paths.WORLD
    if spec["type"] == "freedict":  # the index and the entries it points into
        return [spec["path"], str(freedict_data(spec["path"]))]
    return spec["path"]


def dictionary_truth_pairs(config: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The (language, source, target) pairs whose language's dictionary keeps a held-out
    half (``held_out: true``): each gets that half as its alignment truth."""
    return [
        (lang, source, target)
        for lang, source, target in target_pairs(config)
        if held_out_dictionary(config, lang)
    ]


def all_dictionary_truth(config: dict[str, Any]) -> list[str]:
    return [
        paths.DICTIONARY_TRUTH_COUNTS.fill(lang=lang, source=source, target=target, seed=seed)
        for seed in seeds(config)
        for lang, source, target in dictionary_truth_pairs(config)
    ]


def aligned_tokenizers(config: dict[str, Any], wildcards: Mapping[str, str]) -> list[str]:
    """The tokenizers aligned_vectors reads: only for `aligned.token_strings: decode`."""
    if config["aligned"]["token_strings"] != "decode":
        return []
    return [tokenizer_dir(config, wildcards["source"]), tokenizer_dir(config, wildcards["target"])]


def transfer_inputs(config: dict[str, Any], wildcards: Mapping[str, str]) -> dict[str, str]:
    """The transfer rule's inputs: what every method reads, then what the catalog says
    this method needs (method_needs), by input name. A setting's artifacts are its target
    PLM's, whatever its vocabulary mode (:func:`~embtransfer.core.grid.model_wildcards`)."""
    w = model_wildcards(wildcards)
    inputs = {
        "source": model_dir(config, w["source"]),
        "target_tokenizer": tokenizer_dir(config, w["target"]),
        "source_vocab": paths.VOCAB.fill(model=w["source"]),
        "target_vocab": paths.VOCAB.fill(model=w["target"]),
        "overlap": paths.OVERLAP.fill(**w),
    }
    by_need = {
        "neighbors_word": paths.NEIGHBORS.fill(**w, vectors="word"),
        "neighbors_token": paths.NEIGHBORS.fill(**w, vectors="token"),
        "plm": model_dir(config, w["target"]),
        "projected": paths.REGRESSION.fill(**w),
        "aligned": paths.ALIGNED.fill(**w),
        "source_tokenizer": tokenizer_dir(config, w["source"]),
        "truth": paths.WORLD_TRUTH.fill(**w),
        "glove_source": paths.GLOVE.fill(lang=w["lang"], model=w["source"], seed=w["seed"]),
        "glove_target": paths.GLOVE.fill(lang=w["lang"], model=w["target"], seed=w["seed"]),
        "corpus": paths.CORPUS.fill(lang=w["lang"], split="train"),
    }
    needs = method_needs(w["method"], method_options(config, w["method"]))
    for need in sorted(needs):
        inputs[need] = by_need[need]
    return inputs


#: The methods that share one OMP solve per pair (rule omp_solve)
OMP_SHARING = ("omp", "omp_salt_k")


def shares_omp_solve(config: dict[str, Any], wildcards: Mapping[str, str]) -> bool:
    """Whether the pair (and seed) of ``wildcards`` runs both OMP methods with the same
    ``centered``: then rule ``omp_solve`` solves once for both (transfer/methods/omp.py)."""
    w = wildcards
    keys = ("lang", "source", "target", "seed")
    methods = {r.method for r in transfer_runs(config)
               if all(str(getattr(r, key)) == str(w[key]) for key in keys)}
    if not set(OMP_SHARING) <= methods:
        return False
    centered = {resolve_options(m, method_options(config, m))["centered"] for m in OMP_SHARING}
    return len(centered) == 1


def omp_solve_inputs(config: dict[str, Any], wildcards: Mapping[str, str]) -> dict[str, str]:
    """The transfer rule's ``omp_solve`` input: the pair's shared OMP fits, for the OMP
    methods where the pair shares them; nothing otherwise."""
    w = wildcards
    if w["method"] not in OMP_SHARING or not shares_omp_solve(config, w):
        return {}
    return {"omp_solve": paths.OMP_SOLVE.fill(**model_wildcards(
        {k: w[k] for k in ("lang", "source", "target", "seed")}))}


def omp_solve_rule_inputs(config: dict[str, Any], wildcards: Mapping[str, str]
                          ) -> dict[str, str]:
    """Rule ``omp_solve``'s inputs: those of ``omp_salt_k``'s transfer (the PLM, the
    overlap, SALT's projection for its k)."""
    return transfer_inputs(config, {**wildcards, "method": "omp_salt_k"})


def omp_solve_options(config: dict[str, Any]) -> dict[str, Any]:
    """omp's k and the methods' ``centered`` (equal where the solve is shared)."""
    options = resolve_options("omp", method_options(config, "omp"))
    return {"k": int(options["k"]), "centered": bool(options["centered"])}


def holdout_transfer_inputs(config: dict[str, Any], wildcards: Mapping[str, str]
                            ) -> dict[str, str]:
    """A held-out transfer's inputs: the transfer's, with the overlap, neighbour tables and
    SALT's regression built without the held-out tokens, the split itself, and no shared
    aligned search (it saw the held-out source tokens: the job searches anew)."""
    inputs = transfer_inputs(config, wildcards)
    w = model_wildcards(wildcards)
    inputs["overlap"] = paths.HOLDOUT_OVERLAP.fill(**w)
    inputs["holdout"] = paths.HOLDOUT.fill(**w)
    for vectors in ("word", "token"):
        if f"neighbors_{vectors}" in inputs:
            inputs[f"neighbors_{vectors}"] = paths.HOLDOUT_NEIGHBORS.fill(**w, vectors=vectors)
    if "projected" in inputs:
        inputs["projected"] = paths.HOLDOUT_REGRESSION.fill(**w)
    return inputs


def all_holdout_scores(config: dict[str, Any]) -> list[str]:
    """Every competing method's held-out scores, per target PLM and replicate seed, where
    ``transfer.holdout`` is set (the world's oracle, which reads the truth, is left out).
    The held-out transfer predicts shared tokens' rows, which a setting's vocabulary mode
    does not change: a method is scored once per PLM, under the PLM's name, whichever of its
    settings it runs in (Token Distillation, of its ``@extend`` setting, beside the methods
    of its replaced one)."""
    if not config["transfer"].get("holdout"):
        return []
    return list(dict.fromkeys(
        paths.HOLDOUT_SCORES.fill(**{**r._asdict(), "target": target_model(r.target)})
        for r in transfer_runs(config) if role(r.method) in COMPETING_ROLES))


def glove_options(config: dict[str, Any]) -> dict[str, Any]:
    """The keys of TokAlign's options that rule tokalign_glove reads (the rest act in the
    transfer), resolved."""
    options = resolve_options("tokalign", method_options(config, "tokalign"))
    return {k: v for k, v in options.items() if k != "pivots"}


def aligned_pairs(config: dict[str, Any], lang: str) -> list[tuple[str, str]]:
    """The (source, target) pairs of ``lang`` with a method on the aligned fastText spaces
    (WECHSEL, OFA: ``needs: aligned``), in grid order."""
    pairs: list[tuple[str, str]] = []
    for r in transfer_runs(config):  # the same pairs in every seed
        aligned = "aligned" in method_needs(r.method, method_options(config, r.method))
        pair = (r.source, target_model(r.target))
        if aligned and r.lang == lang and pair not in pairs:
            pairs.append(pair)
    return pairs


def fasttext_bli_languages(config: dict[str, Any]) -> list[str]:
    """The languages whose aligned fastText spaces are scored (rule fasttext_bli): those a
    method on them runs in whose dictionary keeps a held-out half (the world's, or a real one
    with ``held_out: true``)."""
    if not config["dictionary_held_out"] > 0:
        return []
    return [
        lang
        for lang in config["targets"]
        if aligned_pairs(config, lang)
        and (dictionary_spec(config, lang)["type"] == "world" or held_out_dictionary(config, lang))
    ]


def all_fasttext_bli(config: dict[str, Any]) -> list[str]:
    return [paths.FASTTEXT_BLI.fill(lang=lang, seed=seed) for seed in seeds(config)
            for lang in fasttext_bli_languages(config)]


def fasttext_bli_inputs(config: dict[str, Any], wildcards: Mapping[str, str]) -> dict:
    """What one language's BLI reads: both fastText models, the aligned artifact of every
    pair WECHSEL or OFA runs with (one map), and a world dictionary's world."""
    lang, seed = wildcards["lang"], wildcards["seed"]
    inputs: dict[str, Any] = {
        "source_fasttext": fasttext_word_bin(config, config["source_language"], seed),
        "target_fasttext": fasttext_word_bin(config, lang, seed),
        "aligned": [
            paths.ALIGNED.fill(lang=lang, source=source, target=target, seed=seed)
            for source, target in aligned_pairs(config, lang)
        ],
    }
    if dictionary_spec(config, lang)["type"] == "world":
        inputs["world"] = dictionary_input(config, lang)
    return inputs


def all_zeroshot(config: dict[str, Any]) -> list[str]:
    """Every transferred checkpoint's zero-shot scores, then each source LLM's (once per
    language)."""
    files = [paths.ZEROSHOT.fill(**r._asdict()) for r in transfer_runs(config)]
    sources = {
        paths.ZEROSHOT_SOURCE.fill(lang=lang, source=s) for lang, s, _ in target_pairs(config)
    }
    return files + sorted(sources)


def all_salt_regression(config: dict[str, Any]) -> list[str]:
    """The regression record (:data:`paths.REGRESSION_META`) of every (language, source,
    target, seed) with a method that reads SALT's coefficients, once each, in grid order."""
    settings = dict.fromkeys(
        (r.lang, r.source, target_model(r.target), r.seed) for r in transfer_runs(config)
        if "projected" in method_needs(r.method, method_options(config, r.method))
    )
    return [paths.REGRESSION_META.fill(lang=lang, source=source, target=target, seed=seed)
            for lang, source, target, seed in settings]
