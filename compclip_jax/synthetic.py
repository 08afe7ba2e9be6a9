"""`python -m compclip_jax.synthetic`, kept for one release: the command is compclip_jax/cli/synthetic.py."""
from compclip_jax.cli.synthetic import run

if __name__ == "__main__":
  run()
