"""Bad input: the reasons a record is skipped, and the counter that refuses to let skips go silent or unbounded."""
from __future__ import annotations

import collections
import logging


class BadRecord(Exception):
  """A record that cannot become a sample; `reason` is a short key that is counted, `detail` names the file/row."""

  def __init__(self, reason: str, detail: str):
    super().__init__(f"{reason}: {detail}")
    self.reason, self.detail = reason, detail


class TooManySkipped(RuntimeError):
  pass


class SkipCounter:
  """Counts skipped records by reason; past `max_fraction` of records seen it raises with example rows.

  The fraction is only enforced after `min_seen` records, so one bad row at the start does not stop a run.
  """

  def __init__(self, max_fraction: float = 0.05, min_seen: int = 100, examples_per_reason: int = 3):
    self.max_fraction, self.min_seen, self.k = max_fraction, min_seen, examples_per_reason
    self.seen, self.skipped = 0, collections.Counter()
    self.examples: dict[str, list[str]] = collections.defaultdict(list)

  def ok(self) -> None:
    self.seen += 1

  def skip(self, reason: str, detail: str) -> None:
    self.seen += 1
    self.skipped[reason] += 1
    if len(self.examples[reason]) < self.k:
      self.examples[reason].append(detail)
    if self.skipped[reason] == 1:
      logging.warning("skipping a record (%s): %s — further ones are counted, see the summary", reason, detail)
    self.check()

  def check(self) -> None:
    total = sum(self.skipped.values())
    if self.seen >= self.min_seen and total > self.max_fraction * self.seen:
      raise TooManySkipped(f"{total} of {self.seen} records skipped (> {self.max_fraction:.1%}); fix the data or "
                           f"raise the limit (data.max_skip_fraction).\n{self.summary()}")

  def summary(self) -> str:
    if not self.skipped:
      return f"no records skipped of {self.seen}"
    lines = [f"skipped {sum(self.skipped.values())} of {self.seen} records:"]
    for reason, n in self.skipped.most_common():
      lines.append(f"  {reason}: {n} (e.g. {'; '.join(self.examples[reason])})")
    return "\n".join(lines)

  def state(self) -> dict:
    return {"seen": self.seen, "skipped": dict(self.skipped), "examples": dict(self.examples)}

  def restore(self, state: dict) -> None:
    self.seen = state["seen"]
    self.skipped = collections.Counter(state["skipped"])
    self.examples = collections.defaultdict(list, {k: list(v) for k, v in state["examples"].items()})
