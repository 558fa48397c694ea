"""Which kinds of in-context copying the miniature source LLM's architecture learns, and how fast.

The README and docs/design.md §8 say why the miniature world's passages state one relation
per person: a 2-layer, 64-wide Llama (the default source's shape) learns to copy exact
repeats quickly, but not to tell apart values of one relation by the name they belong to.
This script trains that architecture from scratch on synthetic token sequences and prints,
every --eval-every steps, how often it picks the right value:

* ``repeat``: random sequences repeated (``a b c ... a b c ...``); scored on the second half.
* ``binding``: passages ``name verb prep value .`` for 2-3 people sharing one relation, then
  the statements again in another order; scored on questions
  ``... name verb prep`` -> that person's value, among the passage's values.
* ``relation``: the same with one relation per person (the world's passages); scored
  among the values of the asked relation's type (one stated, three not).

    python analysis/probe_copying.py --task binding --steps 3000

Figures from it are in benchmarks/README.md ("Copying probe").
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))
from embtransfer.models.pretrain import build_model  # noqa: E402

NAMES = list(range(10, 50))
RELATIONS = [(50 + i, 56 + i) for i in range(6)]  # (verb, preposition) tokens per relation
VALUES = [list(range(100 + 30 * i, 130 + 30 * i)) for i in range(6)]  # 30 values a relation
DOT, EOS, VOCAB, SEQ = 2, 1, 300, 64


def _passage(rng: random.Random, task: str) -> tuple[list[int], list[int], int, list[int]]:
    """Statements, their re-mention, the question's tokens, its answer and the candidates."""
    k = rng.choice([2, 3])
    rels = rng.sample(range(6), k) if task == "relation" else [rng.randrange(6)] * k
    names = rng.sample(NAMES, k)
    values = ([rng.choice(VALUES[r]) for r in rels] if task == "relation"
              else rng.sample(VALUES[rels[0]], k))
    statements = [[n, *RELATIONS[r], v, DOT] for n, r, v in zip(names, rels, values, strict=True)]
    again = [statements[i] for i in rng.sample(range(k), k)]
    j = rng.randrange(k)
    question = [t for s in statements for t in s] + [names[j], *RELATIONS[rels[j]]]
    if task == "relation":
        others = [v for v in VALUES[rels[j]] if v != values[j]]
        candidates = [values[j], *rng.sample(others, 3)]
    else:
        candidates = values
    return [t for s in statements + again for t in s], question, values[j], candidates


def _row(rng: random.Random, task: str) -> list[int]:
    out: list[int] = []
    while len(out) < SEQ:
        if task == "repeat":
            seg = [rng.randrange(200, VOCAB) for _ in range(16)]
            out += seg + seg + [EOS]
        else:
            out += _passage(rng, task)[0] + [EOS]
    return out[:SEQ]


@torch.no_grad()
def _accuracy(model: torch.nn.Module, rng: random.Random, task: str, n: int = 200) -> float:
    if task == "repeat":
        x = torch.tensor([_row(rng, task) for _ in range(n // 10)])
        pred = model(input_ids=x).logits[:, 16:32].argmax(-1)  # positions 16..31 predict 17..32
        return float((pred == x[:, 17:33]).float().mean())
    right = 0
    for _ in range(n):
        _, question, answer, candidates = _passage(rng, task)
        logits = model(input_ids=torch.tensor([question])).logits[0, -1]
        right += int(max(candidates, key=lambda v: float(logits[v])) == answer)
    return right / n


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", choices=("repeat", "binding", "relation"), default="binding")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    model = build_model("llama", VOCAB, {"num_layers": args.layers, "hidden_size": args.hidden,
                                         "num_heads": args.heads,
                                         "intermediate_size": 2 * args.hidden},
                        False, {"bos": 0, "eos": EOS, "pad": EOS}, args.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    rng, eval_rng = random.Random(args.seed), random.Random(args.seed + 1)
    chance = {"repeat": 1 / 100, "binding": 0.42, "relation": 0.25}[args.task]
    print(f"task {args.task}, {args.layers} layers x {args.hidden}, chance about {chance:.2f}")
    for step in range(1, args.steps + 1):
        x = torch.tensor([_row(rng, args.task) for _ in range(16)])
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        if step % args.eval_every == 0 or step == args.steps:
            model.eval()
            acc = _accuracy(model, eval_rng, args.task)
            model.train()
            print(f"step {step:5d}  loss {loss.item():.3f}  accuracy {acc:.2f}", flush=True)


if __name__ == "__main__":
    main()
