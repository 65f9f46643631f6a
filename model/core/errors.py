"""Errors that the CLI turns into a one-line message and exit code 2."""

from __future__ import annotations


class InputError(ValueError):
    """Bad user input: a malformed workload, config, trace or flag. The message names the
    value and the fix."""


class ConfigError(InputError):
    """A configuration that vLLM's SchedulerConfig rejects. `rule` names the rule."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule
