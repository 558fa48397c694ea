"""Seconds per distilled token of Token Distillation on one CPU thread, at a model shape.

A model of the given shape (GPT-2 or Llama layout, random weights, float32) distils
``--tokens`` new tokens of 3 pieces each from ``--snippets`` random windows of ``--length``
source tokens per token (plus BOS), batch ``--batch``; ``--steps`` optimizer steps are
timed (after one untimed warm-up step) and scaled to a token's share of one pass, which
is ``snippets / batch`` steps (each step: the teacher's forward, the student's forward and
backward). The vocabulary size changes only the memory: no logits are computed. The
snippet search is not timed. Usage: ``python benchmarks/bench_token_distillation.py
[--arch gpt2|llama] [--layers 1] [--width 768] [--heads 12] [--vocab 50257] [--snippets
100] [--length 50] [--steps 20] [--batch 1] [--tokens 4] [--threads 1]``.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch


def build_model(
    arch: str, layers: int, width: int, heads: int, vocab: int, length: int
) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if arch == "gpt2":
        return GPT2LMHeadModel(GPT2Config(
            n_layer=layers, n_embd=width, n_head=heads, vocab_size=vocab,
            n_positions=max(1024, length + 1), bos_token_id=0, eos_token_id=0))
    return LlamaForCausalLM(LlamaConfig(
        hidden_size=width, intermediate_size=int(width * 8 / 3) // 64 * 64 or 64,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
        vocab_size=vocab, max_position_embeddings=max(2048, length + 1),
        tie_word_embeddings=False, bos_token_id=0, eos_token_id=0, pad_token_id=0))


def main() -> None:
    from embtransfer.transfer.token_distillation import DistillOptions, Snippet, Snippets, distill

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", choices=["gpt2", "llama"], default="gpt2")
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--snippets", type=int, default=100, help="per token")
    parser.add_argument("--length", type=int, default=50, help="source tokens per window")
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps timed")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    model = build_model(args.arch, args.layers, args.width, args.heads, args.vocab, args.length)
    rng = np.random.default_rng(0)
    pieces = [rng.integers(1, args.vocab, 3).tolist() for _ in range(args.tokens)]
    windows = []
    for p in pieces:
        start = (args.length - len(p)) // 2
        token_windows = []
        for k in range(args.snippets):
            ids = rng.integers(1, args.vocab, args.length)
            ids[start: start + len(p)] = p
            token_windows.append(Snippet(ids=tuple(ids.tolist()), start=start, line=k, char=0))
        windows.append(token_windows)
    snippets = Snippets(pieces=pieces, windows=windows, counts=[args.snippets] * args.tokens,
                        bos_id=0)

    def options(steps: int) -> DistillOptions:
        return DistillOptions(snippets_per_token=args.snippets, snippet_length=args.length,
                              batch_size=args.batch, steps=steps, min_snippets=1)

    distill(model, pieces, snippets, options(1))  # warm-up
    started = time.perf_counter()
    _, report = distill(model, pieces, snippets, options(args.steps))
    seconds = time.perf_counter() - started
    per_step = seconds / args.steps
    per_token = per_step * args.snippets / args.batch
    print(json.dumps({
        "arch": args.arch, "layers": args.layers, "width": args.width, "heads": args.heads,
        "vocab": args.vocab, "snippets": args.snippets, "length": args.length,
        "batch": args.batch, "threads": args.threads, "steps": report["steps"],
        "seconds_per_step": round(per_step, 5),
        "seconds_per_distilled_token": round(per_token, 3),
    }))


if __name__ == "__main__":
    main()
