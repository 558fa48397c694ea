"""Real shapes at real scale: the stages that meet real vocabularies, on this machine.

Prints wall time and peak memory (RSS of the stage's own process) per stage;
asserts nothing. Stages, each in a fresh process:

1. ``vocab``: the vocab stage on the real Gemma 3 tokenizer (262,145 ids;
   ``make fixtures`` fetches it).
2. ``targets``: per language (de, ar, vi), text sampled from PyPI ``wordfreq``'s
   real word-frequency lists (words drawn by frequency, 12 per line) and three
   target tokenizers trained on it with ``tokenizers`` (byte-level BPE,
   WordPiece, Unigram; 50,000 tokens asked; wordfreq's Vietnamese list holds
   only ~10k syllables, so its vocabularies stay smaller).
3. ``overlap``: vocab tables of the nine targets, overlap with Gemma 3 and coverage.
4. ``source``: a Gemma 3 text model with the real vocabulary and hidden size
   (262,208 rows x 1,152, Gemma 3 1B's width; one layer, random weights,
   bf16), built from a config and saved.
5. ``neighbors``: FOCUS's inputs for the German byte-level target: the text
   tokenized, token-level fastText (dim 300, 5 epochs), token vectors, neighbours.
6. ``wordvec``: SALT's inputs for the same target: word-level fastText on the raw
   sampled text (dim 300, 5 epochs; stands in for the crawl vectors the paper
   downloads), word-level token vectors, neighbours; the overlap file.
7. ``plm``: a German GPT-2-style target PLM with the trained byte-level target
   tokenizer's vocabulary and GPT-2's hidden size 768 (one layer, random weights,
   fp32), built from a config and saved with that tokenizer.
8. ``regression``: the SALT regression (per-token least squares, h_t 768 -> h_s
   1,152) of every non-shared target token, on the CPU. Neighbour sets are capped at
   ``--salt-max-neighbors`` (default 64; SALT's ``max_neighbors`` option): the
   sampled words carry no context, so nearly every token's sparsemax support is
   degenerate (1,024 neighbours stored), and one 1,024 x 1,024 eigendecomposition
   per token (~10 s each here) would take days, where real neighbour sets hold tens.
   One torch thread: two spin-wait on 2 shared cores (see benchmarks/README.md).
9. ``transfer``: FOCUS, Mean, Random-copy, Heuristics and Multivariate rows for the
   German byte-level target from the source's real-size embedding matrix
   (statistics over the text-token rows only), then the transferred checkpoint.
10. ``salt``: the SALT transfer and checkpoint, through the workflow's own transfer
    job (:func:`embtransfer.transfer.job.run_transfer_job`, vocabulary replaced).
11. ``zeroshot``: held-out loss of the transferred (Multivariate) checkpoint on 200 lines.
12. ``lapt``: 3 LAPT steps (:func:`embtransfer.lapt.trainer.train_lapt`; max length 128,
    micro batch 2 = global batch, chunked vocabulary loss, fp32 on the CPU) on the
    SALT checkpoint (the target's vocabulary: the paper replaces the source's).
13. ``lapt_source``: the same 3 steps on the source model itself, with Gemma 3's
    real 262,208-row vocabulary, where the chunked loss matters.

Not covered (issue 11 item 4): OFA (it needs source and target fastText aligned
by a bilingual dictionary; none ships offline); Arabic, Vietnamese and the WordPiece
and Unigram targets past the overlap stage; the regression on uncapped neighbour sets.

    nice python benchmarks/bench_real.py [--work DIR] [--lines 20000] [--stages vocab,...]
        [--salt-max-neighbors 64] [--lapt-steps 3]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LANGS = ("de", "ar", "vi")
FAMILIES = ("bytelevel_bpe", "wordpiece", "unigram")
HIDDEN = 1152
PLM_HIDDEN = 768  # German GPT-2's (and GPT-2 base's) width
FASTTEXT = {"model": "cbow", "dim": 300, "epoch": 5, "min_count": 3, "minn": 3, "maxn": 6,
            "neg": 10, "ws": 5, "lr": 0.05}


def gemma3_dir() -> Path:
    sys.path.insert(0, str(REPO / "tests" / "fixtures" / "tokenizers"))
    import fetch

    return fetch.fetch("gemma3")


def stage_vocab(work: Path, args: argparse.Namespace) -> str:
    from embtransfer.models.loading import load_tokenizer
    from embtransfer.vocab.canonical import vocab_table, write_vocab

    tok = load_tokenizer(gemma3_dir())
    start = time.perf_counter()
    table = vocab_table(tok)
    seconds = time.perf_counter() - start
    write_vocab(table, work / "gemma3.parquet")
    kinds = table.groupby("kind").size().to_dict()
    return f"{len(table)} ids, vocab_table {seconds:.1f} s, kinds {kinds}"


def sample_text(lang: str, lines: int, seed: int = 0) -> list[str]:
    from wordfreq import top_n_list, word_frequency

    words = top_n_list(lang, 200_000)
    weights = [word_frequency(w, lang) for w in words]
    rng = random.Random(seed)
    drawn = rng.choices(words, weights=weights, k=lines * 12)
    return [" ".join(drawn[i : i + 12]) for i in range(0, len(drawn), 12)]


def train(family: str, text: list[str], size: int):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if family == "bytelevel_bpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=size, show_progress=False, special_tokens=["<|endoftext|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        roles = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}
    elif family == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(
            vocab_size=size, show_progress=False,
            special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
        roles = {"unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]",
                 "pad_token": "[PAD]", "mask_token": "[MASK]"}
    else:
        tok = Tokenizer(models.Unigram())
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        trainer = trainers.UnigramTrainer(vocab_size=size, unk_token="<unk>", show_progress=False,
                                          special_tokens=["<pad>", "</s>", "<unk>"])
        roles = {"unk_token": "<unk>", "eos_token": "</s>", "pad_token": "<pad>"}
    tok.train_from_iterator(text, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, **roles)


def stage_targets(work: Path, args: argparse.Namespace) -> str:
    out = []
    for lang in LANGS:
        text = sample_text(lang, args.lines)
        (work / f"{lang}.txt").write_text("\n".join(text) + "\n")
        for family in FAMILIES:
            tok = train(family, text, 50_000)
            tok.save_pretrained(work / f"{lang}_{family}")
            out.append(f"{lang}/{family} {len(tok)}")
    return "tokens: " + ", ".join(out)


def stage_overlap(work: Path, args: argparse.Namespace) -> str:
    from embtransfer.models.loading import load_tokenizer
    from embtransfer.vocab.canonical import read_vocab, vocab_table, write_vocab
    from embtransfer.vocab.overlap import compute_overlap, count_tokens, coverage

    source = read_vocab(work / "gemma3.parquet")
    out = []
    for lang in LANGS:
        for family in FAMILIES:
            tok = load_tokenizer(work / f"{lang}_{family}")
            table = vocab_table(tok)
            write_vocab(table, work / f"{lang}_{family}.parquet")
            cov = coverage(compute_overlap(source, table), table,
                           count_tokens(tok, work / f"{lang}.txt", max_lines=20_000))
            out.append(f"{lang}/{family} {cov['coverage_pct']:.0f}% of vocab, "
                       f"{cov['corpus_coverage_pct']:.0f}% of text")
    return "; ".join(out)


def stage_neighbors(work: Path, args: argparse.Namespace) -> str:
    """FOCUS's inputs for the German byte-level target: token-level fastText, neighbours."""
    from embtransfer.fasttext.vectors import token_vectors, tokenize_for_fasttext, train_fasttext
    from embtransfer.models.loading import load_tokenizer
    from embtransfer.neighbors.search import compute_neighbors, write_neighbors
    from embtransfer.vocab.canonical import read_vocab
    from embtransfer.vocab.overlap import compute_overlap

    out = []
    start = time.perf_counter()
    tok = load_tokenizer(work / "de_bytelevel_bpe")
    tokenize_for_fasttext(tok, work / "de.txt", work / "de_tokens.txt")
    train_fasttext(work / "de_tokens.txt", work / "de_tokens.bin", FASTTEXT, 0, 2)
    out.append(f"fastText (dim 300) {time.perf_counter() - start:.1f} s")
    import fasttext

    start = time.perf_counter()
    target = read_vocab(work / "de_bytelevel_bpe.parquet")
    vectors, missing = token_vectors(fasttext.load_model(str(work / "de_tokens.bin")),
                                     target, "token")
    pairs = compute_overlap(read_vocab(work / "gemma3.parquet"), target)
    table, stats = compute_neighbors(vectors, missing, pairs["target_id"].to_numpy(),
                                     pairs["source_id"].to_numpy(), threads=2)
    write_neighbors(table, stats, work / "de_neighbors.parquet")
    out.append(f"token vectors + neighbours {time.perf_counter() - start:.1f} s "
               f"({int(missing.sum())} tokens without a vector)")
    return ", ".join(out)


