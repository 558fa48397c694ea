"""Build tiny models of real Hugging Face classes and pretrain them on CPU.

The miniature world's source LLM and target PLMs are ordinary ``transformers``
checkpoints (Llama, Gemma, GPT-2, XGLM, BERT, T5), only small, so every later
stage handles them exactly as it handles hub models.

Objectives by family: causal LM for decoder-only models, masked LM (15%,
80/10/10) for BERT, span corruption with sentinel ids for T5 (15% noise); the train config's
``mlm_probability`` and ``noise_density`` change the two rates. Text is packed
into fixed-length blocks (for causal LMs, of whole lines: :func:`_pack_lines`); the
data order and every random mask come from generators seeded with ``seed``, so a rerun
trains the same model.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from embtransfer.core.atomic import atomic_path, write_json
from embtransfer.core.logs import without_run_values
from embtransfer.core.schedule import cosine_scheduler
from embtransfer.models.architectures import model_class, model_config
from embtransfer.models.hf import position_limit, save_safetensors
from embtransfer.models.mini_settings import DEFAULT_ARCHITECTURE, DEFAULT_TRAIN, RATE_KEYS

DECODER_ONLY = ("llama", "gemma", "gpt2", "xglm")

# T5-style span corruption (Raffel et al.): 15% noise in spans of mean length 3.
NOISE_DENSITY = 0.15
MEAN_SPAN = 3.0
MLM_PROBABILITY = 0.15


def _rates(family: str, cfg: dict[str, Any]) -> dict[str, float]:
    """The objective's masking rate (BERT) and noise density (T5): the train config's, or
    the family's standard 15 % where it is null. A rate set for another family is refused."""
    for key, owner in RATE_KEYS.items():
        value = cfg.get(key)
        if value is None:
            continue
        if family != owner:
            raise ValueError(f"train.{key} is for the {owner} family, not {family!r}")
        if not 0.0 < float(value) < 1.0:
            raise ValueError(f"train.{key} must lie strictly between 0 and 1, got {value!r}")
    standard = {"mlm_probability": MLM_PROBABILITY, "noise_density": NOISE_DENSITY}
    return {
        key: rate if cfg.get(key) is None else float(cfg[key]) for key, rate in standard.items()
    }


def _arch(architecture: dict | None) -> dict[str, Any]:
    unknown = set(architecture or {}) - set(DEFAULT_ARCHITECTURE)
    if unknown:
        raise ValueError(f"unknown architecture keys {sorted(unknown)}")
    arch = {**DEFAULT_ARCHITECTURE, **(architecture or {})}
    if arch["hidden_size"] % arch["num_heads"]:
        raise ValueError("hidden_size must be divisible by num_heads")
    if arch["num_kv_heads"] is None:
        arch["num_kv_heads"] = arch["num_heads"]
    return arch


def _special(special_ids: dict[str, int | None], role: str) -> int | None:
    """Accept both ``{"eos": 2}`` and ``{"eos_token_id": 2}``."""
    value = special_ids.get(f"{role}_token_id", special_ids.get(role))
    return None if value is None else int(value)


# The families' real settings, used when the config leaves tie_word_embeddings null:
# Llama and T5 v1.1 have a separate LM head, the others share the input matrix.
DEFAULT_TIED = {
    "llama": False,
    "t5": False,
    "gemma": True,
    "gpt2": True,
    "xglm": True,
    "bert": True,
}


def build_model(
    family: str,
    vocab_size: int,
    architecture: dict | None,
    tie_word_embeddings: bool | None,
    special_ids: dict[str, int | None],
    seed: int,
) -> PreTrainedModel:
    """A freshly initialised tiny model of the family's real class.

    ``tie_word_embeddings=None`` takes the family's real setting (:data:`DEFAULT_TIED`).
    """
    if tie_word_embeddings is None:
        tie_word_embeddings = DEFAULT_TIED[family]
    arch = _arch(architecture)
    bos, eos, pad = (_special(special_ids, r) for r in ("bos", "eos", "pad"))
    common = dict(
        vocab_size=vocab_size,
        tie_word_embeddings=tie_word_embeddings,
        bos_token_id=bos,
        eos_token_id=eos,
        pad_token_id=pad,
    )
    if family not in MODEL_FAMILIES:
        raise ValueError(f"unknown model family {family!r}; expected one of {MODEL_FAMILIES}")
    torch.manual_seed(seed)
    model = _build(family, arch, common)
    if arch["embedding_init_std"] is not None:
        # T5 draws its rows from N(0, 1): too far for a short pretraining to move them.
        model.get_input_embeddings().weight.data.normal_(0.0, arch["embedding_init_std"])
    _check_tie(model, tie_word_embeddings)
    return model


