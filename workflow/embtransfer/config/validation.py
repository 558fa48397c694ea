"""Load and validate the workflow configuration: defaults first, then checks.

:func:`validate_config` runs two steps. :func:`fill_defaults` fills every default: the
JSON schemas' (``workflow/schemas/*.schema.yaml``, through
:func:`embtransfer.core.schema.fill_schema_defaults`), then those that follow from other
keys (the world's source language, its dictionaries, the replay language, the world run's
oracle method). :func:`check_config` then checks and changes nothing: keys and types
against the schema, then what a schema cannot say (a source model key that is not defined,
a target PLM of the wrong language, method options, selections, evaluation tasks, report
rows). Errors name the offending key as a dotted path, so a misspelling is found at
start-up, not after hours of compute.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from embtransfer.core.errors import ConfigError  # also imported from here (errors.py says why)
from embtransfer.core.grid import (
    MODE_SEPARATOR,
    target_mode,
    target_model,
    target_models,
    target_settings,
    transfer_runs,
    written_mode,
)
from embtransfer.core.schema import fill_schema_defaults
from embtransfer.core.vocab_modes import VOCAB_MODES, method_modes
from embtransfer.evaluation.config_check import check_evaluation
from embtransfer.lapt.settings import schema_defaults as lapt_defaults
from embtransfer.models.mini_settings import DEFAULT_ARCHITECTURE, DEFAULT_TRAIN, RATE_KEYS
from embtransfer.report.check import check_report
from embtransfer.transfer.method_catalog import (
    DEFAULT_METHODS,
    METHODS,
    OptionError,
    method_needs,
    resolve_options,
)

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas"


def _embed(root: dict[str, Any], sub: dict[str, Any], prefix: str) -> dict[str, Any]:
    """Move ``sub``'s ``$defs`` into ``root`` under ``prefix`` and rewrite its refs.

    A sub-schema's ``#/$defs/x`` refs point at its own root; once embedded in the
    config schema they must point at the config schema's ``$defs``.
    """
    defs = sub.pop("$defs", {})
    sub.pop("$schema", None)

    def rewrite(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: (
                    v.replace("#/$defs/", f"#/$defs/{prefix}")
                    if k == "$ref" and isinstance(v, str)
                    else rewrite(v)
                )
                for k, v in node.items()
            }
        if isinstance(node, list):
            return [rewrite(v) for v in node]
        return node

    root.setdefault("$defs", {}).update({prefix + k: rewrite(v) for k, v in defs.items()})
    return rewrite(sub)


def _read_yaml(path: Path) -> Any:
    # libyaml's loader when PyYAML has it: the schemas are read on every Snakefile parse.
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def load_schema() -> dict[str, Any]:
    """The config schema, with the world and model sub-schemas put in place."""
    schema = _read_yaml(SCHEMA_DIR / "config.schema.yaml")
    world = _read_yaml(SCHEMA_DIR / "world.schema.yaml")
    model = _read_yaml(SCHEMA_DIR / "model.schema.yaml")
    schema["properties"]["world"] = _embed(schema, world, "world_")
    schema["properties"]["models"]["additionalProperties"] = _embed(schema, model, "model_")
    # Stages with their own schema file, each a top-level section of the config.
    for section, name in (("lapt", "lapt"), ("evaluation", "evaluation"), ("report", "report")):
        sub = _read_yaml(SCHEMA_DIR / f"{name}.schema.yaml")
        schema["properties"][section] = _embed(schema, sub, f"{name}_")
    # The trainer's defaults come from lapt/settings.py, the one place they are written.
    _take_defaults(schema["properties"]["lapt"], lapt_defaults())
    # A mini model's sizes and training budget come from models/mini_settings.py likewise.
    mini = schema["$defs"]["model_mini"]["properties"]
    _take_defaults(mini["architecture"], DEFAULT_ARCHITECTURE)
    _take_defaults(mini["train"], DEFAULT_TRAIN)
    # The method names come from the method catalog, the one place that lists methods; their
    # options are checked by check_transfer with the catalog's resolve_options.
    transfer = schema["properties"]["transfer"]["properties"]
    transfer["methods"]["items"] = {"enum": list(METHODS)}
    transfer["methods"]["default"] = list(DEFAULT_METHODS)
    transfer["options"]["propertyNames"] = {"enum": list(METHODS)}
    return schema


def _take_defaults(schema: dict[str, Any], defaults: dict[str, Any]) -> None:
    """Write ``defaults`` into ``schema`` as its properties' ``default`` values (a dict value
    writes the property's own properties, at any depth). The schema's defaults, not the
    config's: :func:`fill_defaults` fills those into a config."""
    props = schema["properties"]
    for key, value in defaults.items():
        if key not in props:
            continue  # a trainer setting the config does not expose (threads, schedule)
        if isinstance(value, dict):
            _take_defaults(props[key], value)
        else:
            props[key]["default"] = copy.deepcopy(value)


