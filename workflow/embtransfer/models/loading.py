"""The model seam: load tokenizers, read embedding matrices.

Every later stage reaches models through this module, whether they are hub
snapshots (pinned by revision; :func:`embtransfer.data.download.fetch_hub_snapshot` fetches
them), local checkpoints or the miniature world's models. Embeddings are read straight
from the safetensors files where the tensor names are known, so a 7B checkpoint's
embedding matrix is read without building the 7B model.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from safetensors import safe_open
from tokenizers import AddedToken, Tokenizer
from transformers import AutoConfig, AutoTokenizer

from embtransfer.models.hf import VOCAB_MODE_KEY, n_token_ids, text_config

# Tensor names of the input and output embeddings by model type, most specific first.
# A hub checkpoint saved from the base class (GPT-2's own, BLOOM's) has no prefix.
INPUT_NAMES: dict[str, tuple[str, ...]] = {
    "gpt2": ("transformer.wte.weight", "wte.weight"),
    "llama": ("model.embed_tokens.weight", "embed_tokens.weight"),
    "mistral": ("model.embed_tokens.weight", "embed_tokens.weight"),
    "gemma": ("model.embed_tokens.weight", "embed_tokens.weight"),
    "gemma2": ("model.embed_tokens.weight", "embed_tokens.weight"),
    "qwen2": ("model.embed_tokens.weight", "embed_tokens.weight"),
    "xglm": ("model.embed_tokens.weight", "embed_tokens.weight"),
    "bloom": ("transformer.word_embeddings.weight", "word_embeddings.weight"),
    "gpt_neox": ("gpt_neox.embed_in.weight", "embed_in.weight"),
    "bert": ("bert.embeddings.word_embeddings.weight", "embeddings.word_embeddings.weight"),
    "roberta": (
        "roberta.embeddings.word_embeddings.weight",
        "embeddings.word_embeddings.weight",
    ),
    "t5": ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight"),
    "mt5": ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight"),
}
OUTPUT_NAMES: dict[str, tuple[str, ...]] = {
    "gpt2": ("lm_head.weight",),
    "bloom": ("lm_head.weight",),
    "gpt_neox": ("embed_out.weight",),
    "bert": ("cls.predictions.decoder.weight",),
    "roberta": ("lm_head.decoder.weight",),
}
DEFAULT_OUTPUT_NAMES = ("lm_head.weight",)
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")
# Generic suffixes for model types not listed above.
INPUT_SUFFIXES = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight", "embed_in.weight")
OUTPUT_SUFFIXES = ("lm_head.weight", "embed_out.weight", "predictions.decoder.weight")


@dataclass
class Embeddings:
    """A model's vocabulary embeddings as float32 arrays (rows = token ids)."""

    input: np.ndarray  # [V, h]
    output: np.ndarray | None  # [V, h]; None when tied to ``input``
    tied: bool
    model_type: str
    # Where the rows came from: tensor names, or "instantiated" for the fallback.
    input_name: str = ""
    output_name: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def family(self) -> str:
        return self.model_type

    @property
    def vocab_rows(self) -> int:
        return int(self.input.shape[0])

    @property
    def output_or_input(self) -> np.ndarray:
        """The LM head's rows, which are the input rows for a tied model."""
        return self.input if self.output is None else self.output


# ---------------------------------------------------------------- tokenizer


def load_tokenizer(path: str | os.PathLike, trust_remote_code: bool = False) -> Any:
    """The tokenizer at ``path``: fast (Rust) where possible, else the slow one.

    transformers builds a fast tokenizer from most vocabulary files itself
    (``vocab.txt`` of BERT, ``spiece.model`` of T5, ``vocab.json`` + ``merges.txt``
    of GPT-2). A tokenizer it has no fast version of (PhoBERT's fairseq BPE,
    ``PhobertTokenizer``) is used slow: every stage accepts it (:func:`is_fast`
    tells them apart).
    """
    tok = AutoTokenizer.from_pretrained(str(path), trust_remote_code=trust_remote_code)
    if is_fast(tok):
        _keep_never_split(tok, Path(path))
    return tok


