"""Which of our settings is one of the SALT paper's, and under which names.

A cell of ours is shown beside the paper's number only when every part of its setting maps
to the paper's: the source model, the language, the target PLM's architecture, the method
and the metric (and, for Tables 2-3, the evaluation language / context-question languages).
The ``report.paper_names`` config section says it explicitly (an explicit ``null``: not the
paper's); where it is silent the defaults below apply (docs/evaluation.md lists them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PAPER_SOURCES = {"google/gemma-2b": "Gemma", "facebook/xglm-1.7b": "XGLM"}
PAPER_LANGUAGES = ("de", "ar", "vi")
FAMILY_ARCH = {"gpt2": "GPT", "bert": "BERT", "t5": "T5"}
#: A hub repo id's name -> architecture, the first match counting.
HUB_ARCH = (("t5", "T5"), ("bert", "BERT"), ("gpt", "GPT"))
#: Our method keys and the names the paper (and its reference CSV) uses.
METHOD_NAMES = {
    "salt": "SALT", "focus": "FOCUS", "ofa": "OFA", "multivariate": "Multivariate",
    "wechsel": "WECHSEL", "clp": "CLP", "clp_plus": "CLP+", "heuristics": "Heuristics",
    "random": "Random", "random_copy": "Random (copy shared)", "mean": "Mean",
    "subword_mean": "Subword-mean", "lstsq": "Least squares",
}


def model_arch(spec: dict[str, Any]) -> str | None:
    """Architecture (GPT/BERT/T5) of a model config entry: a miniature PLM's ``family``, a hub
    PLM's ``repo_id`` naming t5, bert or gpt (as the paper's all do); None when unknown."""
    if spec.get("family") in FAMILY_ARCH:
        return FAMILY_ARCH[spec["family"]]
    name = spec.get("repo_id", "").lower().rsplit("/", 1)[-1] if spec.get("type") == "hub" else ""
    return next((arch for needle, arch in HUB_ARCH if needle in name), None)


@dataclass(frozen=True)
class PaperNames:
    """Our keys -> the paper's names (None: not the paper's)."""

    sources: dict[str, str | None]
    languages: dict[str, str | None]
    architectures: dict[str, str | None]
    methods: dict[str, str | None]

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> PaperNames:
        """The defaults (hub sources by ``repo_id``, language keys de/ar/vi, each target
        PLM's :func:`model_arch`, :data:`METHOD_NAMES`), overridden by ``paper_names``."""
        models = config.get("models", {})
        hub = {k: str(m.get("repo_id", "")).lower() for k, m in models.items()
               if m.get("type") == "hub"}
        targets = {t for plms in config.get("targets", {}).values() for t in plms}
        defaults = {
            "sources": {key: PAPER_SOURCES.get(hub.get(key, ""))
                        for key in config.get("sources", [])},
            "languages": {lang: lang if lang in PAPER_LANGUAGES else None
                          for lang in config.get("targets", {})},
            "architectures": {t: model_arch(models.get(t, {})) for t in sorted(targets)},
            "methods": METHOD_NAMES,
        }
        explicit = (config.get("report") or {}).get("paper_names") or {}
        return cls(**{part: {**names, **explicit.get(part, {})}
                      for part, names in defaults.items()})

    def arch(self, target: str | None) -> str | None:
        return self.architectures.get(target) if target else None

    def setting(self, source: str, lang: str, target: str | None, method: str | None
                ) -> tuple[str, str, str, str] | None:
        """(source_model, target_arch, method, lang) in the paper's names, or None."""
        names = (self.sources.get(source), self.arch(target),
                 self.methods.get(method) if method else None, self.languages.get(lang))
        return names if all(names) else None  # type: ignore[return-value]


def primary_target(config: dict[str, Any], names: PaperNames, lang: str) -> str | None:
    """The target PLM of a language that Tables 1-3 and 8 use: its first GPT one, else its first."""
    plms = config.get("targets", {}).get(lang, [])
    return next((plm for plm in plms if names.arch(plm) == "GPT"), plms[0] if plms else None)
