"""Result tables from fixture records: exact text, ranks, malformed files named."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from embtransfer.report.records import MalformedResultError, read_records
from embtransfer.report.tables import markdown
from embtransfer.report.zeroshot import write_zeroshot_table, zeroshot_frame


def record(method, bpb, target="gpt2_x", lang="xx", source="src"):
    rec = {"lang": lang, "source": source, "method": method, "loss": bpb * 2,
           "perplexity": 2.0 ** bpb, "bits_per_byte": bpb}
    if method != "source_model":
        rec["target"] = target
    return rec


def test_markdown_renders_numbers_and_dashes():
    frame = pd.DataFrame({"m": ["a", "b"], "v": [0.5, float("nan")]})
    assert markdown(frame) == "| m | v |\n|---|---|\n| a | 0.5000 |\n| b | — |"


def test_ranks_are_per_setting_and_skip_the_source_model():
    frame = zeroshot_frame([
        record("salt", 1.0), record("random", 3.0), record("focus", 1.0),
        record("salt", 2.0, target="bert_x"), record("random", 1.5, target="bert_x"),
        record("source_model", 0.5),
    ])
    ranks = {(r.target, r.method): r.rank for r in frame.itertuples()}
    assert ranks[("gpt2_x", "salt")] == ranks[("gpt2_x", "focus")] == 1
    assert ranks[("gpt2_x", "random")] == 3
    assert ranks[("bert_x", "random")] == 1 and ranks[("bert_x", "salt")] == 2
    assert pd.isna(ranks[("(source tokenizer)", "source_model")])


def test_a_method_alone_in_its_setting_and_the_oracle_are_not_ranked():
    frame = zeroshot_frame([
        record("salt", 2.0), record("focus", 1.0), record("world_oracle", 0.5),
        record("salt", 3.0, target="bert_x"), record("world_oracle", 0.1, target="bert_x"),
    ])
    ranks = {(r.target, r.method): r.rank for r in frame.itertuples()}
    assert ranks[("gpt2_x", "focus")] == 1 and ranks[("gpt2_x", "salt")] == 2
    assert pd.isna(ranks[("gpt2_x", "world_oracle")])
    assert pd.isna(ranks[("bert_x", "salt")]) and pd.isna(ranks[("bert_x", "world_oracle")])


def test_written_table_has_the_expected_text(tmp_path):
    records = [record("salt", 1.0), record("random", 3.0), record("source_model", 0.5),
               record("salt", 2.0, target="bert_x")]
    write_zeroshot_table(records, tmp_path / "t.csv", tmp_path / "t.md")
    text = (tmp_path / "t.md").read_text()
    # salt ran alone with bert_x: shown, not ranked, not a win (a method alone wins nothing)
    assert ("| method | mean_rank | wins | ranked_settings | mean_bits_per_byte | "
            "unranked_settings |") in text
    assert "| salt | 1.0000 | 1 | 1 | 1.0000 | 1 |" in text
    assert "| random | 2.0000 | 0 | 1 | 3.0000 | 0 |" in text
    assert "The source model with its own tokenizer: 0.5000 bits per byte." in text
    # random has no bert_x result: the pivot says so with a dash, never a made-up number.
    assert "| method | bert_x | gpt2_x |" in text
    assert "| random | — | 3.0000 |" in text
    csv = pd.read_csv(tmp_path / "t.csv")
    assert list(csv["method"]) == ["source_model", "salt", "salt", "random"]


def test_malformed_or_incomplete_results_are_named(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(MalformedResultError, match="bad.json is malformed"):
        read_records([bad])
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"lang": "xx", "source": "s", "method": "salt"}))
    with pytest.raises(MalformedResultError, match=r"partial.json lacks the keys \['loss'"):
        read_records([partial])
