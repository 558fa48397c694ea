"""Integration: a slice of config/real_small.yaml on the real-text fixtures runs to its report.

The slice keeps one target language (German, with its FreeDict dictionary split in halves),
the source and one GPT-2 PLM at tiny sizes, SALT and Random, and one LAPT run, in a copy of
the workflow (tests/fixtures/real: 300 lines a language), in one Snakemake call that writes
the report archive after the run (``--report-after-run``). The report's real-text outputs
must exist and show under their own category, the alignment truth must come from the
dictionary's held-out half alone, and the PLM's span probe and its shared-token figures
must stand in the report. (WECHSEL and OFA need fastText vectors of the dictionary's words,
which 300 lines a language do not give.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from embtransfer.core.workflow_copy import copy_workflow

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "real"

pytestmark = pytest.mark.slow

TINY = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64,
        "max_position_embeddings": 64}
TRAIN = {"steps": 10, "batch_size": 4, "seq_len": 32, "warmup_steps": 2, "valid_batches": 1,
         "log_every": 5}


def sliced_config() -> dict:
    """config/real_small.yaml cut to German, tiny models and four methods, on the fixtures."""
    config = yaml.safe_load((REPO / "config" / "real_small.yaml").read_text())
    corpus = lambda lang: {"type": "local", "train": str(FIXTURES / f"{lang}.txt"),  # noqa: E731
                           "valid_fraction": 0.1}
    config["languages"] = {
        "en": {"corpus": corpus("en")},
        "de": {"corpus": corpus("de"),
               "dictionary": {"type": "freedict", "held_out": True,
                              "path": str(FIXTURES / "freedict-eng-deu.index")}},
    }
    source = config["models"]["llama_en"]
    source |= {"mix": {"de": 0.1}, "architecture": TINY, "train": TRAIN}
    source["tokenizer"]["vocab_size"] = 600
    gpt2 = config["models"]["gpt2_de"] | {"architecture": TINY, "train": TRAIN}
    gpt2["tokenizer"] = gpt2["tokenizer"] | {"vocab_size": 500}
    config["models"] = {"llama_en": source, "gpt2_de": gpt2}
    config["targets"] = {"de": ["gpt2_de"]}  # no extended setting: no Token Distillation
    config["transfer"]["methods"] = ["salt", "random"]
    config["transfer"]["select"] = None
    # German's share of held-out shared tokens (the Arabic one names a language cut here)
    config["transfer"]["holdout"] = {"share": config["transfer"]["holdout"]["share"]}
    config["seeds"] = [config["seed"]]  # one draw keeps the run short (seeds: tests/test_seeds*)
    config["zeroshot"] = {"max_length": 32, "batch_size": 8, "max_lines": 30}
    for level in ("word", "token"):
        config["fasttext"][level] |= {"dim": 16, "epoch": 1, "min_count": 1, "bucket": 2000}
    config["lapt"] |= {"select": [{"methods": ["salt"]}], "max_length": 32, "max_steps": 4,
                       "global_batch_size": 4, "micro_batch_size": 4, "log_every": 1,
                       "eval_batches": 1, "mem_mb": 1000, "runtime": 5}
    return config


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    workdir = copy_workflow(tmp_path_factory.mktemp("real"))
    (workdir / "test_config.yaml").write_text(yaml.safe_dump(sliced_config(),
                                                             allow_unicode=True))
    env = dict(os.environ, PYTHONPATH=str(workdir / "workflow"))
    base = [sys.executable, "-m", "snakemake", "--directory", str(workdir), "--snakefile",
            str(workdir / "Snakefile"), "--configfile", str(workdir / "test_config.yaml")]
    args = ["--cores", "2", "report", "calibration_table", "--report", "report.zip",
            "--report-after-run"]
    proc = subprocess.run([*base, *args], capture_output=True, text=True, env=env, cwd=workdir)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-4000:]}"
    return workdir


def test_the_report_writes_the_real_text_outputs(real_run: Path) -> None:
    report = real_run / "results" / "report"
    floor = pd.read_csv(report / "source_floor.csv")
    held = floor[floor["text"] == "held-out"].iloc[0]
    assert held["source"] == "llama_en" and held["lang"] == "en"
    assert held["unigram_bits_per_byte"] > 0 and held["kn_bigram_bits_per_byte"] > 0
    assert list(floor.loc[floor["text"] == "control", "lang"]) == ["de"]
    summaries = pd.read_csv(report / "summaries.csv")
    zeroshot = summaries[summaries["family"] == "zeroshot"]
    assert {"salt", "random", "source_model"} <= set(zeroshot["method"])
    lapt = summaries[summaries["family"] == "lapt_zeroshot"]
    assert list(lapt["method"]) == ["salt"] and lapt["n"].iloc[0] >= 2
    # the alignment of both stages against the dictionary's held-out half (the fixtures'
    # 300 lines give a 500-token vocabulary few of the held-out words are whole tokens of)
    seeded = real_run / "results" / "seed1234"
    truth = json.loads((seeded / "truth_dictionary" / "de" / "llama_en" / "gpt2_de.json"
                        ).read_text())
    assert truth["held_out_pairs"] > 0
    for stage in ("transfer", "lapt"):
        assert (seeded / "alignment" / stage / "de" / "llama_en" / "gpt2_de.parquet").is_file()
    assert (report / "alignment.md").is_file()
    findings = (report / "findings.md").read_text()
    assert findings.startswith("# What real text shows") and "one seed" in findings
    table5 = (report / "table5.md").read_text()
    assert "30%" in table5 or "0.3" in table5


def test_the_report_probes_the_plm_and_sets_its_shared_tokens_beside_the_real_ranges(
    real_run: Path,
) -> None:
    """The PLM's span probe (no class probe: real text has no concept classes) and the
    pair's shared-token figures, measured with German's wordfreq lexicon, beside the
    committed German range."""
    report = real_run / "results" / "report"
    probes = pd.read_csv(report / "plm_probes.csv")
    assert probes[["lang", "source", "target"]].values.tolist() == [["de", "llama_en",
                                                                     "gpt2_de"]]
    assert probes["span_items"].iloc[0] > 0 and not any(c.startswith("class")
                                                        for c in probes.columns)
    assert "not measured on real text" in (report / "plm_probes.md").read_text()
    assert "The target PLMs SALT recycles" in (report / "findings.md").read_text()
    kinds = pd.read_csv(real_run / "results" / "overlap" / "shared_kinds.csv")
    assert kinds[["lang", "source", "target"]].values.tolist() == [["de", "llama_en",
                                                                    "gpt2_de"]]
    assert 0 < kinds["vocab_coverage_pct"].iloc[0] <= 100
    assert kinds["word_pct"].iloc[0] > 0  # German words from wordfreq among the shared
    calibration = pd.read_csv(report / "calibration.csv")
    assert set(calibration["lang"]) == {"de"} and set(calibration["real_lang"]) == {"de"}
    assert len(calibration) == 9 and (calibration["real_low"] <= calibration["real_high"]).all()
    assert "this run's pairs beside the committed de figures" in (
        report / "calibration.md").read_text()


def test_the_report_shows_under_real_text(real_run: Path) -> None:
    import zipfile

    with zipfile.ZipFile(real_run / "report.zip") as archive:
        text = "".join(archive.read(name).decode("utf-8", "replace")
                       for name in archive.namelist() if name.endswith((".js", ".html")))
    assert "Real text" in text


def test_the_dictionary_halves_are_disjoint(real_run: Path) -> None:
    """The split the run made (seeded by the config) has halves that share no English
    headword and no target word, and every word the alignment truth means is a held-out
    headword."""
    from embtransfer.data.dictionaries import read_freedict  # noqa: PLC0415
    from embtransfer.data.dictionary_split import split_dictionary, word_key  # noqa: PLC0415

    config = sliced_config()
    split = split_dictionary(read_freedict(FIXTURES / "freedict-eng-deu.index"),
                             config["seed"], config["dictionary_held_out"])
    fitted = {word_key(s) for s, _ in split.dictionary}
    held = {word_key(s) for s, _ in split.held_out}
    assert fitted and held and not fitted & held
    assert not {word_key(t) for _, t in split.dictionary} & {word_key(t)
                                                            for _, t in split.held_out}
    results = real_run / "results" / "seed1234"
    truth = pd.read_parquet(results / "truth_dictionary" / "de" / "llama_en" / "gpt2_de.parquet")
    meant = {word_key(m.removeprefix("word:")) for m in truth["meaning"].dropna()}
    assert meant <= held and not meant & fitted
