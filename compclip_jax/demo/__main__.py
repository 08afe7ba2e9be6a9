# `python -m compclip_jax.demo`: the command is compclip_jax/cli/demo.py (absl prints __main__'s docstring for --help).
from compclip_jax.cli.demo import __doc__, run  # noqa: F401

if __name__ == "__main__":
  run()
