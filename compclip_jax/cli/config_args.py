"""`--config` on the command line, before absl parses it: `--config=NAME[:arg]` (a recipe by name, from any
directory) resolved to its path, older config keys read as today's (compat.migrate_argv, one warning line), and the
config loaded once to check it (`check_argv`): a config file that does not exist (listing those there are), an
unknown `:arg` and a mistyped `--config.KEY` (naming the nearest key) are one line and exit 2, not the traceback
ml_collections would print.
"""
from __future__ import annotations

import sys

import ml_collections

from compclip_jax import compat, recipes
from compclip_jax.errors import UserError
from compclip_jax.train import config as config_lib


def _config_value(argv: list[str]) -> str | None:
  for i, a in enumerate(argv):
    if a.startswith("--config="):
      return a[len("--config="):]
    if a == "--config" and i + 1 < len(argv):
      return argv[i + 1]
  return None


def check_argv(argv: list[str]) -> None:
  """Loads the config `argv`'s --config names (when it names one) and checks each `--config.KEY=…` names a key
  of it (`config_lib.key_problem`). Raises UserError."""
  spec = _config_value(argv)
  if spec is None:
    return
  c = recipes.load_spec(spec)
  for a in argv:
    if a.startswith("--config.") and isinstance(c, ml_collections.ConfigDict):
      key = a[len("--config."):].partition("=")[0]
      problem = config_lib.key_problem(c, key)
      if problem:
        raise UserError(f"--config.{key}: {problem}")


def resolve_argv(argv: list[str]) -> list[str]:
  """`argv` with `--config=NAME[:arg]` (or `--config NAME`) resolved and older config keys renamed. For entry
  points: an unknown name, a missing config file or key exits with status 2 and one message (no traceback)."""
  out, it = [], iter(range(len(argv)))
  try:
    for i in it:
      a = argv[i]
      if a.startswith("--config="):
        a = "--config=" + recipes.resolve(a[len("--config="):])
      elif a == "--config" and i + 1 < len(argv):
        out.append(a)
        a = recipes.resolve(argv[next(it)])
      out.append(a)
    out = compat.migrate_argv(out)
    check_argv(out)
  except UserError as e:
    print(f"error: {e}", file=sys.stderr)
    raise SystemExit(2) from None
  return out
