"""Benchmark LAPT (embtransfer.lapt.trainer.train_lapt): throughput, peak memory, and MFU on a GPU.

CPU cases (always): the miniature world's source-model shapes (Llama-style untied and
Gemma-style tied, the default config's architecture and vocabulary sizes), full training
and LoRA, 128-token sequences, on synthetic text with a byte-level BPE tokenizer trained
here. Each case runs in its own subprocess so the peak RSS is the case's own.

GPU case (``--gemma-2b``, CUDA only): a model with Gemma-2b's real shapes (18 layers,
width 2048, 8 heads of 256 with one KV head, MLP 16384, vocabulary 256,000; random
weights) trained by the same ``train_lapt`` in bf16 autocast at sequence length 1024.
Model FLOPs utilisation = achieved model FLOPs / peak bf16 FLOPs, with the model FLOPs
per token of training counted as 6 x (parameters, embeddings included since the head is
a real matmul) + 12 x layers x width x sequence (attention scores and values, forward
and backward; Chowdhery et al. 2022, App. B). ``--peak-tflops`` defaults to 989 (H100 /
H200 SXM dense bf16).

Loss memory (``--loss-memory``, CPU, part of the default run): the peak memory of
the forward and backward of the loss over 262,144 classes for one sequence of 1024
tokens of width 2048 (fp32), the chunked loss (:mod:`embtransfer.lapt.loss`) against
the whole-logits ``F.cross_entropy(h @ W.T)``. Each case runs in its own
subprocess; "working memory" is the peak RSS minus the inputs (h, W: 2 GiB) and the
gradients both must return (dW: 2 GiB, dh), i.e. what the loss itself needs.

Prints one line per case; no assertions. Usage::

    python benchmarks/bench_lapt.py [--steps 10] [--threads 2]   # CPU: loss memory, tiny models
    python benchmarks/bench_lapt.py --loss-memory [--chunks 64,256]   # loss memory only
    python benchmarks/bench_lapt.py --tiny [--steps 10]              # tiny models only
    python benchmarks/bench_lapt.py --gemma-2b [--micro 4] [--steps 12] [--peak-tflops 989]
        [--activation-checkpointing] [--compile] [--chunk 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

WORDS = [w + s for w in "ka lo mi tu ren sal vor ix bema tori quel nap dru fen go shi".split()
         for s in ("", "n", "ra", "sti")]


def _corpus(path: Path, n_lines: int, seed: int) -> Path:
    rng = random.Random(seed)
    path.write_text("\n".join(" ".join(rng.choices(WORDS, k=rng.randint(8, 30)))
                              for _ in range(n_lines)) + "\n")
    return path


def _make_model(root: Path, family: str, vocab: int, arch: dict, tied: bool | None) -> Path:
    from embtransfer.models.pretrain import build_model
    from embtransfer.models.tokenizer_training import special_token_ids, train_tokenizer

    tok = train_tokenizer("bytelevel_bpe", [str(root / "train.txt")], min(vocab, 2000), "gpt2")
    model = build_model(family, max(vocab, len(tok)), arch, tied, special_token_ids(tok), 0)
    out = root / f"{family}_{vocab}"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


VOCAB, SEQ, WIDTH = 262_144, 1024, 2048


def _rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _loss_case(chunk: int, threads: int) -> dict:
    """Run in a subprocess: peak RSS of one forward + backward of the vocabulary loss."""
    import resource
    import time

    import torch

    from embtransfer.lapt.loss import chunked_cross_entropy

    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(SEQ, WIDTH, generator=gen).requires_grad_(True)
    weight = (0.02 * torch.randn(VOCAB, WIDTH, generator=gen)).requires_grad_(True)
    labels = torch.randint(0, VOCAB, (SEQ,), generator=gen)
    before = _rss()
    t0 = time.perf_counter()
    if chunk:
        loss = chunked_cross_entropy(hidden, weight, None, labels, chunk_rows=chunk)
    else:
        loss = torch.nn.functional.cross_entropy(hidden @ weight.T, labels)
    loss.backward()
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    grads = (weight.grad.numel() + hidden.grad.numel()) * 4
    return {"chunk": chunk, "loss": float(loss.detach()), "wall_s": wall, "peak_rss": peak,
            "inputs": before, "working": peak - before - grads}


def loss_memory(chunks: list[int], threads: int) -> None:
    print(f"Vocabulary loss, forward + backward, fp32 on CPU: {VOCAB:,} classes x {SEQ} "
          f"tokens x width {WIDTH}, batch 1, {threads} threads")
    full = None
    for chunk in [0, *chunks]:
        proc = subprocess.run([sys.executable, __file__, "--loss-case", str(chunk),
                               "--threads", str(threads)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-3000:])
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        full = full or r
        name = "whole logits" if not chunk else f"chunked, {chunk} rows"
        ratio = "" if not chunk else f"  = 1/{full['working'] / r['working']:.1f} of whole logits"
        same = "" if not chunk else f"  |loss diff| {abs(r['loss'] - full['loss']):.1e}"
        print(f"  {name:20s} working memory {r['working'] / 2**20:7.0f} MiB  (peak RSS "
              f"{r['peak_rss'] / 2**30:.2f} GiB)  {r['wall_s']:5.1f} s{ratio}{same}")


def _case(spec: dict) -> dict:
    """Run in a subprocess: one train_lapt, its summary."""
    import torch

    from embtransfer.lapt.trainer import train_lapt

    summary = train_lapt(spec["model"], spec["train"], spec["valid"], spec["out"], spec["cfg"],
                         seed=0, log=lambda s: None)
    from safetensors.torch import load_file

    n_params = sum(t.numel() for t in load_file(Path(spec["model"]) / "model.safetensors").values())
    return {"tokens_per_s": summary["tokens_per_s"], "peak_memory_bytes":
            summary["peak_memory_bytes"], "peak_memory_kind": summary["peak_memory_kind"],
            "elapsed_s": summary["elapsed_s"], "params": n_params,
            "device": "cuda" if torch.cuda.is_available() else "cpu"}


def _run_case(spec: dict) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--case-json", json.dumps(spec)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cpu_cases(steps: int, threads: int) -> None:
    import yaml

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _corpus(root / "train.txt", 4000, 0)
        _corpus(root / "valid.txt", 200, 1)
        cfg = {"max_length": 128, "global_batch_size": 32, "micro_batch_size": 16,
               "max_steps": steps, "lr": 5e-4, "threads": threads, "log_every": steps,
               "eval_fractions": [], "checkpoint_every": 10**6}
        print(f"CPU, {threads} threads, {steps} steps of 32 x 128 tokens")
        for key in ("llama_mini", "gemma_mini"):
            spec = config["models"][key]
            model = _make_model(root, spec["family"], spec["tokenizer"]["vocab_size"],
                                spec.get("architecture", {}), spec.get("tie_word_embeddings"))
            for variant, extra in (("full", {}), ("lora", {"lora": {"r": 8, "alpha": 32},
                                                            "lr": 1e-4})):
                res = _run_case({"model": str(model), "train": str(root / "train.txt"),
                                 "valid": str(root / "valid.txt"),
                                 "out": str(root / f"out_{key}_{variant}"),
                                 "cfg": {**cfg, **extra}})
                print(f"  {key:11s} {variant:4s} {res['params'] / 1e6:6.2f}M params  "
                      f"{res['tokens_per_s']:>9,.0f} tokens/s  peak RSS "
                      f"{res['peak_memory_bytes'] / 2**20:7.0f} MiB")


def gemma_2b(steps: int, micro: int, peak_tflops: float, chunk: int, checkpointing: bool,
             compile_: bool) -> None:
    import torch

    if not torch.cuda.is_available():
        print("--gemma-2b needs a CUDA device; none here")
        return
    import transformers as tf

    from embtransfer.models.tokenizer_training import train_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _corpus(root / "train.txt", 60000, 0)
        _corpus(root / "valid.txt", 500, 1)
        tok = train_tokenizer("bytelevel_bpe", [str(root / "train.txt")], 2000, "gpt2")
        cfg = tf.GemmaConfig(vocab_size=256000, hidden_size=2048, intermediate_size=16384,
                             num_hidden_layers=18, num_attention_heads=8, num_key_value_heads=1,
                             head_dim=256, max_position_embeddings=8192,
                             tie_word_embeddings=True)
        cfg.bos_token_id, cfg.eos_token_id = tok.bos_token_id, tok.eos_token_id
        model = tf.GemmaForCausalLM(cfg)
        model.save_pretrained(root / "gemma2b")
        tok.save_pretrained(root / "gemma2b")
        n_params = sum(p.numel() for p in model.parameters())
        del model
        glob = micro * 8
        run = {"max_length": 1024, "global_batch_size": glob, "micro_batch_size": micro,
               "max_steps": steps, "lr": 1e-5, "bf16": True, "log_every": 1,
               "eval_fractions": [], "checkpoint_every": 10**6, "loss_chunk_rows": chunk,
               "activation_checkpointing": checkpointing, "compile": compile_,
               "attn_implementation": "sdpa"}
        from embtransfer.lapt.trainer import train_lapt

        summary = train_lapt(root / "gemma2b", root / "train.txt", root / "valid.txt",
                             root / "out", run, seed=0, log=print)
        metrics = (root / "out.work" / "metrics.jsonl").read_text().split("\n")
        lines = [json.loads(x) for x in metrics if x]
        # Steady state: steps after the first two (CUDA warm-up, compilation), timed by
        # the elapsed_s of the log lines (no evaluation or checkpoint in between).
        steps_logged = [r for r in lines if "train_loss" in r]
        a, b = steps_logged[min(2, len(steps_logged) - 2)], steps_logged[-1]
        tps = (b["step"] - a["step"]) * glob * 1024 / max(b["elapsed_s"] - a["elapsed_s"], 1e-9)
        flops_per_token = 6 * n_params + 12 * cfg.num_hidden_layers * cfg.hidden_size * 1024
        mfu = tps * flops_per_token / (peak_tflops * 1e12)
        print(f"gemma-2b shapes on {torch.cuda.get_device_name()}: {n_params / 1e9:.2f}B "
              f"params, seq 1024, micro {micro}, global {glob}, bf16 autocast + fp32 master "
              f"weights, loss chunk {chunk or 'none (whole logits)'}, activation checkpointing "
              f"{checkpointing}, compile {compile_}: {tps:,.0f} tokens/s, MFU {mfu:.1%} of "
              f"{peak_tflops:.0f} TFLOPS (dense bf16 peak), peak memory "
              f"{summary['peak_memory_bytes'] / 2**30:.1f} GiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gemma-2b", action="store_true")
    ap.add_argument("--micro", type=int, default=4)
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--chunk", type=int, default=1024, help="--gemma-2b: loss_chunk_rows")
    ap.add_argument("--activation-checkpointing", action="store_true")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--loss-memory", action="store_true")
    ap.add_argument("--tiny", action="store_true", help="only the tiny-model CPU cases")
    ap.add_argument("--chunks", default="64,256", help="--loss-memory: chunk sizes")
    ap.add_argument("--case-json", help=argparse.SUPPRESS)
    ap.add_argument("--loss-case", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    chunks = [int(c) for c in args.chunks.split(",") if c]
    if args.case_json:
        print(json.dumps(_case(json.loads(args.case_json))))
    elif args.loss_case is not None:
        print(json.dumps(_loss_case(args.loss_case, args.threads)))
    elif args.gemma_2b:
        gemma_2b(args.steps, args.micro, args.peak_tflops, args.chunk,
                 args.activation_checkpointing, args.compile)
    elif args.loss_memory:
        loss_memory(chunks, args.threads)
    elif args.tiny:
        cpu_cases(args.steps, args.threads)
    else:
        loss_memory(chunks, args.threads)
        cpu_cases(args.steps, args.threads)


if __name__ == "__main__":
    main()