def _build(family: str, arch: dict[str, Any], common: dict[str, Any]) -> PreTrainedModel:
    model = model_class(family)(model_config(family, arch, common))
    if family == "t5" and not common["tie_word_embeddings"]:
        # transformers 5 forces T5Config.tie_word_embeddings=True and keeps only
        # scale_decoder_outputs=False for v1.1; it leaves a checkpoint's lm_head
        # untied when it differs from `shared`, so untie by giving it its own rows.
        head = torch.empty_like(model.shared.weight).normal_(0.0, arch["hidden_size"] ** -0.5)
        model.lm_head.weight = torch.nn.Parameter(head)
    return model


#: The families pretrained here (Gemma 3 is built only with random weights).
MODEL_FAMILIES = ("llama", "gemma", "gpt2", "xglm", "bert", "t5")


def _check_tie(model: PreTrainedModel, tied: bool) -> None:
    inp = model.get_input_embeddings().weight
    out = model.get_output_embeddings().weight
    if (inp.data_ptr() == out.data_ptr()) != tied:
        raise RuntimeError(
            f"{type(model).__name__}: asked for tie_word_embeddings={tied}, got the opposite"
        )


def model_family(model: PreTrainedModel) -> str:
    model_type = model.config.model_type
    if model_type in ("gemma2", "gemma3_text"):
        return "gemma"
    if model_type not in MODEL_FAMILIES:
        raise ValueError(f"no pretraining objective for model type {model_type!r}")
    return model_type


# ---------------------------------------------------------------- data


def _read_ids(tokenizer: PreTrainedTokenizerBase, path: str | Path) -> list[list[int]]:
    lines = [ln for ln in Path(path).read_text(encoding="utf-8").splitlines() if ln.strip()]
    if not lines:
        raise ValueError(f"{path}: no text to train on")
    return tokenizer(lines, add_special_tokens=False)["input_ids"]