def stage_wordvec(work: Path, args: argparse.Namespace) -> str:
    """SALT's inputs for the German byte-level target: word-level fastText, neighbours."""
    from embtransfer.fasttext.vectors import load_fasttext, train_fasttext
    from embtransfer.fasttext.vectors import token_vectors as vectors_of
    from embtransfer.neighbors.search import compute_neighbors, write_neighbors
    from embtransfer.vocab.canonical import read_vocab
    from embtransfer.vocab.overlap import compute_overlap, write_overlap

    start = time.perf_counter()
    train_fasttext(work / "de.txt", work / "de_words.bin", FASTTEXT, 0, 2)
    out = [f"fastText (dim {FASTTEXT['dim']}, {FASTTEXT['epoch']} epochs) "
           f"{time.perf_counter() - start:.1f} s"]
    start = time.perf_counter()
    target = read_vocab(work / "de_bytelevel_bpe.parquet")
    vectors, missing = vectors_of(load_fasttext(work / "de_words.bin"), target, "word")
    pairs = compute_overlap(read_vocab(work / "gemma3.parquet"), target)
    write_overlap(pairs, work / "de_overlap.parquet")
    table, stats = compute_neighbors(vectors, missing, pairs["target_id"].to_numpy(),
                                     pairs["source_id"].to_numpy(), threads=2)
    write_neighbors(table, stats, work / "de_neighbors_word.parquet")
    out.append(f"token vectors + neighbours {time.perf_counter() - start:.1f} s "
               f"({int(missing.sum())} tokens without a vector, {stats['degenerate']} "
               f"degenerate rows, support {stats.get('support')})")
    return ", ".join(out)


