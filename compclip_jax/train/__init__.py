"""Training, for any method: the config's generic sections, the trainer's state (built in one place, abstract or
real), the jitted step, the loop, the workdir's run identity and checkpoints, the optimiser, shardings and metrics.
Nothing here names a method (compclip_jax/methods/ brings them as objects; docs/architecture.md)."""
