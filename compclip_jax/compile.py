# `python -m compclip_jax.compile`: the command is compclip_jax/cli/compile.py (its docstring is this module's too:
# absl prints __main__'s docstring for --help).
from compclip_jax.cli.compile import __doc__, run  # noqa: F401

if __name__ == "__main__":
  run()
