"""Scorers: pure functions on similarity arrays (METHODS §3). Nothing here knows about models or files.

Tie rule, explicit everywhere: `tie="strict"` (default; SugarCrepe's own script) counts a tie as wrong,
`tie="lenient"` (clip_benchmark) counts it as right.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

TIES = ("strict", "lenient")


def _check(tie: str) -> None:
  if tie not in TIES:
    raise ValueError(f"tie rule {tie!r}: use one of {TIES}")


def beats(a, b, tie: str = "strict") -> np.ndarray:
  """a > b under the tie rule, elementwise."""
  _check(tie)
  a, b = np.asarray(a), np.asarray(b)
  return a > b if tie == "strict" else a >= b


def pair_correct(pos, neg, tie: str = "strict") -> np.ndarray:
  """SugarCrepe, VALSE, VG-R/VG-A as two options: sim(I, positive) beats sim(I, negative). [N] bool."""
  return beats(pos, neg, tie)


def scpp_itt(p1, p2, n, tie: str = "strict") -> np.ndarray:
  """SugarCrepe++ image-to-text: sim(I,P1) > sim(I,N) and sim(I,P2) > sim(I,N)."""
  return beats(p1, n, tie) & beats(p2, n, tie)


def scpp_tot(p1p2, p1n, p2n, tie: str = "strict") -> np.ndarray:
  """SugarCrepe++ text-only: sim(P1,P2) > sim(P1,N) and sim(P1,P2) > sim(P2,N)."""
  return beats(p1p2, p1n, tie) & beats(p1p2, p2n, tie)


def winoground(a, b, c, d, tie: str = "strict") -> dict[str, np.ndarray]:
  """a = s(C0,I0), b = s(C1,I0), c = s(C1,I1), d = s(C0,I1) → text (a>b ∧ c>d), image (a>d ∧ c>b), group (both)."""
  text = beats(a, b, tie) & beats(c, d, tie)
  image = beats(a, d, tie) & beats(c, b, tie)
  return {"text": text, "image": image, "group": text & image}


def cola(c1i1, c1i2, c2i1, c2i2, tie: str = "strict") -> np.ndarray:
  """COLA multi-object: s(C1,I1) > s(C1,I2) and s(C2,I2) > s(C2,I1) (each caption picks its own image)."""
  return beats(c1i1, c1i2, tie) & beats(c2i2, c2i1, tie)


def argmax_correct(scores, index: int = 0, tie: str = "strict") -> np.ndarray:
  """Option `index` of each row [N, K] is the answer: strict → it beats every other option; lenient → no other
  option beats it."""
  scores = np.asarray(scores)
  target = scores[:, index:index + 1]
  others = np.delete(scores, index, axis=1)
  return np.all(beats(target, others, tie), axis=1)


def group_all(correct, groups: Sequence) -> float:
  """Fraction of groups whose members are all correct (What'sUp pair and set accuracy)."""
  correct = np.asarray(correct)
  by: dict = {}
  for ok, g in zip(correct, groups):
    by.setdefault(g, []).append(bool(ok))
  return float(np.mean([all(v) for v in by.values()])) if by else float("nan")


def recall_at_k(sim, text_image: Sequence[int], ks: Iterable[int] = (1, 5, 10), tie: str = "strict") -> dict:
  """Retrieval recall. sim [N_img, N_txt]; text_image[t] = the image of caption t.

  Text→image: caption t hits at k if fewer than k images outrank its image. Image→text: image i hits at k if one of
  its captions is outranked by fewer than k captions. A tie with the ground truth outranks it under the strict rule.
  """
  _check(tie)
  sim = np.asarray(sim, np.float64)
  text_image = np.asarray(text_image)
  gt_t2i = sim[text_image, np.arange(sim.shape[1])]  # [N_txt]
  above = (sim >= gt_t2i[None]) if tie == "strict" else (sim > gt_t2i[None])
  rank_t2i = above.sum(0) - (1 if tie == "strict" else 0)  # the ground truth ties with itself
  out = {}
  best_rank = np.full(sim.shape[0], np.iinfo(np.int64).max)
  for t in range(sim.shape[1]):
    i = text_image[t]
    row = sim[i]
    r = int((row >= row[t]).sum() - 1) if tie == "strict" else int((row > row[t]).sum())
    best_rank[i] = min(best_rank[i], r)
  has_text = np.isin(np.arange(sim.shape[0]), text_image)
  for k in ks:
    out[f"image_retrieval_recall@{k}"] = float(np.mean(rank_t2i < k))
    out[f"text_retrieval_recall@{k}"] = float(np.mean(best_rank[has_text] < k))
  return out


def topk_accuracy(logits, labels, k: int = 1, tie: str = "strict") -> float:
  """Zero-shot classification: the true class is among the top k (strict: ties with it count against it)."""
  logits, labels = np.asarray(logits), np.asarray(labels)
  true = logits[np.arange(len(labels)), labels][:, None]
  rank = ((logits >= true).sum(1) - 1) if tie == "strict" else (logits > true).sum(1)
  return float(np.mean(rank < k))


def mean(values) -> float:
  values = list(values)
  return float(np.mean(values)) if values else float("nan")
