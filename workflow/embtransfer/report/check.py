"""Config checks of the report section that the schema cannot express."""

from __future__ import annotations

from typing import Any

from embtransfer.core.errors import ConfigError


def check_report(config: dict[str, Any]) -> None:
    """Raise :class:`ConfigError` naming the key when the report section refers to nothing."""
    report = config.get("report") or {}
    methods = list(config.get("transfer", {}).get("methods", []))
    for method in report.get("methods") or []:
        if method not in methods:
            raise ConfigError(f"config key report.methods: {method!r} is not one of "
                              f"transfer.methods ({', '.join(methods)})")
    focus = report.get("focus_method", "salt")
    if methods and focus not in methods:
        raise ConfigError(
            f"config key report.focus_method: {focus!r} is not one of transfer.methods "
            f"({', '.join(methods)}); Tables 4 and 5 compare target PLMs for this method"
        )
    targets = {t for plms in config.get("targets", {}).values() for t in plms}
    names = report.get("paper_names") or {}
    for section, known in (("sources", set(config.get("sources", []))),
                           ("languages", set(config.get("targets", {}))),
                           ("architectures", targets)):
        unknown = sorted(set(names.get(section, {})) - known)
        if unknown:
            raise ConfigError(
                f"config key report.paper_names.{section}: {unknown} are not configured "
                f"(known: {', '.join(sorted(known))})"
            )
