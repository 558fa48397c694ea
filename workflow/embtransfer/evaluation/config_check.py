"""Config checks of the evaluation section (task names against lm-eval's index)."""

from __future__ import annotations

from typing import Any


def check_evaluation(config: dict[str, Any]) -> None:
    """Placeholder: raises ConfigError for a bad evaluation section."""
