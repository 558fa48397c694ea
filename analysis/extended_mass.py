"""Where an extended checkpoint's loss goes: its new tokens against the source's own.

An extended vocabulary keeps the source's tokens and appends the target's new ones, so
held-out text mixes both. For each checkpoint of one extended setting of a finished run
(``RUN/results/seed<N>/transfer/<lang>/<source>/<target>@extend/<method>``) this reads
the first lines of the language's held-out text (each line on its own, at most
``--max-length`` tokens; the zero-shot scores pack lines into sequences instead, so the
token counts differ a little from theirs) and prints, per method: the
tokens of each kind, their mean loss in nats, and the mean probability the model puts on
all new ids at once. A method whose output rows draw much more mass to the new ids than
the text's share of new tokens pays for it on every source token
(docs/real_text.md, "extended settings").
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from embtransfer.models.loading import load_tokenizer
from embtransfer.transfer.transferred_model import load_source_model


def split_loss(checkpoint: Path, lines: list[str], n_source: int, max_length: int,
               batch: int = 8) -> dict[str, float]:
    """Summed loss and count of new-id (>= ``n_source``) and source-id targets, and the mean
    probability on the new ids at every scored position."""
    tokenizer = load_tokenizer(checkpoint)
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    model, _ = load_source_model(checkpoint, False, False)
    model.eval()
    sums = {"new_nll": 0.0, "new": 0, "source_nll": 0.0, "source": 0, "mass": 0.0}
    with torch.no_grad():
        for start in range(0, len(lines), batch):
            enc = tokenizer(lines[start:start + batch], return_tensors="pt", padding=True,
                            truncation=True, max_length=max_length)
            logp = torch.log_softmax(model(**enc).logits[:, :-1].float(), -1)
            target = enc["input_ids"][:, 1:]
            scored = enc["attention_mask"][:, 1:].bool()
            nll = -logp.gather(-1, target[..., None])[..., 0]
            new = target >= n_source
            for kind, where in (("new", scored & new), ("source", scored & ~new)):
                sums[f"{kind}_nll"] += float(nll[where].sum())
                sums[kind] += int(where.sum())
            sums["mass"] += float(logp[..., n_source:].exp().sum(-1)[scored].sum())
    return sums


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("setting", help="DIR of the setting: results/seed<N>/transfer/"
                                        "<lang>/<source>/<target>@extend")
    parser.add_argument("text", help="the held-out text, e.g. results/corpus/<lang>/valid.txt")
    parser.add_argument("--source-vocab", type=int, required=True,
                        help="the source's vocabulary size: ids from it on are new")
    parser.add_argument("--methods", nargs="+", required=True)
    parser.add_argument("--lines", type=int, default=300)
    parser.add_argument("--max-length", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with open(args.text, encoding="utf-8") as handle:
        lines = [line.rstrip("\n") for _, line in zip(range(args.lines), handle, strict=False)]
    print("method  new tokens  loss on new  source tokens  loss on source  mass on new ids  "
          "total loss")
    for method in args.methods:
        s = split_loss(Path(args.setting) / method, lines, args.source_vocab, args.max_length)
        scored = s["new"] + s["source"]
        print(f"{method}  {s['new']:,}  {s['new_nll'] / s['new']:.3f}  {s['source']:,}  "
              f"{s['source_nll'] / s['source']:.3f}  {s['mass'] / scored:.3f}  "
              f"{s['new_nll'] + s['source_nll']:,.0f}")


if __name__ == "__main__":
    main()
