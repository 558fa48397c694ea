"""A BERT pretraining step with the masked-LM head over every position or the masked ones.

Times the optimizer step of a BERT at ``config/real_small.yaml``'s shape (width 128, 2
layers, 8,000 tokens, batches of 16 x 128 tokens) on random token ids, with the loss as the
model's own forward computes it (the head scores every position) and as pretraining does
(:func:`embtransfer.models.pretrain.objective_loss`: the masked positions only). Usage:
``python benchmarks/bench_mlm_head.py [--masking 0.4] [--vocab 8000] [--hidden 128]
[--steps 20] [--threads 1]``; prints seconds per step after 5 warm-up steps.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))
from embtransfer.models.pretrain import build_model, objective_loss  # noqa: E402

WARMUP = 5


def _batch(vocab: int, masking: float, gen: torch.Generator) -> dict[str, torch.Tensor]:
    ids = torch.randint(5, vocab, (16, 128), generator=gen)
    chosen = torch.rand(ids.shape, generator=gen) < masking
    return {"input_ids": ids.masked_fill(chosen, 4), "attention_mask": torch.ones_like(ids),
            "labels": ids.masked_fill(~chosen, -100)}


def seconds_per_step(head: str, args: argparse.Namespace) -> float:
    arch = {"hidden_size": args.hidden, "num_layers": 2, "num_heads": 4,
            "intermediate_size": 3 * args.hidden}
    model = build_model("bert", args.vocab, arch, None, {}, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    times = []
    for _ in range(WARMUP + args.steps):
        batch = _batch(args.vocab, args.masking, gen)
        start = time.perf_counter()
        loss = model(**batch).loss if head == "every" else objective_loss(model, "bert", batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    return sum(times[WARMUP:]) / args.steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--masking", type=float, default=0.4)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for head, positions in (("every", "every position"), ("masked", "the masked positions")):
        print(f"head over {positions}: {seconds_per_step(head, args):.3f} s/step")


if __name__ == "__main__":
    main()
