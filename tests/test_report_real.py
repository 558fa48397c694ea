"""The report of a real-text run: the source's floor table, the final LAPT checkpoints'
comparison, and its own category in `snakemake --report`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from embtransfer.config.validation import validate_config

REPO = Path(__file__).resolve().parents[1]


def _documents(n: int, scale: float, seed: int) -> tuple[list[float], list[int]]:
    rng = np.random.default_rng(seed)
    n_bytes = rng.integers(40, 120, size=n)
    return [float(v) for v in n_bytes * scale * math.log(2)], [int(v) for v in n_bytes]


def test_the_floor_table_reads_the_floor_record_and_the_control_lines(tmp_path) -> None:
    from embtransfer.report.diagnostics import floor_frame, write_source_floor

    nll, n_bytes = _documents(20, 1.3, 0)
    floor = tmp_path / "results" / "intrinsic" / "source_floor" / "src.json"
    floor.parent.mkdir(parents=True)
    floor.write_text(json.dumps({
        "model_bits_per_byte": 1.3, "unigram_bits_per_byte": 2.2,
        "kn_bigram_bits_per_byte": 1.5, "below_unigram": 1 - 1.3 / 2.2,
        "below_kn_bigram": 1 - 1.3 / 1.5, "clears_floor": True, "documents": 20,
        "bytes": sum(n_bytes), "document_bytes": n_bytes,
        "document_nll_nats": {"model": nll, "unigram": nll, "kn_bigram": nll}}))
    control = tmp_path / "results" / "zeroshot" / "xx" / "src" / "source_model.json"
    other = tmp_path / "results" / "zeroshot" / "xx" / "other" / "source_model.json"
    nll_xx, bytes_xx = _documents(10, 2.9, 1)
    for path, source in ((control, "src"), (other, "other")):
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({
            "lang": "xx", "source": source, "method": "source_model", "loss": 1.0,
            "bits_per_byte": 2.9, "bytes": sum(bytes_xx), "document_bytes": bytes_xx,
            "document_nll_nats": nll_xx}))
    transferred = tmp_path / "results" / "zeroshot" / "xx" / "src" / "t" / "salt.json"
    frame = floor_frame([str(floor)], {"src": "en"}, [str(control), str(other),
                                                      str(transferred)])
    assert list(frame["text"]) == ["held-out", "control"]  # not the source without a floor
    held = frame.iloc[0]
    assert (held["source"], held["lang"], held["documents"]) == ("src", "en", 20)
    assert held["bits_per_byte"] == 1.3 and held["clears_floor"]
    assert 0 < held["bits_per_byte_se"] < 0.1
    assert frame.iloc[1]["lang"] == "xx" and math.isnan(frame.iloc[1]["unigram_bits_per_byte"])
    written = write_source_floor([str(floor)], {"src": "en"}, [str(control)],
                                 tmp_path / "f.csv", tmp_path / "f.md")
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "f.csv"), written,
                                  check_dtype=False)
    text = (tmp_path / "f.md").read_text()
    assert "| src | en | 1.3000 ± " in text and "| 40.9 % | 13.3 % | yes |" in text
    assert "## Control" in text
    empty = write_source_floor([], {}, [], tmp_path / "e.csv", tmp_path / "e.md")
    assert empty.empty and "no source pretrained here" in (tmp_path / "e.md").read_text()


def test_a_real_text_run_is_told_by_its_config() -> None:
    from embtransfer.core.grid import real_text_run

    real = validate_config(yaml.safe_load((REPO / "config" / "real_small.yaml").read_text()))
    world = validate_config(yaml.safe_load((REPO / "config" / "config.yaml").read_text()))
    assert real_text_run(real) and not real_text_run(world)
    # a random-weight source at real shapes compares no method: not a real-text run
    timing = validate_config(yaml.safe_load((REPO / "config" / "real_text.yaml").read_text()))
    assert not real_text_run(timing)


def test_a_real_text_runs_outputs_show_under_their_own_category() -> None:
    from embtransfer.report.build import output_names
    from embtransfer.report.inputs import REAL_TEXT, report_entry

    for name in output_names():
        usual, real = report_entry(name), report_entry(name, real_text=True)
        assert real["category"] == REAL_TEXT
        assert real["subcategory"].startswith(usual["category"])
        assert real["caption"] == usual["caption"] and real["labels"] == usual["labels"]
    assert report_entry("table5_md", True)["subcategory"] == (
        "Paper tables: Table 5: eval loss during LAPT")
    assert report_entry("source_floor_csv")["caption"] == "../report/source_floor.rst"


def test_the_real_run_reads_its_floor_and_its_final_lapt_checkpoints() -> None:
    from embtransfer.report.inputs import report_inputs

    config = validate_config(yaml.safe_load((REPO / "config" / "real_small.yaml").read_text()))
    inputs = report_inputs(config)
    assert inputs["source_floor"] == ["results/intrinsic/source_floor/llama_en.json"]
    # every GPT-2 checkpoint of every language: 16 methods in de and ar, 14 in vi (no
    # dictionary, so no WECHSEL or OFA), and 4 in each extended setting
    assert len(inputs["lapt_zeroshot"]) == len(inputs["lapt"]) == 16 + 16 + 14 + 3 * 4
    for lang in ("de", "ar", "vi"):
        assert f"results/seed1234/lapt_zeroshot/{lang}/llama_en/gpt2_{lang}/salt.json" in inputs[
            "lapt_zeroshot"]
    assert config["lapt"]["eval_fractions"] == [0.3, 0.6, 0.9, 1.0]


def test_a_real_text_runs_report_writes_the_real_findings(tmp_path, monkeypatch) -> None:
    """The rule's params say a run is a real-text one; its findings.md is then the real
    variant (its limits stated), whose opening report.md quotes."""
    import shutil

    from test_report import FIXTURES, fixture_config, marked_inputs

    from embtransfer.report.build import config_subset, output_names, write_report

    assert config_subset(validate_config(yaml.safe_load(
        (REPO / "config" / "real_small.yaml").read_text())))["real_text"]
    shutil.copytree(FIXTURES / "results", tmp_path / "results")
    monkeypatch.chdir(tmp_path)
    for real in (False, True):
        outputs = output_names(str(tmp_path / f"report_{real}"))
        write_report(fixture_config() | {"real_text": real}, marked_inputs(tmp_path), outputs,
                     dpi=30)
        findings = Path(outputs["findings"]).read_text()
        title, opening = findings.split("\n\n")[:2]
        assert title == ("# What real text shows" if real else "# What the run shows")
        assert opening.startswith("- **") and opening in Path(outputs["report_md"]).read_text()
        assert ("A real-text run holds for its own models and text" in findings) is real
