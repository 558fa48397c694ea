"""Write a transferred model as a complete Hugging Face checkpoint.

The transfer stage ends here: the source LLM with its vocabulary embeddings
replaced (or extended) by the rows a method produced, saved with the target
tokenizer so that ``AutoModelForCausalLM.from_pretrained`` and
``AutoTokenizer.from_pretrained`` load it without any missing or unexpected
weight, and ``generate()`` runs.

Vocabulary modes (docs/design.md §4.4):

``replace``  the target tokenizer replaces the source's (the SALT setting). The
             model gets ``len(target tokenizer)`` rows; ``input_rows`` (and, for
             an untied source, ``output_rows``) hold one row per target id.
``extend``   Gosal et al.: the source tokenizer followed by the target tokens it
             lacks (:func:`embtransfer.vocab.extend.extend_tokenizer`). Every source
             row is kept bit for bit; ``input_rows``/``output_rows`` hold the appended
             tokens only, in ``new_ids`` order.

Choices, recorded here because later stages rely on them:

* Tying is read from the source checkpoint's tensors
  (:func:`embtransfer.models.loading.embedding_layout`), never from its config alone,
  and the written config's ``tie_word_embeddings`` says what was saved.
* Special ids (replace mode) come from the target tokenizer by role, with the
  fallbacks the overlap stage uses (``cls`` -> bos, ``sep`` -> eos, so a
  WordPiece target's ``[CLS]``/``[SEP]`` act as bos/eos). A target without a
  bos gets ``bos_token_id = eos`` in families whose own tokenizer uses one token
  for both (GPT-2 style), ``None`` elsewhere. A target without a pad gets
  ``pad_token_id = None`` (generate() then pads with eos, as for GPT-2).
  ``decoder_start_token_id`` (XGLM) keeps its role (it is eos in XGLM).
  Generation-config fields that name source ids (forced/suppressed tokens) are
  cleared: they mean nothing in the new vocabulary. Extend mode keeps the
  source's special ids, which the extended tokenizer keeps too.
* An LM-head bias (GPT-J, Phi, ...): replace mode sets it to zeros for every
  row (the source's bias belongs to source ids; a constant bias does not
  change the softmax, so zeros are as good as any constant); extend mode keeps
  the source rows and gives appended rows the mean source bias, so new tokens
  start neither favoured nor penalised against the average old token.
* Rows are saved in the source's dtype (a bf16 source stays bf16). NaN/Inf is
  refused before and after the cast (fp16 overflows to Inf) naming token ids.
* Finite but absurd rows (blown up past ten times the source's longest row, or zero) are
  flagged, not refused (:mod:`embtransfer.transfer.row_check`): ``transfer.json``'s
  ``row_check`` counts them per side and the job's log warns.
* Source embedding rows beyond the source tokenizer's ids (padded vocabularies)
  are never produced by a tokenizer; extend mode drops them so the appended
  ids follow the source tokenizer's directly.
* The saved tokenizer's ``model_max_length`` is capped at the model's position
  limit; nothing else about the target tokenizer changes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from safetensors import safe_open
from transformers import AutoConfig, AutoModelForCausalLM

from embtransfer.core.atomic import NonFiniteError, atomic_path, write_json
from embtransfer.core.vocab_modes import VOCAB_MODES
from embtransfer.models.hf import (
    VOCAB_MODE_KEY,
    configs,
    n_token_ids,
    position_limit,
    save_safetensors,
    text_config,
)
from embtransfer.models.loading import (
    NonFiniteEmbeddingsError,
    _safetensors_index,
    embedding_layout,
    load_tokenizer,
    nonfinite_rows,
)
from embtransfer.transfer.row_check import check_new_rows
from embtransfer.vocab.extend import extend_tokenizer, new_target_tokens

log = logging.getLogger(__name__)

MODES = VOCAB_MODES
TRANSFER_JSON = "transfer.json"
CONFIG_ROLES = ("bos", "eos", "pad", "unk")
# Families whose own tokenizer uses one token as bos and eos (GPT-2's <|endoftext|>).
SHARED_BOS_EOS = frozenset({"gpt2", "gpt_neox", "gptj", "codegen", "gpt_neo"})
# Generation settings that list token ids of the source vocabulary.
ID_LISTS = (
    "forced_bos_token_id",
    "forced_eos_token_id",
    "suppress_tokens",
    "begin_suppress_tokens",
    "bad_words_ids",
    "sequence_bias",
)


# ---------------------------------------------------------------- helpers


def _role_id(tokenizer: Any, role: str) -> int | None:
    value = getattr(tokenizer, f"{role}_token_id", None)
    return None if value is None else int(value)


def target_special_ids(tokenizer: Any, model_type: str) -> dict[str, int | None]:
    """Config special ids for a causal LM using ``tokenizer`` (see the module docstring)."""
    eos = _role_id(tokenizer, "eos")
    if eos is None:
        eos = _role_id(tokenizer, "sep")
    bos = _role_id(tokenizer, "bos")
    if bos is None:
        bos = _role_id(tokenizer, "cls")
    if bos is None and model_type in SHARED_BOS_EOS:
        bos = eos
    return {
        "bos_token_id": bos,
        "eos_token_id": eos,
        "pad_token_id": _role_id(tokenizer, "pad"),
        "unk_token_id": _role_id(tokenizer, "unk"),
    }


def _first_id(value: Any) -> Any:
    return value[0] if isinstance(value, list | tuple) and value else value


def _rename_role(old: Any, source_ids: dict[str, Any], new_ids: dict[str, int | None]) -> Any:
    """Map a source id (decoder_start_token_id) to the target id of the same role."""
    if old is None:
        return None
    for role in ("eos_token_id", "bos_token_id", "pad_token_id"):
        if _first_id(source_ids.get(role)) == _first_id(old):
            return new_ids[role]
    return new_ids["eos_token_id"]


def _set_special_ids(model: Any, ids: dict[str, int | None], notes: list[str]) -> None:
    for cfg in configs(model.config):
        before = {k: getattr(cfg, k, None) for k in ids}
        for key, value in ids.items():
            # unk is a config field in few families; add it only where it exists.
            if key == "unk_token_id" and not hasattr(cfg, key):
                continue
            setattr(cfg, key, value)
        if getattr(cfg, "decoder_start_token_id", None) is not None:
            cfg.decoder_start_token_id = _rename_role(cfg.decoder_start_token_id, before, ids)
    gen = getattr(model, "generation_config", None)
    if gen is None:
        return
    before = {k: getattr(gen, k, None) for k in ids}
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        setattr(gen, key, ids[key])
    if getattr(gen, "decoder_start_token_id", None) is not None:
        gen.decoder_start_token_id = _rename_role(gen.decoder_start_token_id, before, ids)
    for key in ID_LISTS:
        if getattr(gen, key, None) is not None:
            setattr(gen, key, None)
            notes.append(f"generation_config.{key} cleared (it named source ids)")


def _check_rows(name: str, rows: np.ndarray, token_ids: np.ndarray, tokenizer: Any) -> None:
    """Refuse non-finite rows, naming the first offending token ids and strings."""
    bad_rows = nonfinite_rows(rows)
    if bad_rows.size:
        ids = token_ids[bad_rows[:10]].tolist()
        toks = tokenizer.convert_ids_to_tokens(ids)
        more = f" (and {bad_rows.size - 10} more)" if bad_rows.size > 10 else ""
        raise NonFiniteError(
            f"refusing to write {name}: {bad_rows.size} rows hold NaN/Inf, token ids "
            f"{ids}{more}, tokens {toks}"
        )


def _as_rows(name: str, rows: Any, n: int, width: int | None = None) -> np.ndarray:
    rows = np.asarray(rows)
    if rows.ndim != 2 or rows.shape[0] != n or (width is not None and rows.shape[1] != width):
        raise ValueError(
            f"{name} has shape {rows.shape}, expected ({n}, "
            f"{width if width is not None else 'hidden size'}) (rows x hidden size)"
        )
    return rows


def _to_param(name: str, rows: np.ndarray, like: Any, ids: np.ndarray, tok: Any) -> Any:
    """Rows (finite, checked before) as a tensor of the model's dtype, re-checked after the
    cast where a value lies beyond the dtype's range (fp16 overflows to Inf); a value within
    it cannot round to Inf."""
    tensor = torch.from_numpy(np.ascontiguousarray(rows)).to(like.dtype)
    limit = torch.finfo(like.dtype).max
    if rows.size == 0 or max(-float(rows.min()), float(rows.max())) <= limit:
        return tensor
    finite = torch.isfinite(tensor).all(dim=1).numpy()
    if not finite.all():
        _check_rows(
            f"{name} (after casting to {like.dtype})",
            np.where(finite[:, None], 0.0, np.nan),
            ids,
            tok,
        )
    return tensor


# ---------------------------------------------------------------- writing


@contextlib.contextmanager
def _uninitialised_resize() -> Iterator[None]:
    """``resize_token_embeddings`` without filling its new matrices at random first.

    Every row of them is overwritten afterwards (the kept source rows by the resize, the
    rest by the method's rows), and the fill took 0.6 s per checkpoint at Gemma 3's width
    (50,000 x 1,152 twice). Growing matrices are still filled by the model's own init.
    """
    saved = torch.nn.Embedding.reset_parameters, torch.nn.Linear.reset_parameters
    torch.nn.Embedding.reset_parameters = torch.nn.Linear.reset_parameters = _no_init
    try:
        yield
    finally:
        torch.nn.Embedding.reset_parameters, torch.nn.Linear.reset_parameters = saved


def _no_init(module: Any) -> None:
    return None


def load_source_model(
    source_dir: Path, trust_remote_code: bool, allow_pickle: bool = False
) -> tuple[Any, bool]:
    """The source causal LM with its tie decided from the checkpoint's tensors."""
    tied = embedding_layout(
        source_dir, trust_remote_code=trust_remote_code, allow_pickle=allow_pickle
    ).tied
    config = AutoConfig.from_pretrained(source_dir, trust_remote_code=trust_remote_code)
    for cfg in configs(config):
        cfg.tie_word_embeddings = tied
    model, info = AutoModelForCausalLM.from_pretrained(
        source_dir,
        config=config,
        dtype="auto",
        trust_remote_code=trust_remote_code,
        output_loading_info=True,
    )
    broken = {k: sorted(v) for k, v in info.items() if k != "error_msgs" and v}
    if broken or info.get("error_msgs"):
        raise ValueError(
            f"{source_dir}: the source checkpoint does not load cleanly: "
            f"{broken} {info.get('error_msgs') or ''}"
        )
    model.eval()
    is_tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    if is_tied != tied:
        raise RuntimeError(f"{source_dir}: loaded tie={is_tied}, checkpoint tensors say {tied}")
    return model, tied


def write_transferred_checkpoint(
    source_dir: str | os.PathLike,
    target_tokenizer_dir: str | os.PathLike,
    input_rows: np.ndarray,
    output_rows: np.ndarray | None,
    out_dir: str | os.PathLike,
    *,
    mode: str = "replace",
    trust_remote_code: bool = False,
    allow_pickle: bool = False,
    metadata: dict | None = None,
    new_target_ids: Sequence[int] | None = None,
    source_tokenizer_dir: str | os.PathLike | None = None,
    row_labels: Sequence[str] | np.ndarray | None = None,
) -> dict[str, Any]:
    """Write the transferred model and its tokenizer to ``out_dir``, atomically.

    ``replace``: ``input_rows`` is V_t x h_s (V_t = the target tokenizer's ids);
    ``output_rows`` the same for an untied source and must be None for a tied one.
    ``extend``: the rows of the appended tokens only, in the order of
    ``new_target_ids`` (target ids; default :func:`new_target_tokens`); the
    source tokenizer comes from ``source_tokenizer_dir`` (default ``source_dir``).

    ``out_dir`` receives the safetensors model, config, generation config, the
    tokenizer and ``transfer.json`` (``metadata`` plus :func:`checkpoint_summary`
    under ``"checkpoint"`` and the check of the new rows under ``"row_check"``,
    :func:`embtransfer.transfer.row_check.check_new_rows`), which is also returned.
    ``row_labels``: the method's label of each row (rows labelled ``copied`` are the
    source's own and are not checked); None checks every row.
    """
    if mode not in MODES:
        raise ValueError(f"unknown vocabulary mode {mode!r}; expected one of {MODES}")
    source_dir = Path(source_dir)
    target_tok = load_tokenizer(target_tokenizer_dir, trust_remote_code=trust_remote_code)
    tokenizer, new_ids, keep = _vocabulary(
        mode, source_dir, target_tok, new_target_ids, source_tokenizer_dir, trust_remote_code
    )
    n_total = n_token_ids(tokenizer)
    ids = np.asarray(new_ids, dtype=np.int64)

    # Cheap checks first: a 7B source is only loaded for rows that can be written.
    _check_rows("input_rows", _as_rows("input_rows", input_rows, len(ids)), ids, tokenizer)
    if output_rows is not None:
        _check_rows("output_rows", _as_rows("output_rows", output_rows, len(ids)), ids, tokenizer)
    model, tied = load_source_model(source_dir, trust_remote_code, allow_pickle)
    rows_in, rows_out = _rows_for(model, tied, input_rows, output_rows, len(ids), source_dir)
    notes = _check_kept_rows(model, keep, mode, source_dir)
    method = (metadata or {}).get("method")
    row_check = check_new_rows(
        model.get_input_embeddings().weight,
        None if tied else model.get_output_embeddings().weight,
        rows_in, rows_out, ids, tokenizer.convert_ids_to_tokens, row_labels, method,
    )
    if row_check["flagged"]:
        log.warning("%s", row_check["message"])
    source_dtype = model.get_input_embeddings().weight.dtype
    _place_rows(model, n_total, keep, tied, rows_in, rows_out, ids, tokenizer, notes)
    _describe_vocabulary(model, tokenizer, mode, tied, n_total, notes)

    with atomic_path(out_dir, directory=True) as tmp:
        save_safetensors(model, tmp)
        tokenizer.save_pretrained(tmp)
        summary = checkpoint_summary(tmp, trust_remote_code=trust_remote_code)
        _check_written(summary, tied, n_total, source_dtype)
        record = {
            **(metadata or {}),
            "checkpoint": {
                **summary,
                "mode": mode,
                "source": str(source_dir),
                "target_tokenizer": str(target_tokenizer_dir),
                "kept_source_rows": keep,
                "new_rows": len(ids),
                "notes": notes,
                "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
            },
            "row_check": row_check,
        }
        write_json(tmp / TRANSFER_JSON, record)
    return record


def _check_written(summary: dict[str, Any], tied: bool, n_total: int, dtype: Any) -> None:
    """Refuse a written checkpoint whose tie, rows or dtype are not what was meant."""
    if summary["tied"] != tied or summary["embedding_rows"] != n_total:
        raise RuntimeError(
            f"written checkpoint disagrees: tied {summary['tied']} (wanted "
            f"{tied}), rows {summary['embedding_rows']} (wanted {n_total})"
        )
    if summary["dtype"] != str(dtype).removeprefix("torch."):
        raise RuntimeError(f"written dtype {summary['dtype']}, source {dtype}")


def _vocabulary(
    mode: str,
    source_dir: Path,
    target_tok: Any,
    new_target_ids: Sequence[int] | None,
    source_tokenizer_dir: str | os.PathLike | None,
    trust_remote_code: bool,
) -> tuple[Any, list[int], int]:
    """The tokenizer to save, the ids the method's rows belong to (in row order), and how
    many source rows are kept in front of them."""
    if mode == "extend":
        source_tok = load_tokenizer(
            source_tokenizer_dir or source_dir, trust_remote_code=trust_remote_code
        )
        if new_target_ids is None:
            new_target_ids = new_target_tokens(source_tok, target_tok)
        tokenizer, new_ids = extend_tokenizer(source_tok, target_tok, new_target_ids)
        return tokenizer, new_ids, n_token_ids(source_tok)
    if new_target_ids is not None or source_tokenizer_dir is not None:
        raise ValueError("new_target_ids / source_tokenizer_dir are for mode='extend' only")
    return target_tok, list(range(n_token_ids(target_tok))), 0


def _rows_for(
    model: Any, tied: bool, input_rows: Any, output_rows: Any, n: int, source_dir: Path
) -> tuple[np.ndarray, np.ndarray | None]:
    """The rows as arrays of the model's width; output rows exactly when the head is untied."""
    width = int(model.get_input_embeddings().weight.shape[1])
    rows_in = _as_rows("input_rows", input_rows, n, width)
    if tied and output_rows is not None:
        raise ValueError(
            f"{source_dir}: the source's LM head is tied to its input embeddings; "
            "output_rows must be None (the head is the input rows)"
        )
    if not tied and output_rows is None:
        raise ValueError(
            f"{source_dir}: the source has an untied LM head; output_rows are required"
        )
    rows_out = None
    if output_rows is not None:
        rows_out = _as_rows("output_rows", output_rows, n, width)
    return rows_in, rows_out


def _check_kept_rows(model: Any, keep: int, mode: str, source_dir: Path) -> list[str]:
    """Refuse source rows to keep that the model lacks or that hold NaN/Inf; the notes
    list, begun with what extend mode drops."""
    rows = model.get_input_embeddings().weight.shape[0]
    if keep > rows:
        raise ValueError(
            f"the source tokenizer has {keep} ids but the model only {rows} embedding rows"
        )
    notes: list[str] = []
    if mode == "extend" and rows > keep:
        notes.append(
            f"dropped {rows - keep} source padding rows (beyond the source tokenizer's ids)"
        )
    if keep:  # extend mode keeps source rows: refuse to carry NaN/Inf into the new model
        sides = (("input", model.get_input_embeddings()), ("output", model.get_output_embeddings()))
        for side, module in sides:
            bad = np.flatnonzero(~torch.isfinite(module.weight[:keep]).all(dim=1).numpy())
            if bad.size:
                raise NonFiniteEmbeddingsError(
                    f"{source_dir}: the source's {side} embeddings hold NaN/Inf in {bad.size} "
                    f"of the {keep} rows extend mode keeps, token ids {bad[:10].tolist()}; the "
                    "checkpoint is damaged: download, copy or train it again."
                )
    return notes


def _place_rows(
    model: Any,
    n_total: int,
    keep: int,
    tied: bool,
    rows_in: np.ndarray,
    rows_out: np.ndarray | None,
    ids: np.ndarray,
    tokenizer: Any,
    notes: list[str],
) -> None:
    """Resize the model to ``n_total`` rows, keep its first ``keep`` and write the method's
    rows after them; an LM-head bias as the module docstring says. The head stays ``tied``
    to the input rows or not."""
    head = model.get_output_embeddings()
    old_bias = None
    if getattr(head, "bias", None) is not None:
        old_bias = head.bias.detach().clone()
    with torch.no_grad():
        # resize keeps rows [0, min(old, new)) bit for bit and re-ties a tied head.
        with _uninitialised_resize():
            model.resize_token_embeddings(n_total, mean_resizing=False)
        emb = model.get_input_embeddings()
        emb.weight[keep:] = _to_param("input_rows", rows_in, emb.weight, ids, tokenizer)
        head = model.get_output_embeddings()
        if rows_out is not None:
            head.weight[keep:] = _to_param("output_rows", rows_out, head.weight, ids, tokenizer)
        if old_bias is not None:
            fill = old_bias[:keep].float().mean() if keep else 0.0
            head.bias[:keep] = old_bias[:keep]
            head.bias[keep:] = fill
            kept = "source rows kept, new rows = mean source bias"
            notes.append("lm_head bias: " + (kept if keep else "zeros (ids were replaced)"))
    if (model.get_output_embeddings().weight is model.get_input_embeddings().weight) != tied:
        raise RuntimeError("resizing changed whether the LM head is tied")


def _describe_vocabulary(
    model: Any, tokenizer: Any, mode: str, tied: bool, n_total: int, notes: list[str]
) -> None:
    """Make the config say what is saved: tie, size, special ids (replace mode); cap the
    tokenizer's ``model_max_length`` at the model's position limit."""
    for cfg in configs(model.config):
        cfg.tie_word_embeddings = tied
        cfg.vocab_size = n_total
    setattr(model.config, VOCAB_MODE_KEY, mode)
    if mode == "replace":
        _set_special_ids(model, target_special_ids(tokenizer, model.config.model_type), notes)
    limit = position_limit(model.config)
    if limit is not None and (tokenizer.model_max_length or 0) > limit:
        tokenizer.model_max_length = limit


# ---------------------------------------------------------------- summary


def checkpoint_summary(out_dir: str | os.PathLike, trust_remote_code: bool = False) -> dict:
    """Vocabulary size, tie, special ids, dtype and parameter count of a checkpoint.

    Tie and rows are read from the tensors (:func:`embedding_layout`, which decides as
    :func:`load_embeddings` does); parameters count each stored tensor once (a tied head is
    stored once).
    """
    out_dir = Path(out_dir)
    config = json.loads((out_dir / "config.json").read_text())
    text = text_config(config)
    emb = embedding_layout(out_dir, trust_remote_code=trust_remote_code)
    files = sorted(set(_safetensors_index(out_dir).values()))
    parameters = 0
    for file in files:
        with safe_open(file, framework="pt") as fh:
            for name in fh.keys():
                parameters += math.prod(fh.get_slice(name).get_shape())
    dtype = None
    if emb.input_name and emb.input_name != "instantiated":
        with safe_open(_safetensors_index(out_dir)[emb.input_name], framework="pt") as fh:
            dtype = str(fh.get_slice(emb.input_name).get_dtype())
    dtype = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64"}.get(
        dtype or "", dtype or str(config.get("dtype") or config.get("torch_dtype"))
    )
    gen_path = out_dir / "generation_config.json"
    gen = json.loads(gen_path.read_text()) if gen_path.exists() else {}
    out: dict[str, Any] = {
        "model_type": text.get("model_type") or config.get("model_type"),
        "vocab_size": int(text["vocab_size"]),
        "embedding_rows": emb.rows,
        "hidden_size": emb.width,
        "tied": emb.tied,
        "config_tie_word_embeddings": text.get(
            "tie_word_embeddings", config.get("tie_word_embeddings")
        ),
        "special_ids": {
            f"{r}_token_id": text.get(f"{r}_token_id")
            for r in CONFIG_ROLES
            if f"{r}_token_id" in text
        },
        "generation_special_ids": {
            k: gen.get(k)
            for k in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")
            if k in gen
        },
        "dtype": dtype,
        "parameters": int(parameters),
    }
    if (out_dir / "tokenizer.json").exists() or (out_dir / "tokenizer_config.json").exists():
        tok = load_tokenizer(out_dir, trust_remote_code=trust_remote_code)
        out["tokenizer_size"] = n_token_ids(tok)
        out["tokenizer_special_ids"] = {
            f"{r}_token_id": _role_id(tok, r)
            for r in ("bos", "eos", "pad", "unk", "cls", "sep", "mask")
            if _role_id(tok, r) is not None
        }
    return out
