"""Causal-LM loss over a large vocabulary without the whole logits tensor.

A micro batch of 8 x 1024 tokens over Gemma's 256,000 classes has 2.1 G logits
(4 GB in bf16, 8 GB once upcast for the softmax, and as much again for their
gradient). :class:`ChunkedCrossEntropy` computes ``mean(-log softmax(h W^T + b)[y])``
over rows of ``h`` in chunks of ``chunk_rows``: the forward keeps only the
per-row log-sum-exp, the backward recomputes each chunk's logits and turns them
into the gradients of ``h``, ``W`` and ``b`` at once, so at most one chunk of
logits (and its gradient) is ever alive. Equal to the full-logits loss and its
gradients up to float rounding (``tests/test_lapt.py``).

:func:`causal_lm_loss` applies it to a Hugging Face causal LM: the model body
gives the hidden states, the output embedding is the weight, labels are the
inputs shifted by one (as ``ForCausalLMLoss``), ``-100`` ignored, and a
``final_logit_softcapping`` (Gemma 2) applied inside the chunks. :class:`MicroBatchLoss`
is the module the trainer calls (and DDP and ``torch.compile`` wrap).
"""

from __future__ import annotations

from typing import Any

import torch

IGNORE = -100


def _chunk_logits(
    h: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, cap: float | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logits of one chunk (matmul in ``w``'s dtype, then at least fp32) and, with a soft
    cap, tanh(z / cap)."""
    acc = _acc(w.dtype)
    z = (h.to(w.dtype) @ w.T).to(acc)
    if bias is not None:
        z += bias.to(acc)  # in place: one chunk of logits alive, not two
    if cap is None:
        return z, None
    t = torch.tanh(z.div_(cap))
    return torch.mul(t, cap, out=z), t


def _acc(dtype: torch.dtype) -> torch.dtype:
    """Softmax and accumulation dtype: fp32 for bf16/fp16/fp32 matmuls, fp64 for fp64."""
    return torch.promote_types(dtype, torch.float32)


class ChunkedCrossEntropy(torch.autograd.Function):
    """Sum of the cross-entropy of ``labels`` over rows of ``hidden @ weight.T + bias``.

    Inputs: hidden [N, H], weight [V, H], bias [V] or None, labels [N] (``-100`` =
    ignored), the matmul dtype, rows per chunk and an optional logit soft cap.
    Returns the sum (fp32 scalar, fp64 for fp64 inputs); the caller divides by the
    number of labels.
    """

    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        labels: torch.Tensor,
        dtype: torch.dtype,
        chunk_rows: int,
        cap: float | None,
    ) -> torch.Tensor:
        acc = _acc(dtype)
        total = torch.zeros((), dtype=acc, device=hidden.device)
        lse = torch.empty(hidden.shape[0], dtype=acc, device=hidden.device)
        w = weight.to(dtype)  # once, not per chunk
        for start in range(0, hidden.shape[0], chunk_rows):
            sl = slice(start, start + chunk_rows)
            z, _ = _chunk_logits(hidden[sl], w, bias, cap)
            y = labels[sl]
            keep = y != IGNORE
            picked = z.gather(1, y.clamp(min=0).unsqueeze(1)).squeeze(1)
            # log-sum-exp in the logits' own memory (torch.logsumexp would copy them)
            top = z.amax(dim=1, keepdim=True)
            lse[sl] = (top + z.sub_(top).exp_().sum(dim=1, keepdim=True).log_()).squeeze(1)
            total += ((lse[sl] - picked) * keep).sum()
            del z
        del w
        ctx.save_for_backward(hidden, weight, bias, labels, lse)
        ctx.dtype, ctx.chunk_rows, ctx.cap = dtype, chunk_rows, cap
        return total

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Any, ...]:
        hidden, weight, bias, labels, lse = ctx.saved_tensors
        dtype, cap = ctx.dtype, ctx.cap
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        grad_h = torch.empty_like(hidden) if need_h else None
        # Accumulate the weight's gradient in fp32, in place: no [V, H] temporary per chunk.
        acc = _acc(dtype)
        grad_w = torch.zeros(weight.shape, dtype=acc, device=weight.device) if need_w else None
        grad_b = torch.zeros(bias.shape, dtype=acc, device=bias.device) if need_b else None
        w = weight.to(dtype)
        for start in range(0, hidden.shape[0], ctx.chunk_rows):
            sl = slice(start, start + ctx.chunk_rows)
            h = hidden[sl]
            z, t = _chunk_logits(h, w, bias, cap)
            y = labels[sl]
            keep = (y != IGNORE).to(acc)
            # d(lse - z_y)/dz = softmax(z) - onehot(y), zero for ignored rows.
            dz = z.sub_(lse[sl].unsqueeze(1)).exp_()  # softmax, in the logits' memory
            del z
            dz[torch.arange(len(y), device=y.device), y.clamp(min=0)] -= 1.0
            dz *= (keep * grad_out).unsqueeze(1)
            if t is not None:  # through cap * tanh(z / cap)
                dz *= 1.0 - t.square_()
            if need_b:
                grad_b += dz.sum(0)
            dzc = dz.to(dtype)
            if need_h:
                grad_h[sl] = (dzc @ w).to(hidden.dtype)
            if need_w:
                if dtype == acc:
                    grad_w.addmm_(dz.T, h.to(acc))
                else:
                    grad_w += (dzc.T @ h.to(dtype)).to(acc)
            del dz, dzc
        if grad_w is not None:
            grad_w = grad_w.to(weight.dtype)
        if grad_b is not None:
            grad_b = grad_b.to(bias.dtype)
        return grad_h, grad_w, grad_b, None, None, None, None


def chunked_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    labels: torch.Tensor,
    *,
    chunk_rows: int = 1024,
    dtype: torch.dtype | None = None,
    cap: float | None = None,
) -> torch.Tensor:
    """Mean cross-entropy over the labels that are not ``-100`` (see the class)."""
    hidden = hidden.reshape(-1, hidden.shape[-1])
    labels = labels.reshape(-1)
    if dtype is None:
        dtype = (
            torch.get_autocast_dtype(hidden.device.type)
            if torch.is_autocast_enabled(hidden.device.type)
            else weight.dtype
        )
    n = (labels != IGNORE).sum().clamp(min=1)
    with torch.autocast(hidden.device.type, enabled=False):
        total = ChunkedCrossEntropy.apply(hidden, weight, bias, labels, dtype, int(chunk_rows), cap)
    return total / n


def body_and_head(model: Any) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The decoder stack (hidden states out) and the LM head of a causal LM or its LoRA wrap."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft
    return getattr(inner, inner.base_model_prefix), inner.get_output_embeddings()


def causal_lm_loss(model: Any, ids: torch.Tensor, chunk_rows: int) -> torch.Tensor:
    """``model(input_ids=ids, labels=ids).loss`` without the logits of the whole batch."""
    body, head = body_and_head(model)
    hidden = body(input_ids=ids, use_cache=False).last_hidden_state
    hidden = hidden[:, :-1]
    labels = ids[:, 1:]
    cap = getattr(model.config, "final_logit_softcapping", None)
    return chunked_cross_entropy(
        hidden, head.weight, getattr(head, "bias", None), labels, chunk_rows=chunk_rows, cap=cap
    )


class MicroBatchLoss(torch.nn.Module):
    """The micro batch's mean next-token loss; the module DDP / torch.compile wrap."""

    def __init__(self, model: Any, chunk_rows: int):
        super().__init__()
        self.model = model
        self.chunk_rows = chunk_rows

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.chunk_rows:
            return causal_lm_loss(self.model, ids, self.chunk_rows)
        return self.model(input_ids=ids, labels=ids).loss
