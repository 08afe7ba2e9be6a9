# `python -m compclip_jax.main`: the training command (the same as `python -m compclip_jax train`); its flags and
# docstring are compclip_jax/cli/main.py's (absl prints __main__'s docstring for --help).
from compclip_jax.cli.main import __doc__, run  # noqa: F401

if __name__ == "__main__":
  run()
