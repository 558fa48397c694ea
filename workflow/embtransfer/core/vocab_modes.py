"""The vocabulary modes of a transfer, and the methods that work in only some of them.

``replace``: the target tokenizer replaces the source's (the SALT setting); ``extend``: the
source keeps its vocabulary and gains the target tokens it lacks. A setting's mode is
``transfer.vocab_mode`` or the one its target name states (``gpt2_de@extend``,
:func:`embtransfer.core.grid.target_mode`); a method runs only in settings of a mode it works
in. Here rather than in the method catalog so that the grid (core) reads it without
depending on the transfer package.
"""

from __future__ import annotations

VOCAB_MODES = ("replace", "extend")

#: The methods that work in only some modes; every other method works in all of them.
#: Token Distillation trains the rows of tokens appended to the source's own vocabulary.
ONLY_IN: dict[str, tuple[str, ...]] = {"token_distillation": ("extend",)}


def method_modes(name: str) -> tuple[str, ...]:
    """The vocabulary modes (``transfer.vocab_mode``) the method ``name`` works in."""
    return ONLY_IN.get(name, VOCAB_MODES)
