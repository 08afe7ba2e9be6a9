"""Every command-line entry point (absl flags and config_flags only) and the one place a user error becomes one line
(`app.guard`). The library (models, weights, data, methods, train, evaluators) never imports this package."""
