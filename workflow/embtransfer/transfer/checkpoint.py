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
             lacks (:func:`extend_tokenizer`). Every source row is kept bit for
             bit; ``input_rows``/``output_rows`` hold the appended tokens only,
             in ``new_ids`` order.

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
* Source embedding rows beyond the source tokenizer's ids (padded vocabularies)
  are never produced by a tokenizer; extend mode drops them so the appended
  ids follow the source tokenizer's directly.
* The saved tokenizer's ``model_max_length`` is capped at the model's position
  limit; nothing else about the target tokenizer changes.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from safetensors import safe_open
from tokenizers import Tokenizer
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

from embtransfer.core.atomic import NonFiniteError, atomic_path, write_json
from embtransfer.models.loading import (
    NonFiniteEmbeddingsError,
    _safetensors_index,
    embedding_layout,
    load_tokenizer,
    nonfinite_rows,
)
from embtransfer.vocab.canonical import detect_scheme

MODES = ("replace", "extend")
TRANSFER_JSON = "transfer.json"
CONFIG_ROLES = ("bos", "eos", "pad", "unk")
# Families whose own tokenizer uses one token as bos and eos (GPT-2's <|endoftext|>).
SHARED_BOS_EOS = frozenset({"gpt2", "gpt_neox", "gptj", "codegen", "gpt_neo"})
# Generation settings that list token ids of the source vocabulary.
ID_LISTS = ("forced_bos_token_id", "forced_eos_token_id", "suppress_tokens",
            "begin_suppress_tokens", "bad_words_ids", "sequence_bias")
POSITION_KEYS = ("max_position_embeddings", "n_positions", "seq_length", "n_ctx")


# ---------------------------------------------------------------- helpers


def _n_ids(tokenizer: Any) -> int:
    """Rows a tokenizer needs: ids may have holes, the largest id decides."""
    vocab = tokenizer.get_vocab()
    return max(len(tokenizer), (max(vocab.values()) + 1) if vocab else 0)


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
    return {"bos_token_id": bos, "eos_token_id": eos,
            "pad_token_id": _role_id(tokenizer, "pad"), "unk_token_id": _role_id(tokenizer, "unk")}


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