def _keep_never_split(tokenizer: Any, path: Path) -> None:
    """Honour a BERT ``never_split`` list, which transformers' fast BertTokenizer ignores.

    AraBERT v2 lists its Farasa segment tokens (``ال+``, ``+ها``) there: its
    input comes segmented (``و+ ال+ كتاب +ها``) and the slow tokenizer keeps
    each mark on its segment, where the fast one would split ``ال`` from ``+``.
    Each listed token of the vocabulary becomes a whole-word added token (same
    id), so the fast tokenizer tokenizes as the PLM was trained.
    """
    config = path / "tokenizer_config.json"
    if not config.is_file():
        return
    never_split = json.loads(config.read_text(encoding="utf-8")).get("never_split") or []
    if not never_split:  # most tokenizers: no vocabulary to build (0.1 s at 262k tokens)
        return
    vocab = tokenizer.get_vocab()
    keep = [t for t in never_split if isinstance(t, str) and t in vocab]
    if keep:
        tokenizer.add_tokens([AddedToken(t, single_word=True, normalized=False) for t in keep])


def is_fast(tokenizer: Any) -> bool:
    """Whether a tokenizer has a Rust backend (``backend_tokenizer``)."""
    return bool(getattr(tokenizer, "is_fast", False)) and hasattr(tokenizer, "backend_tokenizer")


# ---------------------------------------------------------------- embeddings


def _read_config(model_dir: Path) -> dict[str, Any]:
    path = model_dir / "config.json"
    if not path.exists():
        raise FileNotFoundError(f"{model_dir}: no config.json (is this a model checkpoint?)")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(
            f"{path} is not valid JSON ({err}); the checkpoint is damaged: download or "
            "copy it again"
        ) from err


def _safetensors_index(model_dir: Path) -> dict[str, Path]:
    """Tensor name -> file, over a single or sharded safetensors checkpoint."""
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        return {name: model_dir / fname for name, fname in weight_map.items()}

    out: dict[str, Path] = {}
    for file in sorted(model_dir.glob("*.safetensors")):
        with safe_open(file, framework="pt") as fh:
            for name in fh.keys():
                out[name] = file
    return out


def _read_tensor(file: Path, name: str) -> np.ndarray:
    # framework="pt": bfloat16 has no numpy dtype, torch converts it.
    return _raw_tensor(file, name).float().numpy()


def _find(names: dict[str, Path], candidates: Sequence[str], suffixes: Sequence[str]) -> str | None:
    for cand in candidates:
        if cand in names:
            return cand
    for suffix in suffixes:
        hits = sorted(n for n in names if n == suffix or n.endswith("." + suffix))
        # Skip decoder-side copies and vision towers; accept only one clear hit.
        hits = [n for n in hits if "vision" not in n and "decoder.embed_tokens" not in n]
        if len(hits) == 1:
            return hits[0]
    return None


class NonFiniteEmbeddingsError(ValueError):
    """An embedding matrix holds NaN or Inf; the message names the file, rows and tokens."""


def nonfinite_rows(matrix: np.ndarray, block_rows: int = 65536) -> np.ndarray:
    """Ids of the rows of ``matrix`` that hold NaN or Inf (in blocks: no full-size mask).

    A row's sum is NaN or Inf whenever the row holds one, so only rows whose sum is not
    finite (those, and finite rows whose sum overflows) are checked value by value: a
    quarter of the time of checking every value, at Gemma 3's width.
    """
    bad = []
    for s in range(0, matrix.shape[0], block_rows):
        block = matrix[s : s + block_rows]
        with np.errstate(over="ignore", invalid="ignore"):
            suspect = np.flatnonzero(~np.isfinite(block.sum(axis=1)))
        bad.append(s + suspect[~np.isfinite(block[suspect]).all(axis=1)])
    return np.concatenate(bad) if bad else np.zeros(0, np.int64)


def name_rows(ids: np.ndarray, tokens: Sequence[str] | None, limit: int = 10) -> str:
    """``3 'ab', 7 'c' (and 5 more)``: the first ``limit`` ids with their tokens."""
    shown = [int(i) for i in ids[:limit]]
    named = ", ".join(
        f"{i} {tokens[i]!r}" if tokens is not None and i < len(tokens) else str(i) for i in shown
    )
    return named + (f" (and {ids.size - limit} more)" if ids.size > limit else "")


def _tokens_in(model_dir: Path) -> list[str] | None:
    """The checkpoint's tokens by id (for error messages), or None without a tokenizer."""
    try:
        tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        return [tok.id_to_token(i) or "" for i in range(tok.get_vocab_size(True))]
    except Exception:  # only an error message needs them
        return None


