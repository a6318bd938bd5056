"""Errors the engine raises on purpose, importable without pulling in torch."""


class NonFiniteError(RuntimeError):
    """Training produced NaN or infinite gradients too many times in a row."""


class EnvCrashError(RuntimeError):
    """More environments crashed (raised in reset or step) than the run tolerates."""
