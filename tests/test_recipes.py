"""The recipes: each paper config (configs/<name>.py) equals docs/methods.md's recipe table cell for cell, holds every
key a recipe sets, and reads its `:key=value` arguments (an unknown one is a one-line error)."""
import os
import re

import pytest

from compclip_jax import methods, recipes
from compclip_jax.train import config as config_lib
from tests import paths

NAMES = ("clic", "read", "negclip", "clip", "clic_read")
W = (r"proj\.kernel",)
CLIP_PREFIXED = lambda rules: tuple(rf"clip\.{r}" for r in rules)
# the table's words for parameter rules → the rules (train/config.py's constants, READ's model prefixes)
RULES = {
    ("trains", "text side"): config_lib.CLIP_TEXT,
    ("trains", "all of CLIP, W"): (r"clip\..*",) + W,
    ("trains", "text side, W"): CLIP_PREFIXED(config_lib.CLIP_TEXT) + W,
    ("frozen", "vision"): config_lib.CLIP_VISION,
    ("frozen", "decoder"): (r"decoder\..*",),
    ("frozen", "vision, decoder"): CLIP_PREFIXED(config_lib.CLIP_VISION) + (r"decoder\..*",),
    ("decay", "≥2-D"): config_lib.DECAY_2D,
}
RULE_KEYS = {"trains": "optim.trainable", "frozen": "optim.frozen", "decay": "optim.decay"}


def _table() -> dict[str, dict[str, str]]:
  """docs/methods.md's recipe table → {config name: {row key: cell}} (empty cells left out)."""
  with open(os.path.join(paths.ROOT, "docs", "methods.md"), encoding="utf-8") as f:
    text = f.read()
  lines = text[text.index("\n## Recipes\n"):].splitlines()
  start = next(i for i, line in enumerate(lines) if line.startswith("|"))
  rows = [line for line in lines[start:][:next(i for i, line in enumerate(lines[start:]) if not line.startswith("|"))]]
  header = [h.strip() for h in rows[0].strip("|").split("|")]
  assert header[0] == "key" and tuple(header[1:]) == NAMES, header
  out = {name: {} for name in NAMES}
  for line in rows[2:]:
    cells = [c.strip() for c in line.strip("|").split("|")]
    for name, cell in zip(NAMES, cells[1:]):
      if cell:
        out[name][cells[0]] = cell
  return out


def _get(c, key: str):
  for part in key.split("."):
    c = c[part]
  return c


def _expected(cell: str, value):
  """The cell read as the config value's type."""
  if isinstance(value, bool):
    return {"True": True, "False": False}[cell]
  if isinstance(value, (int, float)):
    return type(value)(float(cell))
  if isinstance(value, tuple):
    return tuple(p.strip() for p in cell.split(","))
  return cell


def _cells(name: str):
  """(row key, config key, cell) for every cell of `name`'s column; a row naming several keys of one section
  ('clic.w_cont, w_sneg, w_uni') gives one per key, the cell split alike."""
  for row, cell in _table()[name].items():
    if row in RULE_KEYS:
      yield row, RULE_KEYS[row], cell
      continue
    keys = [k.strip() for k in row.split(",")]
    section = keys[0].rpartition(".")[0]
    full = [keys[0]] + [f"{section}.{k}" for k in keys[1:]]
    values = [v.strip() for v in cell.split(",")] if len(full) > 1 else [cell]
    assert len(values) == len(full), (row, cell)
    yield from ((row, k, v) for k, v in zip(full, values))


@pytest.mark.parametrize("name", NAMES)
def test_each_paper_config_is_its_row_of_the_recipe_table(name):
  c = recipes.load(name).get_config()
  checked = set()
  for row, key, cell in _cells(name):
    value = _get(c, key)
    if row == "decay" and cell != "≥2-D":  # READ's: written out in configs/read.py; the table says what it means
      assert any(re.fullmatch(r, "clip.logit_scale") for r in value) and any(
          re.fullmatch(r, "proj.kernel") for r in value), value
    elif row in RULE_KEYS:
      assert tuple(value) == RULES[(row, cell)], (name, row, value)
    else:
      assert value == _expected(cell, value), (name, key, value, cell)
    checked.add(key)
  # every weight of the method's own sections is in the table
  for section in methods.get(name).sections:
    weights = {f"{section.name}.{k}" for k in section.keys if k.startswith("w_") or k == "clip_every"}
    assert weights <= checked, (name, weights - checked)


@pytest.mark.parametrize("name", NAMES)
def test_each_recipe_sets_every_recipe_key_and_its_sections(name):
  c = recipes.load(name).get_config()
  assert config_lib.missing(c) == [] and config_lib.problems(c) == []
  method = methods.get(name)
  assert [k for s in method.sections for k in s.missing(c)] == []
  del c.optim["lr"]
  assert config_lib.problems(c) == ["the config has no optim.lr: a recipe (configs/<method>.py) sets every one"]


def test_the_arguments_are_key_value_pairs():
  c = recipes.load("clic").get_config("runlocal,family=siglip")
  assert c.model.random == "siglip_tiny" and c.batch_size == 8
  assert recipes.load("read").get_config("runlocal").read.t5.random is True
  big = recipes.load("clic").get_config("model=L/14")
  assert big.model.random == "ViT-L-14-quickgelu" and big.batch_size == 800  # the recipe, a random model's shape
  demo = recipes.load("negclip").get_config("demo")
  assert demo.total_steps == 300 and demo.model.random == "tiny" and demo.optim.schedule == "warmup_steps_cosine"
  for bad, says in (("runloc", "unknown argument 'runloc'"), ("model=H/14", "model=H/14: use one of"),
                    ("runlocal,demo", "two presets"), ("family=vit", "family=vit: use one of"), ("runlocal=maybe",
                                                                                                 "True or False")):
    with pytest.raises(config_lib.ConfigError, match=re.escape(says)):
      recipes.load("clic").get_config(bad)
