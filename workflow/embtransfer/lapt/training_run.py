"""The parts of one LAPT run, set up before its first step, grouped by what they hold.

:func:`set_up_run` loads the model (fp32 master weights, LoRA adapters for that variant),
the blocks of every text, fixes the plan, builds the optimizer and schedule and the resume
checkpoint of the run's identity, into one :class:`TrainingRun`: its :class:`RunSetup`
(settings, plan, processes, precision, log), its :class:`ModelTrainer` (model, tokenizer,
trained parameters, optimizer), its :class:`~embtransfer.lapt.data.CorpusBlocks`, its
:class:`~embtransfer.lapt.resume.ResumeCheckpoint` and
:class:`~embtransfer.lapt.metrics.MetricsLog`, and, once resumed, its :class:`LossCalls`
(:func:`wrap_loss`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel
from transformers import AutoConfig, AutoTokenizer

from embtransfer.core.schedule import cosine_scheduler
from embtransfer.lapt import lora as lora_mod
from embtransfer.lapt.data import CorpusBlocks, corpus_blocks
from embtransfer.lapt.distributed import Ranks
from embtransfer.lapt.loss import MicroBatchLoss
from embtransfer.lapt.metrics import MetricsLog
from embtransfer.lapt.plan import RunPlan, make_plan
from embtransfer.lapt.resume import ResumeCheckpoint, run_identity
from embtransfer.lapt.settings import LaptSettings


@dataclass(frozen=True)
class RunSetup:
    """This call's settings, plan, processes, precision and log: fixed once set up."""

    settings: LaptSettings
    plan: RunPlan
    ranks: Ranks
    bf16: bool  # autocast to bfloat16 over the fp32 master weights
    log: Callable[[str], None]  # rank 0's; the other ranks' is silent

    @property
    def device(self) -> torch.device:
        return self.ranks.device


@dataclass(frozen=True)
class ModelTrainer:
    """The model this run trains, its tokenizer and saved dtype, and what updates it."""

    model: Any  # fp32 master weights (with LoRA adapters for the LoRA variant)
    tokenizer: Any
    saved_dtype: torch.dtype  # the dtype the output checkpoint is written in
    params: list[torch.nn.Parameter]  # trained, in a fixed order (the optimizer state's)
    embedding_ids: set[int]  # id() of the embedding parameters among them
    optimizer: torch.optim.Optimizer
    scheduler: Any


@dataclass(frozen=True)
class LossCalls:
    """The loss module, and what a training micro batch calls: it DDP-wrapped, compiled."""

    plain: MicroBatchLoss  # evaluation calls it
    training: Any
    ddp: DistributedDataParallel | None  # several processes only


@dataclass
class TrainingRun:
    """What the loop's parts share, one object per concern."""

    setup: RunSetup
    trainer: ModelTrainer
    blocks: CorpusBlocks
    checkpoint: ResumeCheckpoint
    metrics: MetricsLog
    loss: LossCalls | None = None  # wrapped after the resume (DDP copies the weights)


def _load_model(
    model_dir: str | Path, settings: LaptSettings, seed: int, device: torch.device
) -> tuple[Any, list[torch.nn.Parameter], list[torch.nn.Parameter], torch.dtype]:
    """The model to train (fp32 master weights), its trained and embedding parameters."""
    lora = settings.lora
    model = lora_mod.load_base(
        model_dir, lora, device, attn_implementation=settings.attn_implementation
    )
    saved_dtype = getattr(AutoConfig.from_pretrained(model_dir), "dtype", None) or torch.float32
    if isinstance(saved_dtype, str):
        saved_dtype = getattr(torch, saved_dtype)
    model.config.use_cache = False
    if settings.activation_checkpointing:
        kwargs = {"use_reentrant": False}  # keeps the RNG of dropout: same trajectory
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    embeddings = lora_mod.embedding_params(model)
    if lora is not None:
        torch.manual_seed(seed)  # the adapters' initialisation comes from the seed
        model = lora_mod.add_adapters(model, lora)
    # The parameters this run trains (all, or adapters + embeddings for LoRA), in a
    # fixed order for the optimizer state of a resumed run.
    params = [param for param in model.parameters() if param.requires_grad]
    model.train()
    return model, params, embeddings, saved_dtype