def _configs(config: Any) -> list[Any]:
    """The config and, for multimodal wrappers, its text config."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return [config] if text is config else [config, text]


def _set_special_ids(model: Any, ids: dict[str, int | None], notes: list[str]) -> None:
    for cfg in _configs(model.config):
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
        raise ValueError(f"{name} has shape {rows.shape}, expected ({n}, "
                         f"{width if width is not None else 'hidden size'}) (rows x hidden size)")
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
        _check_rows(f"{name} (after casting to {like.dtype})",
                    np.where(finite[:, None], 0.0, np.nan), ids, tok)
    return tensor


def _position_limit(config: Any) -> int | None:
    for cfg in _configs(config)[::-1]:
        for key in POSITION_KEYS:
            value = getattr(cfg, key, None)
            if isinstance(value, int) and value > 0:
                return value
    return None


# ---------------------------------------------------------------- extend mode


def _bpe_scheme(tokenizer: Any) -> str:
    scheme, info = detect_scheme(tokenizer)
    return f"{scheme}/{info.get('model_type') or '?'}"


def _merge_pair(merge: Any) -> tuple[str, str]:
    if isinstance(merge, str):
        a, b = merge.split(" ", 1)
        return a, b
    return str(merge[0]), str(merge[1])


def new_target_tokens(source_tokenizer: Any, target_tokenizer: Any) -> list[int]:
    """Target ids of the ordinary vocabulary entries whose string the source vocab lacks.

    For two byte-level BPE tokenizers the string is the token's bytes and word-start
    flag, so this is the exact-match complement of the overlap.
    """
    source = source_tokenizer.backend_tokenizer.get_vocab(with_added_tokens=True)
    target = target_tokenizer.backend_tokenizer.get_vocab(with_added_tokens=False)
    special = set(target_tokenizer.all_special_ids)
    special |= {int(i) for i in target_tokenizer.backend_tokenizer.get_added_tokens_decoder()}
    return sorted(i for t, i in target.items() if t not in source and i not in special)


def extend_tokenizer(
    source_tokenizer: Any, target_tokenizer: Any, new_target_ids: Sequence[int]
) -> tuple[Any, list[int]]:
    """The source tokenizer with the target's ``new_target_ids`` appended to its vocabulary.

    Byte-level BPE source and target only: the entries are appended to the
    source's BPE model with the target merges that build them (ranked after
    every source merge), so ordinary tokenisation produces them; they are not
    added tokens. Returns the extended tokenizer and the new ids, position
    ``i`` holding the id of ``new_target_ids[i]``. A target token that is
    special, an added token, repeated, or already in the source vocabulary is
    refused: its row would have nowhere to go.
    """
    schemes = (_bpe_scheme(source_tokenizer), _bpe_scheme(target_tokenizer))
    if schemes != ("byte_level/BPE", "byte_level/BPE"):
        raise ValueError(
            f"extend mode supports byte-level BPE source and target tokenizers only; got "
            f"source {schemes[0]}, target {schemes[1]}"
        )
    src = json.loads(source_tokenizer.backend_tokenizer.to_str())
    tgt = json.loads(target_tokenizer.backend_tokenizer.to_str())
    vocab: dict[str, int] = src["model"]["vocab"]
    t_inv = {i: t for t, i in tgt["model"]["vocab"].items()}
    src_added = {a["content"] for a in src.get("added_tokens", [])}
    t_special = set(target_tokenizer.all_special_ids)
    t_special |= {a["id"] for a in tgt.get("added_tokens", [])}

    start = _n_ids(source_tokenizer)
    new_tokens: list[str] = []
    problems: list[str] = []
    for tid in (int(i) for i in new_target_ids):
        tok = t_inv.get(tid)
        if tok is None or tid in t_special:
            problems.append(f"{tid} (special or not in the target's BPE vocabulary)")
        elif tok in vocab or tok in src_added:
            problems.append(f"{tid} {tok!r} (already in the source vocabulary)")
        elif tok in new_tokens:
            problems.append(f"{tid} {tok!r} (repeated)")
        else:
            new_tokens.append(tok)
    if problems:
        raise ValueError(f"cannot append {len(problems)} target tokens: {problems[:10]}")
    new_ids = list(range(start, start + len(new_tokens)))
    vocab.update(zip(new_tokens, new_ids, strict=True))

    merges = src["model"]["merges"]
    as_strings = bool(merges) and isinstance(merges[0], str)
    known = {_merge_pair(m) for m in merges}
    for merge in tgt["model"]["merges"]:
        a, b = _merge_pair(merge)
        # Keep a merge only where both parts and the result exist in the new vocabulary.
        if (a, b) not in known and a in vocab and b in vocab and a + b in vocab:
            merges.append(f"{a} {b}" if as_strings else [a, b])
            known.add((a, b))

    backend = Tokenizer.from_str(json.dumps(src))

    # Save and reload the source tokenizer around the new tokenizer.json: this keeps
    # its class, special-token roles, padding side and templates.
    with tempfile.TemporaryDirectory() as tmp:
        source_tokenizer.save_pretrained(tmp)
        backend.save(os.path.join(tmp, "tokenizer.json"))
        extended = AutoTokenizer.from_pretrained(tmp)
    if _n_ids(extended) != start + len(new_ids) or (
        new_tokens and extended.convert_tokens_to_ids(new_tokens[-1]) != new_ids[-1]
    ):
        # A tokenizer class that rebuilt itself from vocab files: wrap the backend directly.
        roles = {f"{r}_token": getattr(source_tokenizer, f"{r}_token", None)
                 for r in ("bos", "eos", "unk", "pad", "mask", "cls", "sep")}
        extended = PreTrainedTokenizerFast(
            tokenizer_object=backend, model_max_length=source_tokenizer.model_max_length,
            **{k: v for k, v in roles.items() if v is not None},
        )
        extended.padding_side = source_tokenizer.padding_side
    return extended, new_ids


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


def _load_source(source_dir: Path, trust_remote_code: bool, allow_pickle: bool = False
                 ) -> tuple[Any, bool]:
    """The source causal LM with its tie decided from the checkpoint's tensors."""
    tied = embedding_layout(source_dir, trust_remote_code=trust_remote_code,
                            allow_pickle=allow_pickle).tied
    config = AutoConfig.from_pretrained(source_dir, trust_remote_code=trust_remote_code)
    for cfg in _configs(config):
        cfg.tie_word_embeddings = tied
    model, info = AutoModelForCausalLM.from_pretrained(
        source_dir, config=config, dtype="auto", trust_remote_code=trust_remote_code,
        output_loading_info=True,
    )
    broken = {k: sorted(v) for k, v in info.items() if k != "error_msgs" and v}
    if broken or info.get("error_msgs"):
        raise ValueError(f"{source_dir}: the source checkpoint does not load cleanly: "
                         f"{broken} {info.get('error_msgs') or ''}")
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
) -> dict[str, Any]:
    """Write the transferred model and its tokenizer to ``out_dir``, atomically.

    ``replace``: ``input_rows`` is V_t x h_s (V_t = the target tokenizer's ids);
    ``output_rows`` the same for an untied source and must be None for a tied one.
    ``extend``: the rows of the appended tokens only, in the order of
    ``new_target_ids`` (target ids; default :func:`new_target_tokens`); the
    source tokenizer comes from ``source_tokenizer_dir`` (default ``source_dir``).

    ``out_dir`` receives the safetensors model, config, generation config, the
    tokenizer and ``transfer.json`` (``metadata`` plus :func:`checkpoint_summary`
    under ``"checkpoint"``), which is also returned.
    """
    if mode not in MODES:
        raise ValueError(f"unknown vocabulary mode {mode!r}; expected one of {MODES}")
    source_dir = Path(source_dir)
    target_tok = load_tokenizer(target_tokenizer_dir, trust_remote_code=trust_remote_code)
    notes: list[str] = []

    if mode == "extend":
        source_tok = load_tokenizer(source_tokenizer_dir or source_dir,
                                    trust_remote_code=trust_remote_code)
        if new_target_ids is None:
            new_target_ids = new_target_tokens(source_tok, target_tok)
        tokenizer, new_ids = extend_tokenizer(source_tok, target_tok, new_target_ids)
        keep = _n_ids(source_tok)
    else:
        if new_target_ids is not None or source_tokenizer_dir is not None:
            raise ValueError("new_target_ids / source_tokenizer_dir are for mode='extend' only")
        tokenizer, new_ids, keep = target_tok, list(range(_n_ids(target_tok))), 0
    n_total = _n_ids(tokenizer)
    ids = np.asarray(new_ids, dtype=np.int64)

    # Cheap checks first: a 7B source is only loaded for rows that can be written.
    _check_rows("input_rows", _as_rows("input_rows", input_rows, len(ids)), ids, tokenizer)
    if output_rows is not None:
        _check_rows("output_rows", _as_rows("output_rows", output_rows, len(ids)), ids,
                    tokenizer)
    model, tied = _load_source(source_dir, trust_remote_code, allow_pickle)
    emb = model.get_input_embeddings()
    width = int(emb.weight.shape[1])
    rows_in = _as_rows("input_rows", input_rows, len(ids), width)
    if tied and output_rows is not None:
        raise ValueError(f"{source_dir}: the source's LM head is tied to its input embeddings; "
                         "output_rows must be None (the head is the input rows)")
    if not tied and output_rows is None:
        raise ValueError(f"{source_dir}: the source has an untied LM head; output_rows "
                         "are required")
    rows_out = None
    if output_rows is not None:
        rows_out = _as_rows("output_rows", output_rows, len(ids), width)
    if keep > emb.weight.shape[0]:
        raise ValueError(f"the source tokenizer has {keep} ids but the model only "
                         f"{emb.weight.shape[0]} embedding rows")
    if mode == "extend" and emb.weight.shape[0] > keep:
        notes.append(f"dropped {emb.weight.shape[0] - keep} source padding rows "
                     "(beyond the source tokenizer's ids)")

    if keep:  # extend mode keeps source rows: refuse to carry NaN/Inf into the new model
        for side, module in (("input", emb), ("output", model.get_output_embeddings())):
            bad = np.flatnonzero(~torch.isfinite(module.weight[:keep]).all(dim=1).numpy())
            if bad.size:
                raise NonFiniteEmbeddingsError(
                    f"{source_dir}: the source's {side} embeddings hold NaN/Inf in {bad.size} "
                    f"of the {keep} rows extend mode keeps, token ids {bad[:10].tolist()}; the "
                    "checkpoint is damaged: download, copy or train it again.")
    head = model.get_output_embeddings()
    old_bias = None
    if getattr(head, "bias", None) is not None:
        old_bias = head.bias.detach().clone()
    source_dtype = emb.weight.dtype

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
            notes.append("lm_head bias: " + ("source rows kept, new rows = mean source bias"
                                              if keep else "zeros (ids were replaced)"))
    if (model.get_output_embeddings().weight is model.get_input_embeddings().weight) != tied:
        raise RuntimeError("resizing changed whether the LM head is tied")

    for cfg in _configs(model.config):
        cfg.tie_word_embeddings = tied
        cfg.vocab_size = n_total
    if mode == "replace":
        _set_special_ids(model, target_special_ids(tokenizer, model.config.model_type), notes)
    limit = _position_limit(model.config)
    if limit is not None and (tokenizer.model_max_length or 0) > limit:
        tokenizer.model_max_length = limit

    with atomic_path(out_dir, directory=True) as tmp:
        # transformers 5 always writes safetensors and no longer takes the flag.
        major = int(transformers.__version__.split(".")[0])
        model.save_pretrained(tmp, **({"safe_serialization": True} if major < 5 else {}))
        tokenizer.save_pretrained(tmp)
        summary = checkpoint_summary(tmp, trust_remote_code=trust_remote_code)
        if summary["tied"] != tied or summary["embedding_rows"] != n_total:
            raise RuntimeError(f"written checkpoint disagrees: tied {summary['tied']} (wanted "
                               f"{tied}), rows {summary['embedding_rows']} (wanted {n_total})")
        if summary["dtype"] != str(source_dtype).removeprefix("torch."):
            raise RuntimeError(f"written dtype {summary['dtype']}, source {source_dtype}")
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
                "versions": {"torch": torch.__version__,
                             "transformers": transformers.__version__},
            },
        }
        write_json(tmp / TRANSFER_JSON, record)
    return record