def _check_finite_embeddings(model_dir: Path, emb: Embeddings) -> Embeddings:
    for name, matrix in ((emb.input_name, emb.input), (emb.output_name, emb.output)):
        if matrix is None:
            continue
        bad = nonfinite_rows(matrix)
        if bad.size:
            raise NonFiniteEmbeddingsError(
                f"{model_dir}: the embedding matrix {name} holds NaN/Inf in {bad.size} of "
                f"{matrix.shape[0]} rows: token ids and tokens "
                f"{name_rows(bad, _tokens_in(model_dir))}. The checkpoint is damaged (or was "
                "saved after a diverged run): download, copy or train it again."
            )
    return emb


def load_embeddings(
    model_dir: str | os.PathLike, trust_remote_code: bool = False, allow_pickle: bool = False
) -> Embeddings:
    """Input and output embeddings of a checkpoint, as float32 numpy arrays.

    Tying is read from the checkpoint itself: a stored head equal to the input
    rows is tied, a different one untied, a missing one tied when the config
    says so. (transformers 5 reports ``tie_word_embeddings=True`` for every T5,
    v1.1 included, so the config alone cannot be trusted.) Rows holding NaN or
    Inf are refused (:class:`NonFiniteEmbeddingsError`), naming them; so is a checkpoint
    whose weights are pickles only, unless ``allow_pickle``.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise FileNotFoundError(
            f"model directory {model_dir} does not exist (check the model's path in the "
            "config, or run its download rule)"
        )
    emb = _load_embeddings(model_dir, trust_remote_code, allow_pickle)
    return _check_finite_embeddings(model_dir, emb)


@dataclass
class _Stored:
    """Where a checkpoint's safetensors keep its embedding matrices (nothing read yet)."""

    model_type: str
    names: dict[str, Path]
    input_name: str | None
    output_name: str | None
    config_tied: bool


