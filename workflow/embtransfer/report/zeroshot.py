"""The zero-shot comparison table: every transferred checkpoint's held-out loss and bits
per byte before any training (``results/tables/zeroshot.{csv,md}``), methods ranked by
bits per byte in each (language, source, target PLM) setting."""

from __future__ import annotations

import os
from typing import Any

import pandas as pd

from embtransfer.core.atomic import atomic_path
from embtransfer.report.tables import ORACLE, markdown

#: Rows shown in the table but never ranked: the reference and the upper bound.
NOT_COMPETING = ("source_model", ORACLE)


def zeroshot_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame(records)
    if "target" not in frame:
        frame["target"] = None
    frame["target"] = frame["target"].fillna("(source tokenizer)")
    columns = ["lang", "source", "target", "method", "loss", "perplexity", "bits_per_byte"]
    extra = [c for c in ("tokens_per_byte",) if c in frame]
    frame = frame[columns + extra].sort_values(["lang", "source", "target", "bits_per_byte"])
    competing = ~frame["method"].isin(NOT_COMPETING)
    setting = ["lang", "source", "target"]
    # A setting ranks its methods only where two or more compete: a lone method is shown,
    # not credited with a win.
    rivals = frame[competing].groupby(setting)["method"].transform("size")
    ranked = competing & (rivals.reindex(frame.index).fillna(0) >= 2)
    frame["rank"] = float("nan")
    frame.loc[ranked, "rank"] = (
        frame[ranked].groupby(setting)["bits_per_byte"].rank(method="min")
    )
    return frame.reset_index(drop=True)


def zeroshot_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per competing method: mean rank by bits per byte and wins over the settings where it
    meets another method, how many those are, how many it ran alone (shown, not ranked),
    and its mean bits per byte over the ranked settings."""
    competing = frame[~frame["method"].isin(NOT_COMPETING)]
    ranked = competing[competing["rank"].notna()]
    summary = ranked.groupby("method").agg(
        mean_rank=("rank", "mean"),
        wins=("rank", lambda r: int((r == 1).sum())),
        ranked_settings=("rank", "size"),
        mean_bits_per_byte=("bits_per_byte", "mean"),
    )
    alone = competing[competing["rank"].isna()].groupby("method").size()
    summary["unranked_settings"] = alone.reindex(summary.index).fillna(0).astype(int)
    return summary.sort_values(["mean_rank", "mean_bits_per_byte"]).reset_index()


def write_zeroshot_table(records: list[dict[str, Any]], csv_path: str | os.PathLike,
                         md_path: str | os.PathLike) -> pd.DataFrame:
    frame = zeroshot_frame(records)
    summary = zeroshot_summary(frame)
    parts = [
        "# Zero-shot comparison (before any training)",
        "",
        "Held-out loss of every transferred checkpoint on each target language's valid "
        "split. Bits per byte (total negative log-likelihood in bits over the UTF-8 bytes of "
        "the text) is comparable across tokenizers; loss and perplexity are per token of each "
        "model's own tokenizer. `source_model` is the untouched source LLM with its own "
        "tokenizer on the same text: a reference point, not a baseline (it saw the target "
        "language only as a small share of its pretraining mix, so a transferred model can "
        "beat it before any training). `world_oracle` is the miniature world's upper bound. "
        "Lower is better. Ranks are taken only where two or more methods compete in a "
        "(language, source, target PLM) setting; a method run alone there is shown, not "
        "ranked (`unranked_settings`), and the oracle and the source model are never ranked.",
        "",
        "## Methods ranked over the settings where they compete",
        "",
        markdown(summary),
    ]
    for (lang, source), group in frame.groupby(["lang", "source"], sort=True):
        parts += ["", f"## {lang}, source {source}: bits per byte", ""]
        reference = group[group["method"] == "source_model"]
        if len(reference):
            parts += [
                f"The source model with its own tokenizer: "
                f"{reference['bits_per_byte'].iloc[0]:.4f} bits per byte.",
                "",
            ]
        transferred = group[group["method"] != "source_model"]
        if len(transferred):
            pivot = transferred.pivot_table(
                index="method", columns="target", values="bits_per_byte", dropna=False
            )
            pivot = pivot.sort_values(list(pivot.columns)[0]).reset_index()
            parts.append(markdown(pivot))
    with atomic_path(csv_path) as tmp:
        frame.to_csv(tmp, index=False)
    with atomic_path(md_path) as tmp:
        tmp.write_text("\n".join(parts) + "\n")
    return frame
