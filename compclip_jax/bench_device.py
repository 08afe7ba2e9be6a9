# `python -m compclip_jax.bench_device`, kept for one release: the command is compclip_jax/cli/bench_device.py
# (its docstring is this module's too: absl prints __main__'s docstring for --help).
from compclip_jax.cli.bench_device import __doc__, run  # noqa: F401

if __name__ == "__main__":
  run()
