# `python -m compclip_jax.prepare`, kept for one release: the command is compclip_jax/cli/prepare.py (its docstring is
# this module's too: absl prints __main__'s docstring for --help).
from compclip_jax.cli.prepare import __doc__, run  # noqa: F401

if __name__ == "__main__":
  run()