def stage_plm(work: Path, args: argparse.Namespace) -> str:
    """German GPT-2-style target PLM: the byte-level target's vocabulary, width 768."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from embtransfer.models.loading import check_tokenizer_model_agreement, load_tokenizer

    tok = load_tokenizer(work / "de_bytelevel_bpe")
    config = GPT2Config(vocab_size=len(tok), n_embd=PLM_HIDDEN, n_layer=1, n_head=12,
                        n_positions=1024, bos_token_id=tok.bos_token_id,
                        eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    model.save_pretrained(work / "plm_de")
    tok.save_pretrained(work / "plm_de")
    check_tokenizer_model_agreement(work / "plm_de", work / "plm_de")
    params = sum(p.numel() for p in model.parameters())
    return f"{config.vocab_size} x {PLM_HIDDEN}, {params / 1e6:.0f}M parameters"


def stage_regression(work: Path, args: argparse.Namespace) -> str:
    """SALT step 4 as ``workflow/scripts/transfer/salt_regression.py`` runs it, on the CPU."""
    import torch

    from embtransfer.models.loading import load_embeddings
    from embtransfer.neighbors.search import Neighbors, read_neighbors
    from embtransfer.transfer.regression import salt_coefficients, write_coefficients

    # One thread: on 2 cores shared with other work, two threads spin-wait on the many
    # small batched eigendecompositions (measured 0.87 s vs 0.04 s per batch of 17 64x64).
    torch.set_num_threads(1)
    table, _ = read_neighbors(work / "de_neighbors_word.parquet")
    plm = load_embeddings(work / "plm_de")  # the source is read by the transfer job only
    result = salt_coefficients(plm.input, Neighbors.from_table(table), device="cpu",
                               max_neighbors=args.salt_max_neighbors)
    write_coefficients(result, work / "de_projected.safetensors", work / "de_projected.json")
    stats = result["stats"]
    return (f"h_t {plm.input.shape[1]}, {stats['counts']}, "
            f"{stats['n_capped']} capped at {args.salt_max_neighbors}, k {stats['k_used']}, "
            f"solve {stats['seconds']['solve']:.1f} s")


def stage_salt(work: Path, args: argparse.Namespace) -> str:
    """The SALT transfer and checkpoint through the workflow's transfer job."""
    from embtransfer.transfer.job import run_transfer_job

    paths = {"source": str(work / "source"), "target_tokenizer": str(work / "de_bytelevel_bpe"),
             "source_vocab": str(work / "gemma3.parquet"),
             "target_vocab": str(work / "de_bytelevel_bpe.parquet"),
             "overlap": str(work / "de_overlap.parquet"),
             "neighbors_word": str(work / "de_neighbors_word.parquet"),
             "projected": str(work / "de_projected.safetensors")}
    report = run_transfer_job("salt", paths, str(work / "salt"),
                              {"max_neighbors": args.salt_max_neighbors}, "replace", 0)
    seconds = {k: round(v, 1) for k, v in report["seconds"].items()}
    return f"rows {report['counts']}, seconds {seconds}"


