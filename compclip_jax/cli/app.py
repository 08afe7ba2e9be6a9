"""What every entry point does the same way: a quiet console and user errors as one message.

- `quiet_logging(verbose)`: unless asked (absl's --verbosity / -v given), the console shows this package's own lines
  and everybody's warnings; absl, orbax, jax and XLA INFO lines (the libtpu "Unable to initialize backend" line too)
  stay off, and the C++ runtimes' INFO logs are silenced through their environment variables (call it before the
  first jax computation).
- `guard(main)`: wraps an absl `main(argv)`. A user error — `compclip_jax.errors.UserError` (any subclass), absl's
  `app.UsageError`, or a read-only / permission-denied / missing file — prints one message on stderr and exits 2;
  another exception with an integer `exit_code` (training's signal stop: 130 for SIGINT, 143 for SIGTERM; a diverged
  loss: 3) prints its message and exits with that code; any other exception is a bug: its traceback, then one line
  saying so, exit 1. COMPCLIP_TRACEBACK=1 in the environment lets every exception through with its traceback.
- `parse_flags(argv)`: absl's flag parsing with its errors as one line and exit 2 (absl: a "FATAL" block, exit 1),
  and `--help` / `--helpfull` exiting 0 (absl: 1).
- `run(main, argv=None)`: `app.run(guard(main), argv, flags_parser=parse_flags)`, the whole contract.
- `refuse_arguments(argv)`: first in a `main` that takes no positional arguments.

Usage in an entry point: `cli.run(main)`, and `cli.quiet_logging(cli.verbosity_given())` first in main.
"""
from __future__ import annotations

import errno
import functools
import logging
import os
import sys
import traceback

from absl import app as absl_app
from absl import flags

from compclip_jax.errors import EXIT_USER_ERROR, UserError

EXIT_BUG = 1
EXIT_DIVERGED = 3
EXIT_SIGINT, EXIT_SIGTERM = 130, 143
# A missing or unreadable input file is the user's to fix too (the message names it).
USER_ERRNOS = (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT, errno.ENOTDIR, errno.EISDIR)
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # compclip_jax/, every module of it
HELP_FLAGS = ("--help", "-help", "--helpshort", "-helpshort", "--helpfull", "-helpfull", "-h")
BUG = "internal error (a bug, not a mistake of yours): please report it with the traceback above and the command line"


class _OwnLinesOrWarnings(logging.Filter):
  """Passes WARNING and above from anyone, and INFO from this package (its modules log through the root logger)."""
  def filter(self, record: logging.LogRecord) -> bool:
    if record.levelno >= logging.WARNING:
      return True
    return record.name.startswith("compclip_jax") or (record.name == "root" and
                                                      os.path.abspath(record.pathname).startswith(PACKAGE_DIR))


def verbosity_given() -> bool:
  """Whether absl's --verbosity (or -v) was given on the command line (after flags are parsed)."""
  from absl import flags  # pylint: disable=import-outside-toplevel
  return "verbosity" in flags.FLAGS and flags.FLAGS["verbosity"].present


def quiet_logging(verbose: bool) -> None:
  """Keeps the console to the run's own lines unless `verbose` (see the module docstring)."""
  root = logging.getLogger()
  root.setLevel(logging.INFO)
  if verbose:
    return
  for var in ("TF_CPP_MIN_LOG_LEVEL", "TPU_MIN_LOG_LEVEL", "TPU_STDERR_LOG_LEVEL"):  # XLA / libtpu C++ INFO logs
    os.environ.setdefault(var, "1")
  for handler in root.handlers:
    if not any(isinstance(f, _OwnLinesOrWarnings) for f in handler.filters):
      handler.addFilter(_OwnLinesOrWarnings())


def exit_code(e: BaseException) -> int | None:
  """The exit code `guard` gives `e`, or None for an exception that deserves its traceback."""
  code = getattr(e, "exit_code", None)
  if isinstance(e, absl_app.UsageError):
    return EXIT_USER_ERROR
  if isinstance(e, UserError) or isinstance(code, int):
    return code
  if isinstance(e, OSError) and e.errno in USER_ERRNOS or type(e) is FileNotFoundError:
    return EXIT_USER_ERROR
  return None


def message(e: BaseException) -> str:
  """The one line `guard` prints for `e` (after "error: " for a user error)."""
  if isinstance(e, OSError) and e.errno in USER_ERRNOS and e.filename:
    return f"cannot write {e.filename}: {e.strerror}"
  if isinstance(e, absl_app.UsageError):
    return f"{e} (--help lists the flags)"
  return str(e)


def guard(main):
  """`main(argv)` with user errors turned into one stderr message and an exit code (see the module docstring)."""
  @functools.wraps(main)
  def guarded(argv):
    try:
      return main(argv)
    except KeyboardInterrupt:
      if os.environ.get("COMPCLIP_TRACEBACK"):
        raise
      print("interrupted (Ctrl-C)", file=sys.stderr, flush=True)
      sys.exit(EXIT_SIGINT)
    except Exception as e:  # pylint: disable=broad-except
      code = exit_code(e)
      if os.environ.get("COMPCLIP_TRACEBACK"):
        raise
      if code is None:  # a bug: the traceback is what a report needs; the last line says it is not the user's fault
        traceback.print_exc()
        print(BUG, file=sys.stderr, flush=True)
        sys.exit(EXIT_BUG)
      print(f"error: {message(e)}" if code == EXIT_USER_ERROR else message(e), file=sys.stderr, flush=True)
      sys.exit(code)

  return guarded


def refuse_arguments(argv: list[str]) -> None:
  """For an entry point whose every option is a --flag: a stray word left after the flags is one line, exit 2."""
  if len(argv) > 1:
    raise absl_app.UsageError(f"unexpected arguments: {argv[1:]}: every option is a --flag")


def _flag_error_line(e: Exception) -> str:
  """One line of an absl flag error. A config file that failed to load (ml_collections) embeds its traceback in the
  message: its last line is the exception that says what is wrong."""
  lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
  if len(lines) > 1 and "Traceback" in str(e):
    return f"{lines[0].rstrip(':')} {lines[-1]}"
  return " ".join(lines)


def parse_flags(argv: list[str]) -> list[str]:
  """absl's flags parsed from `argv` → the arguments left for main; a flag error is one line on stderr and exit 2,
  and the help flags exit 0 after printing the help (absl exits 1 for both)."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    print(f"error: {_flag_error_line(e)} (--help lists the flags)", file=sys.stderr, flush=True)
    sys.exit(EXIT_USER_ERROR)
  except SystemExit as e:
    if e.code == 1 and any(a in HELP_FLAGS for a in argv[1:]):
      sys.exit(0)  # absl printed the help and exits 1: asking for help is no failure
    raise


def run(main, argv: list[str] | None = None) -> None:
  """Runs the absl `main(argv)` of an entry point under the contract of the module docstring."""
  absl_app.run(guard(main), argv=argv, flags_parser=parse_flags)