def _stored(model_dir: Path, allow_pickle: bool) -> _Stored:
    config = _read_config(model_dir)
    text = text_config(config)
    model_type = str(text.get("model_type") or config.get("model_type") or "")
    try:
        names = _safetensors_index(model_dir)
    except Exception:  # unreadable or missing safetensors: build the model instead
        names = {}
    pickles = sorted(p.name for p in model_dir.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if not names and pickles and not allow_pickle:
        raise ValueError(
            f"{model_dir} holds its weights only as pickle files ({', '.join(pickles)}), and "
            "unpickling can run code. Convert the checkpoint to safetensors (load it once with "
            "transformers, which uses torch.load(weights_only=True), and save_pretrained it), "
            "use a revision that has model.safetensors, or set `allow_pickle: true` in the "
            "config to load it with torch.load(weights_only=True)."
        )
    inp = _find(names, INPUT_NAMES.get(model_type, ()), INPUT_SUFFIXES) if names else None
    out = None
    if inp is not None:
        out = _find(names, OUTPUT_NAMES.get(model_type, DEFAULT_OUTPUT_NAMES), OUTPUT_SUFFIXES)
    tied = bool(text.get("tie_word_embeddings", config.get("tie_word_embeddings", True)))
    return _Stored(model_type, names, inp, out, tied)


def _load_embeddings(model_dir: Path, trust_remote_code: bool, allow_pickle: bool) -> Embeddings:
    st = _stored(model_dir, allow_pickle)
    if st.input_name is not None:
        inp_name, out_name = st.input_name, st.output_name
        inp = _read_tensor(st.names[inp_name], inp_name)
        if out_name is not None:
            out = _read_tensor(st.names[out_name], out_name)
            if out.shape == inp.shape and np.array_equal(out, inp):
                return Embeddings(
                    inp,
                    None,
                    True,
                    st.model_type,
                    inp_name,
                    None,
                    [f"{out_name} stored but equal to {inp_name}"],
                )
            if out.shape[1] != inp.shape[1]:
                raise ValueError(
                    f"{model_dir}: {inp_name} {inp.shape} and {out_name} {out.shape} "
                    "differ in width"
                )
            return Embeddings(inp, out, False, st.model_type, inp_name, out_name)
        if st.config_tied:
            return Embeddings(inp, None, True, st.model_type, inp_name, None)
    return _embeddings_by_instantiation(model_dir, st.model_type, trust_remote_code)


@dataclass
class EmbeddingLayout:
    """A checkpoint's vocabulary rows, width, tie and input tensor, without its values."""

    rows: int
    width: int
    tied: bool
    input_name: str


def embedding_layout(
    model_dir: str | os.PathLike, trust_remote_code: bool = False, allow_pickle: bool = False
) -> EmbeddingLayout:
    """What :func:`load_embeddings` would say of the shape and tie, reading only the tensor
    headers (and, where a head is stored, comparing it with the input rows in their own
    dtype): for a Gemma 3-sized vocabulary, the float32 copies and finiteness checks that
    :func:`load_embeddings` makes took most of a second per call. Checkpoints that it
    cannot answer from safetensors (pickles, models built to find their embeddings) go
    through :func:`load_embeddings`."""
    model_dir = Path(model_dir)
    st = _stored(model_dir, allow_pickle)
    inp, out = st.input_name, st.output_name
    if inp is not None and (out is not None or st.config_tied):
        shape = _shape(st.names[inp], inp)
        tied = out is None
        if not tied:
            out_shape = _shape(st.names[out], out)
            if out_shape[1] != shape[1]:
                raise ValueError(
                    f"{model_dir}: {inp} {shape} and {out} {out_shape} differ in width"
                )
            tied = out_shape == shape and torch.equal(
                _raw_tensor(st.names[inp], inp), _raw_tensor(st.names[out], out)
            )
        return EmbeddingLayout(shape[0], shape[1], tied, inp)
    emb = load_embeddings(model_dir, trust_remote_code, allow_pickle)
    return EmbeddingLayout(emb.vocab_rows, int(emb.input.shape[1]), emb.tied, emb.input_name)


def _shape(file: Path, name: str) -> tuple[int, ...]:
    with safe_open(file, framework="pt") as fh:
        return tuple(int(n) for n in fh.get_slice(name).get_shape())


def _raw_tensor(file: Path, name: str) -> torch.Tensor:
    with safe_open(file, framework="pt") as fh:
        return fh.get_tensor(name)


def _embeddings_by_instantiation(
    model_dir: Path, model_type: str, trust_remote_code: bool
) -> Embeddings:
    """Fallback: build the model and ask it (costs the model's memory)."""
    config = AutoConfig.from_pretrained(model_dir, trust_remote_code=trust_remote_code)
    classes = []
    for arch in getattr(config, "architectures", None) or []:
        cls = getattr(transformers, arch, None)
        if cls is not None:
            classes.append(cls)
    classes += [
        transformers.AutoModelForCausalLM,
        transformers.AutoModelForSeq2SeqLM,
        transformers.AutoModelForMaskedLM,
        transformers.AutoModel,
    ]
    model = None
    errors: list[str] = []
    for cls in classes:
        try:
            model, loading = cls.from_pretrained(
                model_dir,
                trust_remote_code=trust_remote_code,
                dtype=torch.float32,
                output_loading_info=True,
            )
            break
        except Exception as err:  # try the next head class
            errors.append(f"{getattr(cls, '__name__', cls)}: {err}")
    if model is None:
        raise ValueError(
            f"{model_dir}: could not load the model to read embeddings:\n" + "\n".join(errors)
        )
    # from_pretrained fills missing tensors with random ones; random embeddings
    # must never pass for the checkpoint's.
    names = {id(p): n for n, p in model.named_parameters(remove_duplicate=False)}
    wanted = [names.get(id(model.get_input_embeddings().weight))]
    if model.get_output_embeddings() is not None:
        wanted.append(names.get(id(model.get_output_embeddings().weight)))
    missing = set(loading.get("missing_keys", []))
    lost = [n for n in wanted if n is not None and n in missing]
    if lost:
        raise ValueError(
            f"{model_dir}: the checkpoint has no tensor for {lost} (model type "
            f"{model_type!r}); cannot read its embeddings"
        )
    inp_w = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    inp = inp_w.detach().float().cpu().numpy().copy()
    if head is None or head.weight.data_ptr() == inp_w.data_ptr():
        return Embeddings(
            inp, None, True, model_type, "instantiated", None, ["read by instantiating the model"]
        )
    out = head.weight.detach().float().cpu().numpy().copy()
    if out.shape == inp.shape and np.array_equal(out, inp):
        return Embeddings(
            inp, None, True, model_type, "instantiated", None, ["read by instantiating the model"]
        )
    return Embeddings(
        inp,
        out,
        False,
        model_type,
        "instantiated",
        "instantiated",
        ["read by instantiating the model"],
    )


# ---------------------------------------------------------------- agreement


def _tokenizer_ids(tokenizer: Any) -> tuple[int, str]:
    if isinstance(tokenizer, str | os.PathLike):
        where = str(tokenizer)
        tokenizer = load_tokenizer(tokenizer)
    else:
        where = str(getattr(tokenizer, "name_or_path", "") or "<tokenizer object>")
    return n_token_ids(tokenizer), where


def _model_rows(model: Any) -> tuple[int, str]:
    if isinstance(model, dict):
        return int(text_config(model)["vocab_size"]), "<config dict>"
    if hasattr(model, "vocab_size") and not isinstance(model, str | os.PathLike):
        where = str(getattr(model, "name_or_path", "") or "<config>")
        return int(text_config(model).vocab_size), where
    model_dir = Path(model)
    config = _read_config(model_dir)
    rows = int(text_config(config)["vocab_size"])
    # The embedding tensor's shape is the truth when a checkpoint disagrees with its config.
    try:
        names = _safetensors_index(model_dir)
        name = _find(
            names, INPUT_NAMES.get(text_config(config).get("model_type", ""), ()), INPUT_SUFFIXES
        )
        if name is not None:
            with safe_open(names[name], framework="pt") as fh:
                rows = int(fh.get_slice(name).get_shape()[0])
    except Exception:  # config's vocab_size is good enough
        pass
    return rows, str(model_dir)


def check_tokenizer_model_agreement(tokenizer: Any, model: Any) -> dict[str, Any]:
    """Refuse a tokenizer whose ids exceed the model's embedding rows, before any compute.

    ``tokenizer``: a tokenizer or its path; ``model``: a checkpoint directory, a
    config dict or a ``PretrainedConfig``. More rows than ids (padded vocabularies
    such as Gemma's or a GPT-2 padded to a multiple of 64) are allowed and reported.
    """
    n_ids, tok_where = _tokenizer_ids(tokenizer)
    return check_id_count(n_ids, tok_where, model)


def check_id_count(n_ids: int, tok_where: str, model: Any) -> dict[str, Any]:
    """:func:`check_tokenizer_model_agreement` for a tokenizer already counted: ``n_ids``
    ids (:func:`embtransfer.models.hf.n_token_ids`, or the rows of its vocabulary table,
    which has one per id), found at ``tok_where``."""
    rows, model_where = _model_rows(model)
    if n_ids > rows:
        raise ValueError(
            f"tokenizer/model mismatch: the tokenizer at {tok_where} has {n_ids} ids but the "
            f"model at {model_where} has only {rows} embedding rows; ids {rows}..{n_ids - 1} "
            "would index past the embedding matrix. Use the tokenizer that belongs to this "
            "model (or resize the model's embeddings first)."
        )
    info = {
        "tokenizer_ids": n_ids,
        "model_rows": rows,
        "padding_rows": rows - n_ids,
        "tokenizer": tok_where,
        "model": model_where,
    }
    if rows > n_ids:
        info["note"] = (
            f"model has {rows - n_ids} embedding rows beyond the tokenizer's "
            f"{n_ids} ids (padding rows; never produced by the tokenizer)"
        )
    return info


def target_rows(checkpoint_dir: str | os.PathLike, target_tokenizer_dir: str | os.PathLike,
                trust_remote_code: bool = False) -> Embeddings:
    """A checkpoint's embeddings with row ``i`` the row of the target tokenizer's id ``i``.

    A replaced vocabulary's checkpoint is in that order already (its tokenizer is the
    target's). An extended one (config key :data:`~embtransfer.models.hf.VOCAB_MODE_KEY`,
    which LAPT's checkpoints keep) holds the source's ids, then the target tokens the source
    lacks: there row ``i`` is some source token's, so each target token's row is found by
    the token in the checkpoint's own tokenizer. A target token it lacks gets a NaN row,
    which :func:`embtransfer.evaluation.alignment.score_checkpoints` refuses to score."""
    emb = load_embeddings(checkpoint_dir, trust_remote_code=trust_remote_code)
    config = json.loads((Path(checkpoint_dir) / "config.json").read_text())
    if config.get(VOCAB_MODE_KEY) != "extend":
        return emb
    target = load_tokenizer(target_tokenizer_dir, trust_remote_code=trust_remote_code)
    vocab = load_tokenizer(checkpoint_dir, trust_remote_code=trust_remote_code).get_vocab()
    tokens = target.convert_ids_to_tokens(list(range(n_token_ids(target))))
    ids = np.array([vocab.get(t, -1) if t is not None else -1 for t in tokens], np.int64)

    def by_target(rows: np.ndarray | None) -> np.ndarray | None:
        if rows is None:
            return None
        out = rows[np.maximum(ids, 0)]
        out[ids < 0] = np.nan
        return out

    return replace(emb, input=by_target(emb.input), output=by_target(emb.output))
