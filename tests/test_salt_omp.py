"""The SALT-against-OMP report table (embtransfer.report.salt_omp) on made-up records."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from embtransfer.report.records import MalformedResultError
from embtransfer.report.salt_omp import salt_omp_markdown, salt_vs_omp


def zeroshot(root: Path, method: str, nll: np.ndarray, n_bytes: np.ndarray) -> str:
    path = root / f"zeroshot/ar_mini/llama_mini/gpt2_ar_mini/{method}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    bpb = float(nll.sum() / np.log(2) / n_bytes.sum())
    path.write_text(json.dumps({
        "lang": "ar_mini", "source": "llama_mini", "target": "gpt2_ar_mini", "method": method,
        "loss": 1.0, "bits_per_byte": bpb, "document_nll_nats": nll.tolist(),
        "document_bytes": n_bytes.tolist()}))
    return str(path)


def alignment(root: Path, salt_hits: np.ndarray, omp_hits: np.ndarray) -> str:
    path = root / "results/alignment/transfer/ar_mini/llama_mini/gpt2_ar_mini.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    n = salt_hits.size
    rng = np.random.default_rng(0)
    frames = []
    for method, hits in (("salt", salt_hits), ("omp", omp_hits), ("random", salt_hits * 0)):
        frames.append(pd.DataFrame({
            "method": method, "target_id": np.arange(n), "split": "held_out",
            "hit_1": hits.astype(bool), "hit_10": hits.astype(bool),
            "cos_centred": hits * 0.5 + rng.normal(0, 0.01, n)}))
    pd.concat(frames).to_parquet(path)
    return str(path)


def test_paired_lines(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    n_bytes = rng.integers(200, 400, 40).astype(float)
    salt_nll = n_bytes * rng.uniform(1.0, 1.2, 40)
    files = [zeroshot(tmp_path, "salt", salt_nll, n_bytes),
             zeroshot(tmp_path, "omp", salt_nll * 0.95, n_bytes),  # OMP 5 % better everywhere
             zeroshot(tmp_path, "focus", salt_nll * 2, n_bytes)]
    salt_hits = np.zeros(60)
    omp_hits = np.r_[np.ones(30), np.zeros(30)]
    frame = salt_vs_omp(files, [alignment(tmp_path, salt_hits, omp_hits)], seed=0)
    assert set(frame["method"]) == {"omp"}  # no other method, no omp_salt_k records
    bpb = frame[frame["metric"] == "bits_per_byte"].iloc[0]
    assert bpb["stage"] == "transfer" and bpb["diff"] < 0 and bpb["clears"]
    np.testing.assert_allclose(bpb["diff"], bpb["omp"] - bpb["salt"])
    p1 = frame[frame["metric"] == "p_at_1"].iloc[0]
    assert p1["stage"] == "alignment/transfer" and p1["diff"] == pytest.approx(50.0)
    assert p1["clears"] and p1["items"] == 60
    cos = frame[frame["metric"] == "cos_centred"].iloc[0]
    assert cos["diff"] == pytest.approx(0.25, abs=0.01) and cos["clears"]
    text = salt_omp_markdown(frame)
    assert "| transfer | bits_per_byte |" in text and "*" in text


def test_no_difference_does_not_clear(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    n_bytes = rng.integers(200, 400, 40).astype(float)
    salt_nll = n_bytes * rng.uniform(1.0, 1.2, 40)
    noise = rng.normal(0, 0.01, 40) * n_bytes
    files = [zeroshot(tmp_path, "salt", salt_nll, n_bytes),
             zeroshot(tmp_path, "omp_salt_k", salt_nll + noise - noise.mean(), n_bytes)]
    line = salt_vs_omp(files, [], seed=0).iloc[0]
    assert line["method"] == "omp_salt_k" and not line["clears"]


def test_other_documents_are_refused(tmp_path: Path) -> None:
    n_bytes = np.full(10, 100.0)
    files = [zeroshot(tmp_path, "salt", n_bytes, n_bytes),
             zeroshot(tmp_path, "omp", n_bytes, n_bytes + 1)]
    with pytest.raises(MalformedResultError, match="other documents"):
        salt_vs_omp(files, [], seed=0)


def test_marks_follow_the_reports_one_rule(tmp_path: Path) -> None:
    """A p-value below 0.05 but not below Holm's bound at family-wise 0.001 leaves no mark:
    the table decides by the rule every other table uses (core/paired.holm)."""
    from embtransfer.core.paired import holm

    salt_hits = np.zeros(60)
    omp_hits = np.r_[np.ones(7), np.zeros(53)]  # McNemar 7 to 0: p = 0.016
    frame = salt_vs_omp([], [alignment(tmp_path, salt_hits, omp_hits)], seed=0)
    p1 = frame[frame["metric"] == "p_at_1"].iloc[0]
    assert 0.001 < p1["p"] < 0.05 and not p1["clears"]
    np.testing.assert_array_equal(frame["clears"].to_numpy(), holm(frame["p"].to_numpy()))
    assert set(frame["metric"]) == {"p_at_1", "p_at_10", "cos_centred"}


def test_alignment_pairs_the_input_rows_only(tmp_path: Path) -> None:
    """The files hold both embedding sides per token; the table compares the input rows (the
    alignment headline), each token once, never an input row with an output row."""
    n = 40
    path = tmp_path / "results/alignment/transfer/ar_mini/llama_mini/gpt2_ar_mini.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    frames = []
    for method, shift in (("salt", 0.0), ("omp", 0.0)):
        for side, cos in (("output", 0.9), ("input", 0.1)):
            frames.append(pd.DataFrame({
                "method": method, "side": side, "target_id": np.arange(n)[::-1],
                "split": "held_out", "hit_1": False, "hit_10": False,
                "cos_centred": np.full(n, cos + shift)}))
    pd.concat(frames).to_parquet(path)
    frame = salt_vs_omp([], [str(path)], seed=0)
    cos = frame[frame["metric"] == "cos_centred"].iloc[0]
    assert cos["items"] == n and cos["salt"] == pytest.approx(0.1)
    assert cos["diff"] == pytest.approx(0.0)