def stage_source(work: Path, args: argparse.Namespace) -> str:
    import torch
    from transformers import AutoTokenizer, Gemma3ForCausalLM, Gemma3TextConfig

    config = Gemma3TextConfig(hidden_size=HIDDEN, num_hidden_layers=1, intermediate_size=6912,
                              num_attention_heads=4, num_key_value_heads=1, head_dim=256,
                              max_position_embeddings=2048)
    torch.manual_seed(0)
    model = Gemma3ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(work / "source")
    AutoTokenizer.from_pretrained(str(gemma3_dir())).save_pretrained(work / "source")
    params = sum(p.numel() for p in model.parameters())
    return f"{config.vocab_size} x {HIDDEN}, {params / 1e6:.0f}M parameters"


def stage_transfer(work: Path, args: argparse.Namespace) -> str:
    import numpy as np

    from embtransfer.models.loading import load_embeddings
    from embtransfer.neighbors.search import Neighbors, read_neighbors
    from embtransfer.transfer.checkpoint import write_transferred_checkpoint
    from embtransfer.transfer.methods.base import TransferInputs, get_method
    from embtransfer.vocab.canonical import read_vocab
    from embtransfer.vocab.overlap import compute_overlap

    emb = load_embeddings(work / "source")
    source = read_vocab(work / "gemma3.parquet")
    target = read_vocab(work / "de_bytelevel_bpe.parquet")
    inputs = TransferInputs(emb.input, emb.output, source, target,
                            compute_overlap(source, target), seed=0)
    inputs.neighbors["token"] = Neighbors.from_table(
        read_neighbors(work / "de_neighbors.parquet")[0])
    out = []
    rows = None
    for name in ("focus", "mean", "random_copy", "heuristics", "multivariate"):
        spec = get_method(name)
        start = time.perf_counter()
        rows = spec.fn(inputs, spec.defaults, "input").rows
        out.append(f"{name} {time.perf_counter() - start:.1f} s")
    start = time.perf_counter()
    write_transferred_checkpoint(work / "source", work / "de_bytelevel_bpe",
                                 np.asarray(rows), None, work / "transferred")
    out.append(f"checkpoint {time.perf_counter() - start:.1f} s")
    return ", ".join(out)


