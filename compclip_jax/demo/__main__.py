# `python -m compclip_jax.demo` (the same as `python -m compclip_jax demo`): the command is demo/command.py (absl
# prints __main__'s docstring for --help).
from compclip_jax.demo.command import __doc__, run  # noqa: F401

if __name__ == "__main__":
  run()
