"""A pretrained-here model's architecture and training defaults: the one place they are
written (torch-free).

``workflow/schemas/model.schema.yaml`` describes and types the ``architecture`` and
``train`` keys of a ``type: mini`` model but writes no default for them:
:func:`embtransfer.config.validation.load_schema` fills the schema's defaults in from here,
so a config and a direct call to :func:`embtransfer.models.pretrain.build_model` or
:func:`~embtransfer.models.pretrain.pretrain` get the same values.
"""

from __future__ import annotations

from typing import Any

DEFAULT_ARCHITECTURE: dict[str, Any] = {
    "hidden_size": 64,
    "num_layers": 2,
    "num_heads": 4,
    "num_kv_heads": None,  # None: as many as num_heads
    "intermediate_size": 128,
    "max_position_embeddings": 256,
    "dropout": 0.0,
    "embedding_init_std": None,  # None: the family's own initialisation
}

DEFAULT_TRAIN: dict[str, Any] = {
    "steps": 400,
    "batch_size": 16,
    "seq_len": 64,
    "lr": 3e-3,
    "warmup_steps": 30,
    "weight_decay": 0.01,
    "threads": None,  # None: leave torch's setting alone
    "valid_batches": 8,
    "log_every": 50,
    "mlm_probability": None,  # None: the family's standard rate (BERT only)
    "noise_density": None,  # None: the family's standard rate (T5 only)
}

#: The train key that changes one family's objective rate, and the family it applies to.
RATE_KEYS = {"mlm_probability": "bert", "noise_density": "t5"}
