"""config/real_small.yaml (make real-run): the methods compared on real languages from a
source pretrained here, and the offline check that names `make real-data`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from embtransfer.config.validation import validate_config
from embtransfer.core.errors import ConfigError
from embtransfer.core.grid import (
    lapt_runs,
    target_mode,
    target_model,
    target_models,
    transfer_runs,
)
from embtransfer.core.vocab_modes import method_modes
from embtransfer.data.inputs import REAL_DATA_DIR, check_real_data, missing_real_data
from embtransfer.transfer.method_catalog import METHODS

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "config" / "real_small.yaml"
FAMILIES = ("gpt2", "bert")


@pytest.fixture(scope="module")
def config() -> dict:
    return validate_config(yaml.safe_load(CONFIG.read_text()))


def test_the_source_is_a_llama_pretrained_on_a_byte_mix(config) -> None:
    source = config["models"][config["sources"][0]]
    assert source["type"] == "mini" and source["family"] == "llama"
    assert source["tie_word_embeddings"] is False  # Llama's own setting
    assert source["mix_unit"] == "bytes" and set(source["mix"]) == {"de", "ar", "vi"}
    tok = source["tokenizer"]
    assert tok["algorithm"] == "bytelevel_bpe" and tok["split_digits"] and tok["text"] == "mix"
    for lang in ("de", "ar", "vi"):
        plms = target_models(config, lang)
        assert {config["models"][m]["family"] for m in plms} == set(FAMILIES)
        assert all(config["models"][m]["type"] == "mini" for m in plms)


def test_every_method_with_gpt2_salt_with_every_family_aligning_only_with_a_dictionary(
    config,
) -> None:
    runs = transfer_runs(config)
    # every method of a replaced vocabulary (the run's) but the miniature world's own
    real_methods = {m for m, spec in METHODS.items()
                    if not spec.get("world_only") and "replace" in method_modes(m)}
    dictionary = {lang for lang, s in config["languages"].items() if s.get("dictionary")}
    assert dictionary == {"de", "ar"}
    family = {m: config["models"][target_model(m)]["family"]
              for plms in config["targets"].values() for m in plms}
    for lang in ("de", "ar", "vi"):
        gpt2 = {r.method for r in runs if r.lang == lang and r.target == f"gpt2_{lang}"}
        aligning = {"wechsel", "ofa"} if lang in dictionary else set()
        assert gpt2 == real_methods - ({"wechsel", "ofa"} - aligning), lang
        # the extended setting: every method that extends (TokAlign replaces) and Token
        # Distillation
        extended = {r.method for r in runs if r.lang == lang and r.target == f"gpt2_{lang}@extend"}
        assert target_mode(config, f"gpt2_{lang}@extend") == "extend"
        assert extended == (gpt2 - {"tokalign"}) | {"token_distillation"}, lang
        salt = {family[r.target] for r in runs if r.lang == lang and r.method == "salt"}
        assert salt == set(FAMILIES), lang
    assert not any(METHODS[r.method].get("world_only") for r in runs)
    for lang in dictionary:
        assert config["languages"][lang]["dictionary"]["held_out"] is True


def test_lapt_trains_every_gpt2_checkpoint_of_every_language_with_evaluations(config) -> None:
    """Every GPT-2 checkpoint continues pre-training in its own language, each for the same
    number of steps, with the held-out loss at three fractions after the warm-up."""
    runs, lapt = lapt_runs(config), config["lapt"]
    # of the primary seed: the replicate seeds repeat the transfer, not LAPT; in the extended
    # settings Token Distillation and the methods it is read beside
    extended = {"token_distillation", "subword_mean", "salt", "random"}
    gpt2 = [r for r in transfer_runs(config) if r.seed == config["seeds"][0]
            and (r.target == f"gpt2_{r.lang}"
                 or (r.target == f"gpt2_{r.lang}@extend" and r.method in extended))]
    assert runs == gpt2 and {r.lang for r in runs} == {"de", "ar", "vi"}
    assert {r.method for r in runs if r.target.endswith("@extend")} == extended
    assert lapt["max_steps"] >= 40  # one number of steps for every method
    after_warmup = [f for f in lapt["eval_fractions"] if f > lapt["warmup_ratio"]]
    assert len(after_warmup) >= 3
    assert lapt["max_steps"] * min(after_warmup) >= 1


def test_offline_without_real_data_the_run_names_make_real_data(
    config, tmp_path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    missing = missing_real_data(config)
    assert "resources/real/corpora/en.txt" in missing
    assert "resources/real/dictionaries/freedict-eng-deu.dict.dz" in missing
    monkeypatch.delenv("EMBTRANSFER_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    check_real_data(config)  # online: the rules build what is missing
    monkeypatch.setenv("EMBTRANSFER_OFFLINE", "1")
    with pytest.raises(ConfigError, match=r"make real-data"):
        check_real_data(config)
    for path in missing:  # everything in place: nothing to refuse
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    assert missing_real_data(config) == []
    check_real_data(config)
    assert REAL_DATA_DIR == Path("resources/real")


def test_the_source_is_checked_against_the_count_model_floor(config) -> None:
    """A source pretrained here on real text gets rule source_floor's record; the miniature
    world's sources do not (their text is generated)."""
    from embtransfer.core.grid import floor_sources
    from embtransfer.evaluation.inputs import all_intrinsic

    assert floor_sources(config) == ["llama_en"]
    assert "results/intrinsic/source_floor/llama_en.json" in all_intrinsic(config)
    world = validate_config(yaml.safe_load((REPO / "config" / "config.yaml").read_text()))
    assert floor_sources(world) == []



