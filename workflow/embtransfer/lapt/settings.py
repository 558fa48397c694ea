"""LAPT's settings and their defaults: the one place they are written (torch-free).

:class:`LaptSettings` holds every trainer setting with its default (the SALT paper's);
:data:`DEFAULT_LORA` the LoRA variant's and :data:`LORA_LR` its learning rate.
``workflow/schemas/lapt.schema.yaml`` describes and types these keys but writes no default
for them: :func:`embtransfer.config.validation.load_schema` fills the schema's defaults in
from here (:func:`schema_defaults`), so a config and a direct call to the trainer get the
same values. :func:`settings_from_config` maps the validated config's ``lapt`` section onto
:class:`LaptSettings`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

#: Peak learning rate of LoRA training (``variant: lora``; Yamaguchi et al.).
LORA_LR = 1e-4

#: LoRA settings (:mod:`embtransfer.lapt.lora`): rank, scale, dropout, where, int8 base.
DEFAULT_LORA: dict[str, Any] = {
    "r": 8,
    "alpha": 32,
    "dropout": 0.05,
    "target_modules": "all-linear",
    "train_embeddings": True,
    "int8": False,
}


def lora_settings(cfg: dict[str, Any] | None) -> dict[str, Any]:
    """``cfg`` over :data:`DEFAULT_LORA`; unknown keys and a rank below 1 are refused."""
    unknown = set(cfg or {}) - set(DEFAULT_LORA)
    if unknown:
        raise ValueError(f"unknown LoRA keys {sorted(unknown)}; known: {sorted(DEFAULT_LORA)}")
    out = {**DEFAULT_LORA, **(cfg or {})}
    if int(out["r"]) < 1:
        raise ValueError(f"LoRA rank r must be at least 1, got {out['r']}")
    return out


@dataclass(frozen=True)
class Replay:
    """English replay: the blocks of ``file`` (text or ``.npy``) make up ``ratio`` of an epoch."""

    file: str
    ratio: float

    def __post_init__(self) -> None:
        if not 0.0 <= float(self.ratio) < 1.0:
            raise ValueError(f"replay ratio must lie in [0, 1), got {self.ratio}")


@dataclass(frozen=True)
class LaptSettings:
    """Every LAPT setting and its default, in one place.

    ``workflow/schemas/lapt.schema.yaml`` takes its defaults from here
    (:func:`schema_defaults`) and adds what only the workflow needs (``variant``, ``gpus``,
    ...), which :func:`settings_from_config` maps here. Build from a dict with
    :meth:`from_dict`.
    """

    max_length: int = 1024
    lr: float = 1e-5
    schedule: str = "cosine"  # the only one: linear warmup, then cosine to 0
    warmup_ratio: float = 0.05
    global_batch_size: int = 512  # sequences per optimizer step
    micro_batch_size: int = 8  # sequences per forward pass; accumulation = global / micro
    epochs: int = 1
    max_steps: int | None = None  # None: `epochs` full epochs
    bf16: bool | str = "auto"  # "auto": bf16 autocast on a CUDA device that supports it
    weight_decay: float = 0.0
    adam_betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    adam_eps: float = 1e-8
    max_grad_norm: float = 1.0
    log_every: int = 10  # optimizer steps
    eval_fractions: list[float] = field(default_factory=lambda: [0.3, 0.6, 0.9])
    eval_batches: int | None = None  # micro batches of the valid file per evaluation
    checkpoint_every: int = 100  # optimizer steps
    checkpoint_minutes: float | None = None  # also checkpoint after this much wall time
    keep_checkpoints: int = 2  # resume checkpoints kept: the newest and the ones before it
    stop_before_end_s: int = 900  # under SLURM: checkpoint and stop this long before the limit
    embedding_only_steps: int = 0
    replay: Replay | None = None  # None: target text only
    threads: int | None = None  # torch CPU threads; None: leave torch's setting alone
    lora: dict[str, Any] | None = None  # None: full training; embtransfer.lapt.lora settings: LoRA
    loss_chunk_rows: int = 1024  # tokens per chunk of the vocabulary loss; 0: whole logits
    activation_checkpointing: bool = False  # recompute layer activations in backward
    compile: bool = False  # torch.compile the model (pays on a GPU; slow to start)
    attn_implementation: str = "sdpa"  # PyTorch scaled_dot_product_attention (flash on GPU)

    def __post_init__(self) -> None:
        if int(self.loss_chunk_rows) < 0:
            raise ValueError(f"loss_chunk_rows must be >= 0 (0 = whole logits), got "
                             f"{self.loss_chunk_rows}")
        if int(self.keep_checkpoints) < 1:
            raise ValueError(f"keep_checkpoints must be at least 1 (the resume checkpoints "
                             f"kept), got {self.keep_checkpoints}")
        if self.schedule != "cosine":
            raise ValueError(f"unknown schedule {self.schedule!r}; only 'cosine'")
        g, m = int(self.global_batch_size), int(self.micro_batch_size)
        if g <= 0 or m <= 0 or g % m:
            raise ValueError(
                f"global_batch_size {g} must be a positive multiple of micro_batch_size {m}"
            )

    @classmethod
    def from_dict(cls, cfg: dict[str, Any] | None) -> LaptSettings:
        """Settings from ``cfg`` (missing keys take the defaults; unknown keys are refused)."""
        cfg = dict(cfg or {})
        unknown = set(cfg) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown LAPT keys {sorted(unknown)}")
        if cfg.get("lora") is not None:
            cfg["lora"] = lora_settings(cfg["lora"])
        if cfg.get("replay") is not None:
            cfg["replay"] = Replay(**cfg["replay"])
        return cls(**cfg)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able settings, in field order (lapt.json's ``config``, the spec file)."""
        return asdict(self)


DEFAULT_LAPT: dict[str, Any] = LaptSettings().as_dict()

def settings_from_config(section: dict[str, Any], threads: int | None,
                         replay_file: str | None) -> LaptSettings:
    """:func:`train_lapt`'s settings from the validated config's ``lapt`` section.

    The workflow-only keys map here: ``variant: lora`` takes ``lora.lr`` (its default
    is the schema's) as the learning rate, ``replay.language`` becomes the replay file.
    """
    cfg = {k: section[k] for k in DEFAULT_LAPT if k in section and k not in ("replay", "lora")}
    if section.get("variant") == "lora":
        lora = dict(section["lora"])
        cfg["lr"] = lora.pop("lr")
        cfg["lora"] = lora
    if section.get("replay"):
        if replay_file is None:
            raise ValueError("lapt.replay is set but no replay text was given")
        cfg["replay"] = {"file": str(replay_file), "ratio": float(section["replay"]["ratio"])}
    cfg["threads"] = threads
    return LaptSettings.from_dict(cfg)


def schema_defaults() -> dict[str, Any]:
    """The defaults the config schema's ``lapt`` section takes from here.

    Every :class:`LaptSettings` field the config can set, and ``lora``'s sub-keys (the
    config's ``lora.lr`` is :data:`LORA_LR`; ``target_modules`` is not a config key).
    """
    lora = {k: v for k, v in DEFAULT_LORA.items() if k != "target_modules"}
    return {**DEFAULT_LAPT, "lora": {**lora, "lr": LORA_LR}}