def _key_path(error: jsonschema.ValidationError) -> str:
    parts = [str(p) for p in error.absolute_path]
    return ".".join(parts) if parts else "(top level)"


def _describe(error: jsonschema.ValidationError) -> str:
    # For "oneOf"/"anyOf" failures the most specific sub-error says more.
    best = jsonschema.exceptions.best_match([error]) if error.context else error
    where = _key_path(best)
    if best.validator == "additionalProperties":
        allowed = sorted(best.schema.get("properties", {}))
        return (
            f"config key {where}: {best.message}. "
            f"Allowed keys here: {', '.join(allowed)}. Check the spelling."
        )
    return f"config key {where}: {best.message}"


def validate_config(config: dict[str, Any]) -> dict[str, Any]:
    """Fill every default into ``config`` in place (:func:`fill_defaults`), then check it
    (:func:`check_config`, which changes nothing).

    Returns the same dict for convenience. Raises :class:`ConfigError` naming the bad key.
    """
    schema = load_schema()
    fill_defaults(config, schema)
    check_config(config, schema)
    return config


# -- defaults: one step, before any check ------------------------------------------------


def fill_defaults(config: dict[str, Any], schema: dict[str, Any] | None = None) -> dict[str, Any]:
    """Fill every default into ``config`` in place and return it: the schemas', then those
    that follow from other keys (:func:`_fill_derived_defaults`).

    The derived ones read keys the checks vouch for, so a config that the schema or the
    references check refuses gets the schemas' defaults only; :func:`check_config` then
    names its bad key.
    """
    methods_given = "methods" in (config.get("transfer") or {})
    schema = load_schema() if schema is None else schema
    fill_schema_defaults(schema, config)
    if _keys_resolve(config, schema):
        _fill_derived_defaults(config, methods_given)
    return config


def _keys_resolve(config: dict[str, Any], schema: dict[str, Any]) -> bool:
    """Whether ``config`` matches the schema and names only what it defines."""
    try:
        check_schema(config, schema)
        check_references(config)
    except ConfigError:
        return False
    return True


def _fill_derived_defaults(config: dict[str, Any], methods_given: bool) -> None:
    """The defaults that follow from other keys of a config whose keys resolve."""
    languages = config["languages"]
    transfer = config["transfer"]
    if not methods_given and _world_run(config):
        # The miniature world's own run also gets its oracle, the methods that read
        # the world's truth; a config that lists its methods gets what it lists.
        transfer["methods"] += [m for m in METHODS if METHODS[m].get("world_only")]
    if (
        config.get("source_language") is None
        and "world" in config
        and any(spec["corpus"]["type"] == "mini" for spec in languages.values())
    ):
        config["source_language"] = config["world"]["source_language"]
    if any(_aligns(method, transfer) for method in transfer["methods"]):
        # A world language's dictionary is the world's own lexicons.
        for lang in config["targets"]:
            spec = languages[lang]
            if "dictionary" not in spec and spec["corpus"]["type"] == "mini":
                spec["dictionary"] = {"type": "world"}
    replay = config["lapt"].get("replay")
    if replay:
        replay["language"] = replay.get("language") or config.get("source_language")


def _aligns(method: str, transfer: dict[str, Any]) -> bool:
    """Whether ``method`` aligns source- and target-language fastText spaces (with a
    bilingual dictionary)."""
    return "aligned" in method_needs(method, transfer["options"].get(method, {}))


# -- checks: each names the bad key and changes nothing -----------------------------------