def _pack(docs: list[list[int]], sep: int | None, block: int) -> torch.Tensor:
    """Concatenate documents (each followed by ``sep``) and cut into full blocks."""
    stream: list[int] = []
    for ids in docs:
        stream.extend(ids)
        if sep is not None:
            stream.append(sep)
    n = len(stream) // block
    if n == 0:
        # A tiny corpus still gives one block: repeat it rather than fail.
        stream = (stream * (block // max(len(stream), 1) + 1))[:block]
        n = 1
    return torch.tensor(stream[: n * block], dtype=torch.long).view(n, block)


# Marks the unused tail of a block packed by whole lines: no input reads it (causal
# attention looks back only) and no loss counts it.
FILL = -100


def _pack_lines(docs: list[list[int]], sep: int, block: int) -> torch.Tensor:
    """Whole documents (each followed by ``sep``) into blocks, a document never cut in two
    (one longer than a block is cut into blocks of its own); the tail of a block is
    :data:`FILL`. A passage cut in two cannot teach a causal LM to read its context."""
    blocks: list[list[int]] = []
    current: list[int] = []
    for ids in docs:
        ids = [*ids, sep]
        if current and len(current) + len(ids) > block:
            blocks.append(current + [FILL] * (block - len(current)))
            current = []
        while len(ids) > block:
            blocks.append(ids[:block])
            ids = ids[block:]
        current.extend(ids)
    if current:
        blocks.append(current + [FILL] * (block - len(current)))
    return torch.tensor(blocks, dtype=torch.long)


class _Objective:
    """Turns a batch of packed blocks into model inputs and labels."""

    def __init__(
        self,
        family: str,
        tokenizer: PreTrainedTokenizerBase,
        seq_len: int,
        mlm_probability: float = MLM_PROBABILITY,
        noise_density: float = NOISE_DENSITY,
    ):
        self.family = family
        self.tok = tokenizer
        self.seq_len = seq_len
        self.vocab = len(tokenizer)
        self.mlm_probability = mlm_probability
        self.noise_density = noise_density
        if family in DECODER_ONLY and tokenizer.eos_token_id is None:
            raise ValueError("causal LM pretraining needs an eos token (it ends every line)")
        if family == "bert":
            for role in ("cls", "sep", "mask", "pad"):
                if getattr(tokenizer, f"{role}_token_id") is None:
                    raise ValueError(f"masked LM needs a {role} token")
            self.special = torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=torch.long)
        if family == "t5":
            self.sentinels = [
                tokenizer.convert_tokens_to_ids(t)
                for t in tokenizer.all_special_tokens
                if t.startswith("<extra_id_")
            ]
            self.sentinels.sort(key=lambda i: int(tokenizer.convert_ids_to_tokens(i)[10:-1]))
            if not self.sentinels:
                raise ValueError("span corruption needs <extra_id_N> sentinel tokens")
            if tokenizer.eos_token_id is None or tokenizer.pad_token_id is None:
                raise ValueError("span corruption needs eos and pad tokens")

    @property
    def block(self) -> int:
        # Room for [CLS]/[SEP] (BERT) or </s> (T5 inputs) inside seq_len.
        return {"bert": self.seq_len - 2, "t5": self.seq_len - 1}.get(self.family, self.seq_len)

    def blocks(self, path: str | Path) -> torch.Tensor:
        docs = _read_ids(self.tok, path)
        if self.family in DECODER_ONLY:
            return _pack_lines(docs, self.tok.eos_token_id, self.block)
        # The masked and span objectives read both ways within a few tokens: a stream.
        sep = self.tok.eos_token_id if self.family != "bert" else self.tok.sep_token_id
        return _pack(docs, sep, self.block)

    def batch(self, x: torch.Tensor, gen: torch.Generator) -> dict[str, torch.Tensor]:
        if self.family in DECODER_ONLY:
            fill = x == FILL
            return {
                "input_ids": x.masked_fill(fill, self.tok.eos_token_id),
                "labels": x.masked_fill(fill, -100),
            }
        if self.family == "bert":
            return self._mlm(x, gen)
        return self._spans(x, gen)

    def _mlm(self, x: torch.Tensor, gen: torch.Generator) -> dict[str, torch.Tensor]:
        n = x.shape[0]
        cls = torch.full((n, 1), self.tok.cls_token_id)
        sep = torch.full((n, 1), self.tok.sep_token_id)
        ids = torch.cat([cls, x, sep], dim=1)
        labels = ids.clone()
        maskable = ~torch.isin(ids, self.special)
        chosen = (torch.rand(ids.shape, generator=gen) < self.mlm_probability) & maskable
        labels[~chosen] = -100
        roll = torch.rand(ids.shape, generator=gen)
        to_mask = chosen & (roll < 0.8)
        to_random = chosen & (roll >= 0.8) & (roll < 0.9)  # the last 10% stay as they are
        ids = ids.clone()
        ids[to_mask] = self.tok.mask_token_id
        random_ids = torch.randint(self.vocab, ids.shape, generator=gen)
        ids[to_random] = random_ids[to_random]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}

    def _noise_mask(self, length: int, gen: torch.Generator) -> list[bool]:
        """Random spans covering ``noise_density`` of ``length`` (15% by default), as in T5's
        random_spans_noise_mask."""
        n_noise = max(1, min(length - 1, round(length * self.noise_density)))
        n_spans = max(1, min(len(self.sentinels), round(n_noise / MEAN_SPAN)))
        n_clean = length - n_noise

        def segments(total: int, parts: int) -> list[int]:
            # Split ``total`` items into ``parts`` non-empty segments at random.
            cuts = sorted(torch.randperm(total - 1, generator=gen)[: parts - 1].tolist())
            bounds = [0] + [c + 1 for c in cuts] + [total]
            return [b - a for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

        n_spans = min(n_spans, n_noise, n_clean)
        mask: list[bool] = []
        for clean, noise in zip(
            segments(n_clean, n_spans), segments(n_noise, n_spans), strict=True
        ):
            mask.extend([False] * clean + [True] * noise)
        return mask

    def _spans(self, x: torch.Tensor, gen: torch.Generator) -> dict[str, torch.Tensor]:
        eos, pad = self.tok.eos_token_id, self.tok.pad_token_id
        inputs: list[list[int]] = []
        targets: list[list[int]] = []
        for row in x.tolist():
            mask = self._noise_mask(len(row), gen)
            inp: list[int] = []
            tgt: list[int] = []
            span = -1
            for i, (tok_id, noisy) in enumerate(zip(row, mask, strict=True)):
                if noisy:
                    if i == 0 or not mask[i - 1]:
                        span += 1
                        inp.append(self.sentinels[span])
                        tgt.append(self.sentinels[span])
                    tgt.append(tok_id)
                else:
                    inp.append(tok_id)
            inputs.append(inp + [eos])
            targets.append(tgt + [eos])

        def pad_to(rows: list[list[int]], value: int) -> torch.Tensor:
            width = max(len(r) for r in rows)
            return torch.tensor([r + [value] * (width - len(r)) for r in rows], dtype=torch.long)

        ids = pad_to(inputs, pad)
        labels = pad_to(targets, -100)
        return {"input_ids": ids, "attention_mask": (ids != pad).long(), "labels": labels}


# ---------------------------------------------------------------- training


@torch.no_grad()
def _evaluate(
    model: PreTrainedModel,
    objective: _Objective,
    blocks: torch.Tensor,
    batch_size: int,
    n_batches: int,
    seed: int,
) -> float:
    # The same masks every time: valid loss is comparable before and after.
    gen = torch.Generator().manual_seed(seed + 1)
    model.eval()
    total, count = 0.0, 0
    for start in range(0, min(len(blocks), batch_size * n_batches), batch_size):
        batch = objective.batch(blocks[start : start + batch_size], gen)
        n_labels = int((batch["labels"] != -100).sum())
        if family_shifts(objective.family):
            n_labels -= batch["labels"].shape[0]  # causal LM predicts all but the first
        loss = objective_loss(model, objective.family, batch)
        total += float(loss) * n_labels
        count += n_labels
    model.train()
    return total / max(count, 1)


def objective_loss(model: PreTrainedModel, family: str, batch: dict[str, torch.Tensor]
                   ) -> torch.Tensor:
    """The objective's mean cross-entropy over the batch's labelled positions. BERT's
    masked-LM head scores only the masked positions: the loss and its gradient are those of
    ``model(**batch).loss`` (which scores every position and ignores all but these), and the
    head (width x vocabulary per position, most of a small model's arithmetic) costs the
    masking rate's share of it."""
    if family != "bert":
        return model(**batch).loss
    chosen = batch["labels"] != -100
    hidden = model.bert(batch["input_ids"], attention_mask=batch["attention_mask"])[0]
    return torch.nn.functional.cross_entropy(model.cls(hidden[chosen]), batch["labels"][chosen])


def family_shifts(family: str) -> bool:
    return family in DECODER_ONLY


def pretrain(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    train_file: str | Path,
    valid_file: str | Path,
    train_cfg: dict | None,
    seed: int,
    log: Callable[[str], None] = print,
    threads: int | None = None,
) -> dict[str, Any]:
    """Pretrain ``model`` in place; returns losses, steps, seconds and tokens/s."""
    unknown = set(train_cfg or {}) - set(DEFAULT_TRAIN)
    if unknown:
        raise ValueError(f"unknown train keys {sorted(unknown)}")
    cfg = {**DEFAULT_TRAIN, **(train_cfg or {})}
    threads = threads if threads is not None else cfg["threads"]
    if threads:
        torch.set_num_threads(int(threads))
    family = model_family(model)
    _check_fits(model, tokenizer, cfg["seq_len"])
    rates = _rates(family, cfg)

    torch.manual_seed(seed)
    objective = _Objective(family, tokenizer, cfg["seq_len"], **rates)
    train_blocks = objective.blocks(train_file)
    valid_blocks = objective.blocks(valid_file)
    steps, bs = int(cfg["steps"]), int(cfg["batch_size"])
    initial_valid = _evaluate(model, objective, valid_blocks, bs, cfg["valid_batches"], seed)
    log(
        f"[pretrain] {family}: {sum(p.numel() for p in model.parameters()):,} parameters, "
        f"{len(train_blocks)} train blocks of {objective.block}, {steps} steps x {bs}, "
        f"initial valid loss {initial_valid:.4f}"
    )
    losses, tokens, seconds = _train(model, objective, train_blocks, cfg, seed, log)
    final_valid = _evaluate(model, objective, valid_blocks, bs, cfg["valid_batches"], seed)
    model.eval()
    tail = losses[-max(1, min(20, len(losses) // 10)) :]
    metrics = {
        "family": family,
        "objective": {"bert": "masked_lm", "t5": "span_corruption"}.get(family, "causal_lm"),
        # the rate the objective used (the family's standard where the config left it null)
        **{key: rate for key, rate in rates.items() if RATE_KEYS[key] == family},
        "parameters": sum(p.numel() for p in model.parameters()),
        "steps": steps,
        "batch_size": bs,
        "seq_len": int(cfg["seq_len"]),
        "train_blocks": len(train_blocks),
        "initial_train_loss": losses[0] if losses else float(initial_valid),
        "final_train_loss": sum(tail) / len(tail) if tail else float(initial_valid),
        "initial_valid_loss": initial_valid,
        "valid_loss": final_valid,
        "seconds": round(seconds, 3),
        "tokens_per_second": round(tokens / seconds, 1) if seconds > 0 else 0.0,
        "threads": torch.get_num_threads(),
        "seed": seed,
        "train_config": cfg,
    }
    log(
        f"[pretrain] done in {seconds:.1f}s: train loss {metrics['initial_train_loss']:.4f} -> "
        f"{metrics['final_train_loss']:.4f}, valid {initial_valid:.4f} -> {final_valid:.4f}"
    )
    return metrics


def _check_fits(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, seq_len: int) -> None:
    """Refuse a tokenizer with more ids than the model has rows, or blocks longer than the
    model's positions."""
    rows = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > rows:
        raise ValueError(f"tokenizer has {len(tokenizer)} ids, model only {rows} embedding rows")
    max_pos = position_limit(model.config)
    if max_pos is not None and seq_len > max_pos:
        raise ValueError(f"seq_len {seq_len} exceeds max_position_embeddings {max_pos}")


def _optimizer(model: PreTrainedModel, cfg: dict[str, Any]) -> torch.optim.AdamW:
    """AdamW with weight decay on the weight matrices, none on embeddings, norms, biases."""
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2 or "embed" in n]
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": cfg["weight_decay"]},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=cfg["lr"],
        betas=(0.9, 0.98),
        eps=1e-8,
    )


def _train(
    model: PreTrainedModel,
    objective: _Objective,
    blocks: torch.Tensor,
    cfg: dict[str, Any],
    seed: int,
    log: Callable[[str], None],
) -> tuple[list[float], int, float]:
    """``cfg["steps"]`` optimizer steps over ``blocks`` in a seeded order; returns the
    losses, the tokens seen and the seconds taken."""
    steps, bs = int(cfg["steps"]), int(cfg["batch_size"])
    optimizer = _optimizer(model, cfg)
    scheduler = cosine_scheduler(optimizer, int(cfg["warmup_steps"]), steps)
    data_gen = torch.Generator().manual_seed(seed)
    mask_gen = torch.Generator().manual_seed(seed + 7)
    model.train()
    order = torch.randperm(len(blocks), generator=data_gen)
    cursor = 0
    losses: list[float] = []
    tokens = 0
    start = time.perf_counter()
    for step in range(steps):
        if cursor + bs > len(order):
            # A new epoch; a corpus smaller than one batch is sampled with repeats.
            order = torch.randperm(len(blocks), generator=data_gen)
            if len(order) < bs:
                order = order.repeat(bs // len(order) + 1)
            cursor = 0
        idx = order[cursor : cursor + bs]
        cursor += bs
        batch = objective.batch(blocks[idx], mask_gen)
        loss = objective_loss(model, objective.family, batch)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite loss at step {step + 1}")
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        tokens += int(batch["input_ids"].numel())
        if (step + 1) % max(1, int(cfg["log_every"])) == 0 or step + 1 == steps:
            elapsed = time.perf_counter() - start
            recent = losses[-int(cfg["log_every"]) :]
            log(
                f"[pretrain] step {step + 1}/{steps} loss {sum(recent) / len(recent):.4f} "
                f"lr {scheduler.get_last_lr()[0]:.2e} {tokens / elapsed:,.0f} tok/s"
            )
    return losses, tokens, time.perf_counter() - start


def save_checkpoint(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    out_dir: str | Path,
    metrics: dict[str, Any],
) -> Path:
    """Write model (safetensors), tokenizer and ``pretrain.json`` as one directory, atomically."""
    with atomic_path(out_dir, directory=True) as tmp:
        save_safetensors(model, tmp)
        tokenizer.save_pretrained(tmp)
        # Timings and throughput go to the job's log, not into the checkpoint.
        record = {
            **without_run_values(metrics),
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        }
        write_json(tmp / "pretrain.json", record)
    return Path(out_dir)
