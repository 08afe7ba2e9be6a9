"""Finding the training configs by name, in a checkout and in an installed package alike.

`configs/` stays at the repository's top level (the project's layout); `pip install .` ships it inside the package
as `compclip_jax/_configs/` (pyproject's package-dir), so site-packages gets no top-level `configs`. The config files
import their shared part as `from configs import common`; `ensure_importable` makes that name resolve to the
installed copy when no `configs` package is on the path (a checkout run from its root has its own).

`--config` accepts `clic`, `clic:runlocal` (a name in that folder, with its argument) and, as before, a path
`configs/clic.py[:arg]`; `resolve_argv` rewrites names to paths before absl parses the flags.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
import types

_PACKAGE = os.path.dirname(os.path.abspath(__file__))
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def configs_dir() -> str:
  """The checkout's `configs/` when this package runs from a checkout, else the copy installed with it."""
  checkout = os.path.join(os.path.dirname(_PACKAGE), "configs")
  if os.path.exists(os.path.join(checkout, "common.py")):
    return checkout
  return os.path.join(_PACKAGE, "_configs")


def names() -> list[str]:
  d = configs_dir()
  return sorted(f[:-3] for f in os.listdir(d) if f.endswith(".py") and f not in ("__init__.py", "common.py"))


def ensure_importable() -> None:
  """Makes `import configs` (what the config files use for their shared part) work from any directory: a `configs`
  package already on the path is kept; otherwise the name is bound to the configs found by `configs_dir`."""
  if "configs" in sys.modules:
    return
  spec = importlib.util.find_spec("configs")
  if spec is not None and spec.submodule_search_locations and any(
      os.path.exists(os.path.join(p, "common.py")) for p in spec.submodule_search_locations):
    return
  d = configs_dir()
  spec = importlib.util.spec_from_file_location("configs", os.path.join(d, "__init__.py"),
                                                submodule_search_locations=[d])
  module = importlib.util.module_from_spec(spec)
  sys.modules["configs"] = module
  spec.loader.exec_module(module)


def load(name: str) -> types.ModuleType:
  """The config module `name` ('clic', 'read', …), from a checkout or the installed package."""
  ensure_importable()
  return importlib.import_module(f"configs.{name}")


def resolve(spec: str) -> str:
  """`--config` value → what ml_collections' config_flags loads: an existing path is kept; a bare name (`clic`,
  `clic:runlocal`) becomes the path of that file in `configs_dir()`. Unknown names raise ValueError listing the
  known ones."""
  path, sep, arg = spec.partition(":")
  if os.path.exists(path) or not _NAME.fullmatch(path):
    return spec
  target = os.path.join(configs_dir(), f"{path}.py")
  if not os.path.exists(target) or path == "common":
    raise ValueError(f"--config={spec}: no config named {path!r} (known: {', '.join(names())}; or pass a path "
                     "such as configs/clic.py)")
  return target + sep + arg


def resolve_argv(argv: list[str]) -> list[str]:
  """`argv` with `--config=NAME[:arg]` (or `--config NAME`) resolved; makes `configs` importable for the files.
  For entry points: an unknown name exits with status 2 and the message (no traceback)."""
  out, it = [], iter(range(len(argv)))
  try:
    for i in it:
      a = argv[i]
      if a.startswith("--config="):
        a = "--config=" + resolve(a[len("--config="):])
      elif a == "--config" and i + 1 < len(argv):
        out.append(a)
        a = resolve(argv[next(it)])
      out.append(a)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    raise SystemExit(2) from None
  if any(a.startswith("--config") for a in argv):
    ensure_importable()
  return out
