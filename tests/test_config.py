"""Config validation: every default filled in one step, then checks that change nothing and
name the offending key."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from embtransfer.config.validation import (
    ConfigError,
    check_config,
    check_lapt,
    check_references,
    check_transfer,
    fill_defaults,
    validate_config,
)
from embtransfer.core.grid import target_pairs
from embtransfer.core.schema import fill_schema_defaults

REPO = Path(__file__).parents[1]
DEFAULT = yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def fresh() -> dict:
    return copy.deepcopy(DEFAULT)


def test_default_config_validates_and_fills_defaults():
    config = fresh()
    del config["overlap"]
    del config["neighbors"]
    validate_config(config)
    assert config["overlap"] == {"match": "fuzzy"}
    assert config["neighbors"]["prefilter_k"] == 256
    assert config["languages"]["en_mini"]["fasttext"] == {"type": "train"}
    assert config["world"], "world defaults are filled from world.schema.yaml"
    # one source; GPT-2 in ar_mini, all three PLM families in vi_mini
    assert len(target_pairs(config)) == 1 + 3


def test_defaults_come_only_from_the_matching_oneof_branch():
    config = fresh()
    config["languages"]["ar_mini"]["corpus"] = {"type": "local", "train": "x.txt"}
    config["transfer"] = {"methods": ["salt"]}
    validate_config(config)
    assert config["languages"]["ar_mini"]["corpus"]["valid_fraction"] == 0.1
    assert config["languages"]["vi_mini"]["corpus"] == {"type": "mini"}


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda c: c.update(neighbours={}), "'neighbours' was unexpected"),
        (lambda c: c["neighbors"].update(prefilter=3), "config key neighbors: "),
        (lambda c: c["neighbors"].update(chunk_rows="big"), "config key neighbors.chunk_rows"),
        (lambda c: c["overlap"].update(match="loose"), "config key overlap.match"),
        (lambda c: c["fasttext"]["word"].update(dim=-1), "config key fasttext.word.dim"),
        (lambda c: c.update(seed="x"), "config key seed"),
        (
            lambda c: c["languages"]["ar_mini"].update(corpus={"type": "mini", "trian": 1}),
            "languages.ar_mini.corpus",
        ),
    ],
)
def test_schema_errors_name_the_key(mutate, needle):
    config = fresh()
    mutate(config)
    with pytest.raises(ConfigError) as err:
        validate_config(config)
    assert needle in str(err.value)


def test_misspelled_key_lists_the_allowed_ones():
    config = fresh()
    config["neighbors"]["chunk_row"] = 5
    with pytest.raises(ConfigError, match="chunk_row.*Allowed keys here: chunk_rows"):
        validate_config(config)


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda c: c["sources"].append("gpt9"), "sources: model 'gpt9' is not defined"),
        (
            lambda c: c["targets"]["ar_mini"].append("bert_vi_mini"),
            "'bert_vi_mini' is a 'vi_mini' model",
        ),
        (lambda c: c["targets"].update(de=["gpt2_ar_mini"]), "language 'de' is not defined"),
        (
            lambda c: c["models"]["llama_mini"].update(mix={"xx": 0.1}),
            "models.llama_mini: language 'xx'",
        ),
        (
            lambda c: c["transfer"].update(holdout={"share": 0.2, "by_language": {"de": 0.3}}),
            "transfer.holdout.by_language.de: language 'de' is not defined",
        ),
    ],
)
def test_reference_errors_name_the_key(mutate, needle):
    config = fresh()
    mutate(config)
    with pytest.raises(ConfigError, match=needle):
        validate_config(config)


def test_methods_that_align_spaces_need_a_dictionary():
    config = fresh()
    config["languages"]["ar_mini"]["corpus"] = {"type": "local", "train": "x.txt"}
    config["transfer"] = {"methods": ["salt", "wechsel"]}
    with pytest.raises(ConfigError, match="languages.ar_mini.dictionary: method 'wechsel'"):
        validate_config(config)
    config = fresh()
    config["transfer"] = {"methods": ["ofa"]}
    config["report"]["focus_method"] = "ofa"  # the report's focus must be a method that runs
    validate_config(config)
    assert config["languages"]["vi_mini"]["dictionary"] == {"type": "world"}
    assert config["source_language"] == "en_mini"


def test_a_freedict_dictionary_is_a_dictionary_format():
    config = fresh()
    config["languages"]["ar_mini"]["corpus"] = {"type": "local", "train": "x.txt"}
    config["languages"]["ar_mini"]["dictionary"] = {
        "type": "freedict", "path": "/usr/share/dictd/freedict-eng-ara.index"}
    config["transfer"] = {"methods": ["wechsel"]}
    config["report"] = {"focus_method": "wechsel"}  # Tables 4-5 need a method the run has
    validate_config(config)
    assert config["languages"]["ar_mini"]["dictionary"]["reverse"] is False  # the default
    config["languages"]["ar_mini"]["dictionary"]["direction"] = "reverse"
    with pytest.raises(ConfigError, match="languages.ar_mini.dictionary"):
        validate_config(config)


def test_a_method_of_extended_vocabularies_is_refused_in_a_replaced_run():
    config = fresh()
    config["transfer"] = {"methods": ["salt", "token_distillation"]}
    with pytest.raises(ConfigError, match="transfer.methods: method 'token_distillation' works "
                                          "with transfer.vocab_mode extend.*'replace'"):
        validate_config(config)
    config = fresh()
    config["transfer"] = {"methods": ["salt", "token_distillation"], "vocab_mode": "extend"}
    validate_config(config)
    # ... or where one setting is extended: a target written <model>@extend
    config = fresh()
    config["targets"]["ar_mini"] = ["gpt2_ar_mini", "gpt2_ar_mini@extend"]
    config["transfer"] = {"methods": ["salt", "token_distillation"],
                          "select": [{"targets": ["gpt2_ar_mini@extend"]}]}
    validate_config(config)


@pytest.mark.parametrize("name, message", [
    ("gpt2_ar_mini@expand", r"targets\.ar_mini: 'gpt2_ar_mini@expand' asks for vocabulary mode "
                            r"'expand'; write gpt2_ar_mini@extend"),
    ("gpt2_xx@extend", r"targets\.ar_mini: model 'gpt2_xx' is not defined under models"),
])
def test_a_target_with_a_bad_mode_or_model_is_named(name, message):
    config = fresh()
    config["targets"]["ar_mini"] = ["gpt2_ar_mini", name]
    with pytest.raises(ConfigError, match=message):
        validate_config(config)


def test_unknown_method_lists_the_known_ones():
    config = fresh()
    config["transfer"] = {"methods": ["salt", "salty"]}
    with pytest.raises(ConfigError, match="transfer.methods.1: 'salty' is not one of.*'focus'"):
        validate_config(config)


def test_report_settings_a_run_refuses_are_refused_by_the_file_loader(tmp_path):
    """load_config_file (the entry point outside Snakemake) runs every check a run runs."""
    from embtransfer.config.validation import load_config_file

    config = fresh()
    config["transfer"]["methods"] = ["salt", "focus"]
    config["report"] = {"methods": ["salt", "ofa"]}  # a row of a method that never ran
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError, match=r"report\.methods: 'ofa' is not one of transfer"):
        load_config_file(path)
    config["report"] = {"paper_names": {"sources": {"nosuch": "Gemma"}}}
    with pytest.raises(ConfigError, match=r"report\.paper_names\.sources: \['nosuch'\]"):
        validate_config(config)


def test_lapt_selection_names_a_bad_key():
    config = fresh()
    config["lapt"] = {"select": [{"methods": ["salt", "nosuch"]}]}
    with pytest.raises(ConfigError, match=r"lapt\.select\.0\.methods: \[.nosuch.\] unknown"):
        validate_config(config)


def test_transfer_selection_names_a_bad_key():
    config = fresh()
    config["transfer"] = {"select": [{"targets": ["gpt2_ar_mini", "gpt2_xx"]}]}
    with pytest.raises(ConfigError, match=r"transfer\.select\.0\.targets: \[.gpt2_xx.\] unknown"):
        validate_config(config)


def test_gpu_only_transfers_are_planned_only_where_the_run_declares_a_gpu():
    from embtransfer.core.grid import gpu_only_note, lapt_runs, transfer_runs

    config = fresh()
    config["transfer"]["gpu_only"] = [{"targets": ["gpt2_vi_mini"], "methods": ["omp"]}]
    config = validate_config(config)
    every = validate_config(fresh())
    left = [r for r in transfer_runs(every) if r.target == "gpt2_vi_mini" and r.method == "omp"]
    assert len(left) == 1
    # on CPU: left out of the transfers and of everything built on them, and named
    assert transfer_runs(config) == [r for r in transfer_runs(every) if r not in left]
    assert left[0] not in lapt_runs(config)
    assert gpu_only_note(config) == ("transfer.gpu_only: 1 transfer(s) left out, as "
                                     "transfer.device is not cuda: vi_mini gpt2_vi_mini omp")
    for device, planned in (("auto", False), ("cpu", False), ("cuda", True)):
        config["transfer"]["device"] = device
        assert (left[0] in transfer_runs(config)) == planned, device
    assert gpu_only_note(config) is None
    config["transfer"]["gpu_only"] = [{"methods": ["nosuch"]}]
    with pytest.raises(ConfigError, match=r"transfer\.gpu_only\.0\.methods: \[.nosuch.\]"):
        validate_config(config)


def test_lapt_selection_is_a_union_of_products():
    from embtransfer.core.grid import lapt_runs, transfer_runs

    config = validate_config(fresh())
    runs = lapt_runs(config)
    expected = [r for r in transfer_runs(config) if r.source == "llama_mini"
                and (r.target.startswith("gpt2_") or r.method == "salt")]
    assert runs == expected
    config["lapt"]["enabled"] = False
    assert lapt_runs(config) == []


# -- defaults, then checks -------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted((REPO / "config").glob("*.yaml")), ids=lambda p: p.name)
def test_the_checks_change_nothing_in_a_filled_config(path):
    config = fill_defaults(yaml.safe_load(path.read_text()))
    filled = copy.deepcopy(config)
    check_config(config)
    assert config == filled


def test_defaults_that_follow_from_other_keys_are_filled_before_the_checks():
    config = fresh()
    del config["transfer"]["select"]  # methods not given: the world's run adds its oracle
    config["lapt"] = {"replay": {"ratio": 0.1}}
    fill_defaults(config)
    assert config["transfer"]["methods"][-1] == "world_oracle"
    assert config["source_language"] == config["world"]["source_language"] == "en_mini"
    assert config["lapt"]["replay"]["language"] == "en_mini"
    config = fresh()
    config["transfer"] = {"methods": ["salt", "wechsel"]}
    config["report"] = {"focus_method": "wechsel"}
    fill_defaults(config)
    assert config["transfer"]["methods"] == ["salt", "wechsel"]  # a listed grid stays as listed
    assert config["languages"]["ar_mini"]["dictionary"] == {"type": "world"}
    assert "dictionary" not in config["languages"]["en_mini"]  # not a target
    filled = copy.deepcopy(config)
    for check in (check_references, check_transfer, check_lapt):
        check(config)
        assert config == filled, check.__name__


def test_a_config_the_checks_refuse_gets_the_schemas_defaults_only():
    config = fresh()
    config["sources"] = ["gpt9"]  # refused by the references check
    config["lapt"] = {"replay": {"ratio": 0.1}}
    fill_defaults(config)
    assert config["lapt"]["replay"] == {"language": None, "ratio": 0.1}  # the schema's default
    assert config["source_language"] is None
    with pytest.raises(ConfigError, match="sources: model 'gpt9' is not defined"):
        check_config(config)


@pytest.mark.parametrize(
    ("mutate", "check", "needle"),
    [
        (lambda c: c["lapt"].update(replay={"ratio": 0.1, "language": "xx"}), check_lapt,
         r"lapt\.replay\.language: .* got 'xx'"),
        (lambda c: c["lapt"].update(select=[{"methods": ["nosuch"]}]), check_lapt,
         r"lapt\.select\.0\.methods"),
        (lambda c: c["transfer"].update(options={"salt": {"bogus": 1}}), check_transfer,
         r"transfer\.options\.salt: unknown option"),
        (lambda c: c.update(source_language="xx"), check_transfer,
         r"source_language: method 'wechsel' aligns"),
    ],
)
def test_each_check_on_a_filled_config_names_the_bad_key(mutate, check, needle):
    config = fresh()
    config["transfer"] = {"methods": ["wechsel"]}
    config["report"] = {"focus_method": "wechsel"}
    mutate(config)
    fill_defaults(config)
    filled = copy.deepcopy(config)
    with pytest.raises(ConfigError, match=needle):
        check(config)
    assert config == filled


def test_the_schema_filler_fills_properties_refs_and_the_matching_branch_only():
    schema = {
        "$defs": {"size": {"type": "integer", "default": 3}},
        "type": "object",
        "properties": {
            "a": {"type": "object", "default": {}, "properties": {"b": {"default": 1}}},
            "n": {"$ref": "#/$defs/size"},
            "items": {"type": "array", "items": {"properties": {"c": {"default": "x"}}}},
            "by_name": {"additionalProperties": {"properties": {"d": {"default": 2}}}},
            "pick": {"oneOf": [
                {"required": ["k"], "properties": {"k": {"const": 1}, "e": {"default": 1}},
                 "additionalProperties": False},
                {"required": ["k"], "properties": {"k": {"const": 2}, "f": {"default": 2}},
                 "additionalProperties": False},
            ]},
        },
    }
    doc = {"items": [{}, {"c": "y"}], "by_name": {"p": {}}, "pick": {"k": 2}, "n": "bad"}
    assert fill_schema_defaults(schema, doc) is doc
    assert doc == {"items": [{"c": "x"}, {"c": "y"}], "by_name": {"p": {"d": 2}},
                   "pick": {"k": 2, "f": 2}, "n": "bad", "a": {"b": 1}}
    assert fill_schema_defaults(schema, []) == []  # not an object: nothing to fill, no error


@pytest.mark.parametrize(
    ("model", "key", "value", "needle"),
    [
        ("bert_ar_mini", "mlm_probability", 1.5, "greater than or equal to the maximum of 1"),
        ("bert_ar_mini", "mlm_probability", 0, "less than or equal to the minimum of 0"),
        ("t5_vi_mini", "noise_density", 1.0, "greater than or equal to the maximum of 1"),
        ("t5_vi_mini", "noise_density", "high", "is not of type"),
        ("gpt2_ar_mini", "mlm_probability", 0.4, "a bert model's setting, not a gpt2 one's"),
        ("bert_vi_mini", "noise_density", 0.4, "a t5 model's setting, not a bert one's"),
    ],
)
def test_objective_rates_are_checked_per_model(model, key, value, needle):
    """train.mlm_probability (bert) and train.noise_density (t5): a rate in (0, 1), on the
    family whose objective has it; the error names the key."""
    config = fresh()
    config["models"][model].setdefault("train", {})[key] = value
    with pytest.raises(ConfigError) as err:
        validate_config(config)
    assert f"config key models.{model}.train.{key}: " in str(err.value)
    assert needle in str(err.value)
    config = fresh()
    config["models"][model]["train"][key] = None  # null: the family's standard 0.15
    assert validate_config(config)["models"][model]["train"][key] is None
