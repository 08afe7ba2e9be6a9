"""Scorers on hand-made arrays (METHODS §3): truth tables, both tie rules, Winoground's 24 orderings, What'sUp
groups, retrieval recall and top-k with ties."""
import itertools

import numpy as np
import pytest

from compclip_jax.evaluators import scorers


def test_pair_truth_table_and_ties():
  pos, neg = np.array([2.0, 1.0, 1.0]), np.array([1.0, 2.0, 1.0])
  np.testing.assert_array_equal(scorers.pair_correct(pos, neg), [True, False, False])
  np.testing.assert_array_equal(scorers.pair_correct(pos, neg, "lenient"), [True, False, True])
  with pytest.raises(ValueError, match="tie rule"):
    scorers.pair_correct(pos, neg, "maybe")


def test_sugarcrepe_pp_truth_tables():
  for p1, p2, n in itertools.product([0.0, 1.0, 2.0], repeat=3):
    assert scorers.scpp_itt(p1, p2, n) == (p1 > n and p2 > n)
    assert scorers.scpp_itt(p1, p2, n, "lenient") == (p1 >= n and p2 >= n)
    assert scorers.scpp_tot(p1, p2, n) == (p1 > p2 and p1 > n)


def test_winoground_all_24_orderings():
  hits = {"text": 0, "image": 0, "group": 0}
  for a, b, c, d in itertools.permutations([1.0, 2.0, 3.0, 4.0]):
    r = scorers.winoground(a, b, c, d)
    for k in hits:
      hits[k] += int(r[k])
  assert hits == {"text": 6, "image": 6, "group": 4}


def test_winoground_ties():
  r = scorers.winoground(1.0, 1.0, 2.0, 0.0)  # a == b
  assert not r["text"] and r["image"] and not r["group"]
  r = scorers.winoground(1.0, 1.0, 2.0, 0.0, "lenient")
  assert r["text"] and r["image"] and r["group"]


def test_cola_truth_table():
  assert scorers.cola(2, 1, 1, 2) and not scorers.cola(2, 1, 2, 1) and not scorers.cola(1, 1, 1, 2)
  assert scorers.cola(1, 1, 1, 2, "lenient")


def test_argmax_with_ties():
  s = np.array([[3, 1, 2], [3, 3, 1], [1, 3, 2]], float)
  np.testing.assert_array_equal(scorers.argmax_correct(s), [True, False, False])
  np.testing.assert_array_equal(scorers.argmax_correct(s, tie="lenient"), [True, True, False])
  np.testing.assert_array_equal(scorers.argmax_correct(s, index=1), [False, False, True])


def test_whatsup_pair_and_set_counting():
  correct = [True, True, True, False, True, True, False, False]
  pairs = ["a|lr", "a|lr", "a|ou", "a|ou", "b|lr", "b|lr", "b|ou", "b|ou"]
  sets = ["a"] * 4 + ["b"] * 4
  assert scorers.group_all(correct, pairs) == 0.5  # a|lr and b|lr
  assert scorers.group_all(correct, sets) == 0.0
  assert scorers.group_all([True] * 4, sets[:4]) == 1.0


def test_recall_at_k_by_hand():
  # 3 images, 4 captions: captions 0,1 → image 0; 2 → image 1; 3 → image 2
  sim = np.array([[0.9, 0.1, 0.3, 0.5], [0.8, 0.7, 0.6, 0.5], [0.1, 0.2, 0.9, 0.5]])
  r = scorers.recall_at_k(sim, [0, 0, 1, 2], ks=(1, 2))
  # t2i: c0 → image 0 top (0.9) ✓@1; c1 → image 1 (0.7) beats image 0 (0.1) ✗@1 ✗@2 (ranks: 0.7, 0.2, 0.1 → 3rd)
  # c2 → image 2 (0.9) beats image 1 (0.6) ✗@1, ✓@2; c3 → all 0.5: strict ties → rank 2 → ✗@1 ✗@2
  assert r["image_retrieval_recall@1"] == 0.25 and r["image_retrieval_recall@2"] == 0.5
  # i2t: image 0 best caption c0 (0.9 top) ✓@1; image 1's caption c2 (0.6) below 0.8, 0.7 → rank 2 ✗@2;
  # image 2's caption c3 (0.5) below 0.9 → rank 1 ✗@1 ✓@2
  assert r["text_retrieval_recall@1"] == pytest.approx(1 / 3) and r["text_retrieval_recall@2"] == pytest.approx(2 / 3)
  lenient = scorers.recall_at_k(sim, [0, 0, 1, 2], ks=(1,), tie="lenient")
  assert lenient["image_retrieval_recall@1"] == 0.5  # c3's three-way tie now counts


def test_topk_accuracy_with_ties():
  logits = np.array([[0.9, 0.1, 0.0], [0.5, 0.5, 0.0], [0.1, 0.2, 0.3]])
  labels = [0, 1, 0]
  assert scorers.topk_accuracy(logits, labels, 1) == pytest.approx(1 / 3)
  assert scorers.topk_accuracy(logits, labels, 1, "lenient") == pytest.approx(2 / 3)
  assert scorers.topk_accuracy(logits, labels, 3) == 1.0
