"""Which of our settings is one of the SALT paper's, and under which names.

A cell of ours is shown beside the paper's number only when every part of its
setting maps to the paper's: the source model (Gemma = google/gemma-2b, XGLM =
facebook/xglm-1.7B), the language (de, ar, vi), the target PLM's architecture
(GPT, BERT, T5), the method and the metric (and, for Tables 2-3, the evaluation
language / context-question languages). The ``report.paper_names`` config
section says it explicitly; where it is silent the defaults below apply:

* sources: hub models whose ``repo_id`` is the paper's (case-insensitive);
  anything else (every miniature model) is not the paper's;
* languages: the key itself when it is de, ar or vi;
* architectures: a miniature PLM's ``family`` (gpt2 -> GPT, bert -> BERT,
  t5 -> T5); a hub PLM's ``repo_id`` naming t5, bert or gpt (the paper's PLMs
  all do: german-gpt2, gbert, phobert, AraT5v2, vit5, ...);
* methods: :data:`METHOD_NAMES`.

An explicit ``null`` in ``paper_names`` marks a key as not the paper's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PAPER_SOURCES = {"google/gemma-2b": "Gemma", "facebook/xglm-1.7b": "XGLM"}
PAPER_LANGUAGES = ("de", "ar", "vi")
ARCHITECTURES = ("GPT", "BERT", "T5")
FAMILY_ARCH = {"gpt2": "GPT", "bert": "BERT", "t5": "T5"}
#: Our method keys and the names the paper (and its reference CSV) uses.
METHOD_NAMES = {
    "salt": "SALT",
    "focus": "FOCUS",
    "ofa": "OFA",
    "multivariate": "Multivariate",
    "wechsel": "WECHSEL",
    "clp": "CLP",
    "clp_plus": "CLP+",
    "heuristics": "Heuristics",
    "random": "Random",
    "random_copy": "Random (copy shared)",
    "mean": "Mean",
    "subword_mean": "Subword-mean",
    "lstsq": "Least squares",
}


def _hub_arch(repo_id: str) -> str | None:
    name = repo_id.lower().rsplit("/", 1)[-1]
    for needle, arch in (("t5", "T5"), ("bert", "BERT"), ("gpt", "GPT")):
        if needle in name:
            return arch
    return None


def model_arch(spec: dict[str, Any]) -> str | None:
    """Architecture (GPT/BERT/T5) of a model config entry, or None when unknown."""
    if spec.get("family") in FAMILY_ARCH:
        return FAMILY_ARCH[spec["family"]]
    if spec.get("type") == "hub":
        return _hub_arch(spec.get("repo_id", ""))
    return None


@dataclass(frozen=True)
class PaperNames:
    """Our keys -> the paper's names (None: not the paper's)."""

    sources: dict[str, str | None]
    languages: dict[str, str | None]
    architectures: dict[str, str | None]
    methods: dict[str, str | None]

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> PaperNames:
        explicit = (config.get("report") or {}).get("paper_names") or {}
        models = config.get("models", {})
        sources = {
            key: PAPER_SOURCES.get(str(models.get(key, {}).get("repo_id", "")).lower())
            if models.get(key, {}).get("type") == "hub" else None
            for key in config.get("sources", [])
        }
        languages = {
            lang: lang if lang in PAPER_LANGUAGES else None for lang in config.get("targets", {})
        }
        targets = {t for plms in config.get("targets", {}).values() for t in plms}
        architectures = {t: model_arch(models.get(t, {})) for t in sorted(targets)}
        methods = dict(METHOD_NAMES)
        sources.update(explicit.get("sources", {}))
        languages.update(explicit.get("languages", {}))
        architectures.update(explicit.get("architectures", {}))
        methods.update(explicit.get("methods", {}))
        return cls(sources, languages, architectures, methods)

    def arch(self, target: str | None) -> str | None:
        return self.architectures.get(target) if target else None

    def setting(self, source: str, lang: str, target: str | None, method: str | None
                ) -> tuple[str, str, str, str] | None:
        """(source_model, target_arch, method, lang) in the paper's names, or None."""
        names = (
            self.sources.get(source),
            self.arch(target),
            self.methods.get(method) if method else None,
            self.languages.get(lang),
        )
        return names if all(names) else None  # type: ignore[return-value]


def primary_target(config: dict[str, Any], names: PaperNames, lang: str) -> str | None:
    """The target PLM of a language that Tables 1-3 and 8 use: its first GPT one, else its first."""
    plms = config.get("targets", {}).get(lang, [])
    for plm in plms:
        if names.arch(plm) == "GPT":
            return plm
    return plms[0] if plms else None