def check_config(config: dict[str, Any], schema: dict[str, Any] | None = None) -> None:
    """Check a config :func:`fill_defaults` filled, section by section; raise
    :class:`ConfigError` naming the first bad key."""
    check_schema(config, load_schema() if schema is None else schema)
    check_references(config)
    check_transfer(config)
    check_lapt(config)
    check_evaluation(config)
    check_report(config)


def check_schema(config: dict[str, Any], schema: dict[str, Any]) -> None:
    """Keys and types against the schema (the first ten errors, each naming its key)."""
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(e.path))
    if errors:
        lines = [_describe(e) for e in errors[:10]]
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(lines))


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise ConfigError(message)


def check_references(config: dict[str, Any]) -> None:
    """Cross-key checks the schema cannot express."""
    models = config["models"]
    languages = config["languages"]
    for key in config["sources"]:
        _require(
            key in models,
            f"config key sources: model {key!r} is not defined under models "
            f"(defined: {', '.join(sorted(models))})",
        )
    for lang, plms in config["targets"].items():
        _require(
            lang in languages,
            f"config key targets.{lang}: language {lang!r} is not defined under languages "
            f"(defined: {', '.join(sorted(languages))})",
        )
        for name in plms:
            plm, mode = target_model(name), written_mode(name)
            _require(
                plm in models,
                f"config key targets.{lang}: model {plm!r} is not defined under models",
            )
            _require(
                mode is None or mode in VOCAB_MODES,
                f"config key targets.{lang}: {name!r} asks for vocabulary mode {mode!r}; write "
                f"{plm}{MODE_SEPARATOR}extend or {plm}{MODE_SEPARATOR}replace, or {plm} for "
                "transfer.vocab_mode",
            )
            plm_lang = models[plm].get("language")
            _require(
                plm_lang in (None, lang),
                f"config key targets.{lang}: model {plm!r} is a {plm_lang!r} model "
                f"(models.{plm}.language), not a {lang!r} one",
            )
    for lang in ((config.get("transfer") or {}).get("holdout") or {}).get("by_language") or {}:
        _require(
            lang in languages,
            f"config key transfer.holdout.by_language.{lang}: language {lang!r} is not "
            f"defined under languages (defined: {', '.join(sorted(languages))})",
        )
    for key, spec in models.items():
        for lang in [spec.get("language"), *spec.get("mix", {})]:
            if lang is None:
                continue
            _require(
                lang in languages,
                f"config key models.{key}: language {lang!r} is not defined under languages",
            )
        if spec["type"] == "mini":
            _require(
                spec.get("language") is not None,
                f"config key models.{key}: a 'mini' model needs the language of the corpus "
                f"it is pretrained on (models.{key}.language)",
            )
            for rate, family in RATE_KEYS.items():
                _require(
                    (spec.get("train") or {}).get(rate) is None or spec["family"] == family,
                    f"config key models.{key}.train.{rate}: a {family} model's setting, "
                    f"not a {spec['family']} one's",
                )
    uses_world = any(lang["corpus"]["type"] == "mini" for lang in languages.values())
    if uses_world:
        world_langs = set(config["world"]["languages"])
        for lang, spec in languages.items():
            if spec["corpus"]["type"] == "mini":
                _require(
                    lang in world_langs,
                    f"config key languages.{lang}.corpus: type 'mini' but {lang!r} is not a "
                    f"language of the miniature world (world.languages: "
                    f"{', '.join(sorted(world_langs))})",
                )


def _not_the_worlds(config: dict[str, Any]) -> list[str]:
    """The run's target languages and models that are not the miniature world's own."""
    corpus = {lang: config["languages"][lang]["corpus"]["type"] for lang in config["targets"]}
    found = [f"target language {lang!r} (corpus type {kind!r})" for lang, kind in corpus.items()
             if kind != "mini"]
    models = set(config["sources"]) | set(target_models(config))
    found += [f"model {m!r} (type {config['models'][m]['type']!r})" for m in sorted(models)
              if config["models"][m]["type"] != "mini"]
    return found


def _world_run(config: dict[str, Any]) -> bool:
    return bool(config["targets"]) and not _not_the_worlds(config)