def set_up_run(
    model_dir: str | Path,
    train_file: str | Path,
    valid_file: str | Path,
    settings: LaptSettings,
    seed: int,
    work: Path,
    log: Callable[[str], None],
) -> TrainingRun:
    """Model, blocks, plan, optimizer and the resume checkpoint; nothing trained or resumed."""
    ranks = Ranks()
    device = ranks.device
    if not ranks.main:
        log = lambda _msg: None  # noqa: E731 - one log, from rank 0
    bf16 = (
        (device.type == "cuda" and torch.cuda.is_bf16_supported())
        if settings.bf16 == "auto"
        else bool(settings.bf16)
    )
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model, params, embeddings, saved_dtype = _load_model(model_dir, settings, seed, device)
    sources = {"train": train_file, "valid": valid_file}
    if settings.replay:
        sources["replay"] = settings.replay.file
    blocks = corpus_blocks(model, tokenizer, sources, settings, work, ranks)
    plan = make_plan(settings, blocks.training, ranks.world)
    optimizer = torch.optim.AdamW(
        params,
        lr=float(settings.lr),
        betas=tuple(settings.adam_betas),
        eps=float(settings.adam_eps),
        weight_decay=float(settings.weight_decay),
    )
    scheduler = cosine_scheduler(optimizer, plan.warmup_steps, plan.total_steps)
    trainer = ModelTrainer(
        model=model,
        tokenizer=tokenizer,
        saved_dtype=saved_dtype,
        params=params,
        embedding_ids={id(param) for param in embeddings},
        optimizer=optimizer,
        scheduler=scheduler,
    )
    identity = run_identity(model_dir, blocks.metas, settings, seed, plan.total_steps)
    checkpoint = ResumeCheckpoint(
        work, identity, model, optimizer, scheduler, settings, plan.steps_per_epoch, ranks, log
    )
    setup = RunSetup(settings=settings, plan=plan, ranks=ranks, bf16=bf16, log=log)
    return TrainingRun(
        setup=setup,
        trainer=trainer,
        blocks=blocks,
        checkpoint=checkpoint,
        metrics=MetricsLog(work / "metrics.jsonl", ranks.main, log),
    )


def wrap_loss(run: TrainingRun) -> None:
    """The loss module, and what training calls: it under DDP (several processes), compiled."""
    setup = run.setup
    plain = MicroBatchLoss(run.trainer.model, int(setup.settings.loss_chunk_rows))
    ddp = None
    if setup.ranks.world > 1:
        device = setup.device
        ddp = DistributedDataParallel(
            plain, device_ids=[device.index] if device.type == "cuda" else None
        )
    training = ddp if ddp is not None else plain
    if setup.settings.compile:
        training = torch.compile(training)
    run.loss = LossCalls(plain=plain, training=training, ddp=ddp)


def log_start(run: TrainingRun) -> None:
    """One line of what is trained, on what, how."""
    settings, plan, world = run.setup.settings, run.setup.plan, run.setup.ranks.world
    training = run.blocks.training
    n_params = sum(param.numel() for param in run.trainer.params)
    loss = (
        f"in chunks of {settings.loss_chunk_rows} tokens"
        if settings.loss_chunk_rows
        else "on whole logits"
    )
    run.setup.log(
        f"[lapt] {n_params:,} trained parameters{' (LoRA)' if settings.lora else ''}"
        f"{f' on {world} processes' if world > 1 else ''}; "
        f"{training.n_target} target + {training.n_replay} replay blocks of "
        f"{settings.max_length}; {plan.total_steps} steps x {settings.global_batch_size} "
        f"sequences ({plan.micro_batches} x {settings.micro_batch_size}), warmup "
        f"{plan.warmup_steps}, {'bf16' if run.setup.bf16 else 'fp32'} on "
        f"{run.setup.device.type}, loss {loss}"
    )