def stage_zeroshot(work: Path, args: argparse.Namespace) -> str:
    from embtransfer.evaluation.intrinsic import evaluate_text

    result = evaluate_text(work / "transferred", work / "de.txt", max_length=256,
                           max_lines=200, device="cpu")
    return f"loss {result.get('loss')}"


def _lapt(model: Path, out: Path, work: Path, args: argparse.Namespace) -> str:
    from embtransfer.lapt.trainer import train_lapt

    valid = work / "de_valid.txt"
    if not valid.exists():  # held out: another seed's draw
        valid.write_text("\n".join(sample_text("de", 200, seed=1)) + "\n")
    cfg = {"max_length": 128, "global_batch_size": 2, "micro_batch_size": 2,
           "max_steps": args.lapt_steps, "log_every": 1, "eval_fractions": [],
           "checkpoint_every": 10_000, "threads": 2, "loss_chunk_rows": 1024}
    summary = train_lapt(model, work / "de.txt", valid, out, cfg, 0,
                         work_dir=out.with_suffix(".work"), log=lambda _msg: None)
    return (f"{summary['step']} steps, train loss {summary['final_train_loss']:.3f}, "
            f"{summary['tokens_per_s']:.0f} tokens/s, elapsed {summary['elapsed_s']:.1f} s")


def stage_lapt(work: Path, args: argparse.Namespace) -> str:
    """A few LAPT steps on the SALT checkpoint (the target's vocabulary)."""
    return _lapt(work / "salt", work / "salt_lapt", work, args)


def stage_lapt_source(work: Path, args: argparse.Namespace) -> str:
    """The same steps on the source model: Gemma 3's 262,208-row vocabulary."""
    return _lapt(work / "source", work / "source_lapt", work, args)


STAGES = {"vocab": stage_vocab, "targets": stage_targets, "overlap": stage_overlap,
          "source": stage_source, "neighbors": stage_neighbors, "wordvec": stage_wordvec,
          "plm": stage_plm, "regression": stage_regression, "transfer": stage_transfer,
          "salt": stage_salt, "zeroshot": stage_zeroshot, "lapt": stage_lapt,
          "lapt_source": stage_lapt_source}


def _child(name: str, work: str, args: argparse.Namespace, queue: mp.Queue) -> None:
    start = time.perf_counter()
    note = STAGES[name](Path(work), args)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    queue.put((time.perf_counter() - start, peak, note))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", help="keep the artifacts here (default: a temporary folder)")
    parser.add_argument("--lines", type=int, default=20_000, help="sampled lines per language")
    parser.add_argument("--stages", default=",".join(STAGES),
                        help=f"comma-separated, in order (default: all): {','.join(STAGES)}")
    parser.add_argument("--salt-max-neighbors", type=int, default=64,
                        help="cap on each token's neighbour set in the SALT regression")
    parser.add_argument("--lapt-steps", type=int, default=3)
    args = parser.parse_args()
    names = args.stages.split(",")
    unknown = sorted(set(names) - set(STAGES))
    if unknown:
        parser.error(f"unknown stage(s) {unknown}; the stages are {','.join(STAGES)}")
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        total = time.perf_counter()
        for name in names:
            queue = ctx.Queue()
            proc = ctx.Process(target=_child, args=(name, str(work), args, queue))
            proc.start()
            proc.join()
            if proc.exitcode != 0:
                raise SystemExit(f"stage {name} failed (exit {proc.exitcode})")
            seconds, peak, note = queue.get()
            print(f"{name:11s} {seconds:7.1f} s  peak {peak:5.2f} GB  {note}", flush=True)
        print(f"total       {time.perf_counter() - total:7.1f} s")


if __name__ == "__main__":
    main()