def _check_world_only(config: dict[str, Any], method: str) -> None:
    """A method that reads the miniature world's ground truth runs on the world's own
    languages and models only."""
    others = _not_the_worlds(config)
    _require(not others, (
        f"config key transfer.methods: {method!r} reads the miniature world's ground truth, "
        f"but the run has what is not the world's: {', '.join(others)}; drop {method!r} from "
        "transfer.methods"))


def check_transfer(config: dict[str, Any]) -> None:
    """Method options pass the catalog's check and methods get what they need, named at
    start-up rather than after hours of compute."""
    languages = config["languages"]
    transfer = config["transfer"]
    for method, options in transfer["options"].items():
        try:
            resolve_options(method, options)
        except OptionError as err:
            raise ConfigError(f"config key {err}") from None
    modes = {target_mode(config, target) for _, _, target in target_settings(config)}
    for method in transfer["methods"]:
        _require(
            bool(modes & set(method_modes(method))),
            f"config key transfer.methods: method {method!r} works with transfer.vocab_mode "
            f"{' or '.join(method_modes(method))}, and the run's settings are "
            f"{' and '.join(repr(m) for m in sorted(modes))}; drop the method, set "
            f"transfer.vocab_mode, or add a target as <model>{MODE_SEPARATOR}"
            f"{method_modes(method)[0]} under targets",
        )
        if METHODS[method].get("world_only"):
            _check_world_only(config, method)
        if not _aligns(method, transfer):
            continue
        source_lang = config.get("source_language")
        _require(
            source_lang in languages,
            f"config key source_language: method {method!r} aligns source- and target-language "
            f"fastText spaces and needs the source language (a key of languages), "
            f"got {source_lang!r}",
        )
        selected = {run.lang for run in transfer_runs(config) if run.method == method}
        for lang in config["targets"]:
            spec = languages[lang]
            if lang not in selected:
                continue  # transfer.select runs the method on none of the language's PLMs
            _require(
                "dictionary" in spec,
                f"config key languages.{lang}.dictionary: method {method!r} needs a bilingual "
                f"dictionary {source_lang}->{lang} to align fastText spaces; give "
                "{type: file, path: ...} (or drop the method from transfer.methods)",
            )
            _require(
                spec["dictionary"]["type"] != "world" or spec["corpus"]["type"] == "mini",
                f"config key languages.{lang}.dictionary: type 'world' needs a miniature-world "
                "language (corpus type mini)",
            )


def _check_select(config: dict[str, Any], section: str, name: str = "select") -> None:
    """A grid selection (``transfer.select``, ``transfer.gpu_only``, ``lapt.select``) names
    known keys: typos are errors; a defined key outside the grid selects nothing."""
    # a target is a model, or a setting as targets writes it (gpt2_de@extend)
    settings = {target for _, _, target in target_settings(config)}
    known = {"sources": sorted(config["models"]),
             "targets": sorted(set(config["models"]) | settings), "methods": sorted(METHODS)}
    for i, group in enumerate(config[section].get(name) or []):
        for key, allowed in known.items():
            unknown = sorted(set(group.get(key) or []) - set(allowed))
            _require(
                not unknown,
                f"config key {section}.{name}.{i}.{key}: {unknown} unknown (known: "
                f"{', '.join(allowed)})",
            )


def check_lapt(config: dict[str, Any]) -> None:
    """LAPT and transfer selections name known keys; the replay language exists."""
    _check_select(config, "transfer")
    _check_select(config, "transfer", "gpu_only")
    _check_select(config, "lapt")
    lapt = config["lapt"]
    replay = lapt.get("replay")
    if replay:
        lang = replay["language"]
        _require(
            lang in config["languages"],
            f"config key lapt.replay.language: the replay text's language must be a key of "
            f"languages (or set source_language), got {lang!r}",
        )


# -- accessors used by the Snakefile and scripts ---------------------------------------


def models_of_type(config: dict[str, Any], kind: str) -> list[str]:
    return sorted(k for k, m in config["models"].items() if m["type"] == kind)


def wildcard_alternatives(keys: Iterable[str]) -> str:
    """A regex matching exactly one of ``keys`` (for wildcard_constraints)."""
    keys = sorted(keys)
    return "|".join(re.escape(k) for k in keys) if keys else "(?!x)x"


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML config file and validate it (for use outside Snakemake)."""
    config = yaml.safe_load(Path(path).read_text()) or {}
    return validate_config(config)