def test_each_pair_of_a_held_out_dictionary_gets_its_truth(config) -> None:
    from embtransfer.transfer.inputs import all_dictionary_truth, dictionary_truth_pairs

    pairs = dictionary_truth_pairs(config)
    assert {(lang, target) for lang, _, target in pairs} == {
        (lang, f"{family}_{lang}") for lang in ("de", "ar") for family in FAMILIES
    }
    # one truth per replicate seed: each draws its own split of the dictionary
    truths = all_dictionary_truth(config)
    assert len(truths) == 3 * len(pairs) and config["seeds"] == [1234, 1235, 1236]
    assert {f"results/seed{s}/truth_dictionary/de/llama_en/gpt2_de.json"
            for s in config["seeds"]} <= set(truths)
    world = validate_config(yaml.safe_load((REPO / "config" / "config.yaml").read_text()))
    assert all_dictionary_truth(world) == []


def test_alignment_scores_every_checkpoint_of_a_held_out_dictionary_pair(config) -> None:
    """The transfer checkpoints of each de and ar setting (replaced and extended) and the
    LAPT ones of gpt2_de and gpt2_ar are scored against the dictionary's held-out half; vi
    (no dictionary) is not scored."""
    from embtransfer.evaluation.inputs import alignment_inputs, all_alignment

    files = all_alignment(config)
    transfer = {f for f in files if "/alignment/transfer/" in f}
    # 3 seeds x 2 languages x (2 families + the extended GPT-2)
    assert len(transfer) == 3 * 2 * (len(FAMILIES) + 1) and not any("/vi/" in f for f in files)
    # LAPT runs for the primary seed only
    assert sorted(f for f in files if "/lapt/" in f) == [
        f"results/seed1234/alignment/lapt/{lang}/llama_en/gpt2_{lang}{mode}.parquet"
        for lang in ("ar", "de") for mode in ("", "@extend")
    ]
    extended = alignment_inputs(config, {"stage": "lapt", "lang": "de", "source": "llama_en",
                                         "target": "gpt2_de@extend", "seed": "1234"})
    # the extended checkpoints are read by the GPT-2's tokens, against the same truth
    assert extended["truth"] == "results/seed1234/truth_dictionary/de/llama_en/gpt2_de.parquet"
    assert extended["target_tokenizer"] == "resources/tokenizers/gpt2_de"
    wildcards = {"stage": "transfer", "lang": "ar", "source": "llama_en", "target": "bert_ar",
                 "seed": "1235"}
    inputs = alignment_inputs(config, wildcards)
    assert inputs["truth"] == "results/seed1235/truth_dictionary/ar/llama_en/bert_ar.parquet"
    assert inputs["checkpoints"] == [
        f"results/seed1235/transfer/ar/llama_en/bert_ar/{m}"
        for m in ("salt", "omp", "omp_salt_k")
    ]


def test_every_plm_gets_the_span_probe_and_its_shared_token_figures(config) -> None:
    """Every (language, source, target) of the run gets a probe record (the span probe: its
    neighbour table is SALT's, which every PLM has) and a line of the shared-token table,
    measured with its language's wordfreq lexicon against the source's English."""
    from embtransfer.core.grid import target_pairs
    from embtransfer.evaluation.inputs import all_plm_probes, plm_probe_inputs
    from embtransfer.transfer.inputs import salt_vectors
    from embtransfer.vocab.inputs import (
        all_shared_kinds,
        shared_kinds_inputs,
        shared_kinds_params,
    )

    pairs = target_pairs(config)
    assert len(pairs) == 3 * len(FAMILIES)
    assert all_plm_probes(config) == [f"results/seed{seed}/probes/{lang}/{s}/{t}.json"
                                      for seed in config["seeds"] for lang, s, t in pairs]
    salt = {(r.lang, r.source, target_model(r.target)) for r in transfer_runs(config)
            if r.method == "salt"}
    assert salt == set(pairs)  # SALT's neighbour tables are built for every PLM anyway
    for lang, source, target in pairs:
        inputs = plm_probe_inputs(config, {"lang": lang, "source": source, "target": target})
        assert set(inputs) == {"plm", "overlap"}  # no world: no class probe
    assert salt_vectors(config) == "word"  # the neighbour tables fastText's word vectors give
    assert all_shared_kinds(config) == ["results/overlap/shared_kinds.csv"]
    inputs = shared_kinds_inputs(config)
    assert "world" not in inputs and len(inputs["vocab"]) == len(pairs)
    assert shared_kinds_params(config) == [
        {"lang": lang, "source": s, "target": t, "lexicon": "wordfreq", "other": "en"}
        for lang, s, t in pairs
    ]


def test_make_real_data_is_not_refused_as_offline() -> None:
    """`make real-data` builds resources/real from the package archives: its Snakemake call
    sets none of the variables that make a run offline, which would refuse it for the very
    files it builds (check_real_data)."""
    from embtransfer.data.download import OFFLINE_VARS

    makefile = (REPO / "Makefile").read_text()
    recipe = makefile.split("\nreal-data:", 1)[1].split("\n\n", 1)[0]
    call = next(line for line in recipe.splitlines() if "snakemake" in line)
    assert not [var for var in OFFLINE_VARS if f"{var}=" in call], call
