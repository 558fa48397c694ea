"""The configuration error, on its own so that every config check can raise it.

:mod:`embtransfer.config.validation` runs the section checks (e.g.
:mod:`embtransfer.evaluation.config_check`), and those checks raise this error; defined
in ``validation.py`` it would make the two modules import each other. ``validation``
re-exports it for the Snakefile.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """The configuration is invalid; the message names the key and the fix."""