# ---------------------------------------------------------------- summary


def checkpoint_summary(out_dir: str | os.PathLike, trust_remote_code: bool = False) -> dict:
    """Vocabulary size, tie, special ids, dtype and parameter count of a checkpoint.

    Tie and rows are read from the tensors (:func:`embedding_layout`, which decides as
    :func:`load_embeddings` does); parameters count each stored tensor once (a tied head is
    stored once).
    """
    out_dir = Path(out_dir)
    config = json.loads((out_dir / "config.json").read_text())
    text = config.get("text_config") or config
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
        dtype or "", dtype or str(config.get("dtype") or config.get("torch_dtype")))
    gen_path = out_dir / "generation_config.json"
    gen = json.loads(gen_path.read_text()) if gen_path.exists() else {}
    out: dict[str, Any] = {
        "model_type": text.get("model_type") or config.get("model_type"),
        "vocab_size": int(text["vocab_size"]),
        "embedding_rows": emb.rows,
        "hidden_size": emb.width,
        "tied": emb.tied,
        "config_tie_word_embeddings": text.get("tie_word_embeddings",
                                               config.get("tie_word_embeddings")),
        "special_ids": {f"{r}_token_id": text.get(f"{r}_token_id") for r in CONFIG_ROLES
                        if f"{r}_token_id" in text},
        "generation_special_ids": {k: gen.get(k) for k in
                                   ("bos_token_id", "eos_token_id", "pad_token_id",
                                    "decoder_start_token_id") if k in gen},
        "dtype": dtype,
        "parameters": int(parameters),
    }
    if (out_dir / "tokenizer.json").exists() or (out_dir / "tokenizer_config.json").exists():
        tok = load_tokenizer(out_dir, trust_remote_code=trust_remote_code)
        out["tokenizer_size"] = _n_ids(tok)
        out["tokenizer_special_ids"] = {f"{r}_token_id": _role_id(tok, r) for r in
                                        ("bos", "eos", "pad", "unk", "cls", "sep", "mask")
                                        if _role_id(tok, r) is not None}
    return out
