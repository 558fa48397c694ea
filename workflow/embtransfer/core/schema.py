"""Fill a JSON schema's defaults into a document: the one filler of the workflow config
(:mod:`embtransfer.config.validation`) and the miniature world's section
(:mod:`embtransfer.world.languages`)."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema


def _filling(validator_class: type) -> type:
    """``validator_class`` extended to set each missing property's ``default`` before it
    checks the property.

    Defaults inside ``oneOf`` branches come only from the branch that matches, so a branch
    that is tried and rejected leaves no keys behind.
    """
    validate_properties = validator_class.VALIDATORS["properties"]
    validate_one_of = validator_class.VALIDATORS["oneOf"]

    def set_defaults(validator, properties, instance, schema):  # type: ignore[no-untyped-def]
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if isinstance(sub, dict) and "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    def one_of(validator, branches, instance, schema):  # type: ignore[no-untyped-def]
        matching = [
            i
            for i, branch in enumerate(branches)
            if not any(validator.descend(copy.deepcopy(instance), branch, schema_path=i))
        ]
        if len(matching) == 1:
            yield from validator.descend(instance, branches[matching[0]], schema_path=matching[0])
        else:
            yield from validate_one_of(validator, branches, copy.deepcopy(instance), schema)

    return jsonschema.validators.extend(
        validator_class, {"properties": set_defaults, "oneOf": one_of}
    )


_FILLING_VALIDATOR = _filling(jsonschema.Draft202012Validator)


def fill_schema_defaults(schema: dict[str, Any], instance: Any) -> Any:
    """Set every ``default`` of ``schema`` that ``instance`` lacks, in place, at any depth
    (under ``properties``, ``additionalProperties``, ``items``, ``$ref``, ``allOf`` and
    ``if``/``then``; under ``oneOf`` from the matching branch only), and return ``instance``.

    Checks nothing: what does not match the schema is left for the schema check to name.
    """
    for _ in _FILLING_VALIDATOR(schema).iter_errors(instance):
        pass  # the errors are the check's to report; walking the schema fills the defaults
    return instance
