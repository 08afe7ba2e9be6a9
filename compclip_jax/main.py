# `python -m compclip_jax.main`, kept for one release: the command is compclip_jax/cli/main.py (its docstring is
# this module's too: absl prints __main__'s docstring for --help).
from compclip_jax.cli.main import __doc__, run  # noqa: F401

if __name__ == "__main__":
  run()
