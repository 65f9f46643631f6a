"""Errors that the CLI turns into a one-line message and exit code 2."""

from __future__ import annotations

from collections.abc import Collection, Iterable

SHOWN_CHARS = 60  # an error line names the value, never a whole document


class InputError(ValueError):
    """Bad user input: a malformed workload, config, trace or flag. The message names the
    value and the fix."""


class ConfigError(InputError):
    """A configuration that vLLM's SchedulerConfig rejects. `rule` names the rule."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule


def refuse_unknown(keys: Iterable[object], known: Collection[object], unknown_what: str,
                   known_what: str) -> None:
    """Raise an InputError naming the first of `keys` (in str order) that `known` lacks:
    "`unknown_what` 'key'; `known_what`", e.g. "unknown workload key 'x'; known keys: ..."."""
    unknown = sorted(set(keys) - set(known), key=str)
    if unknown:
        raise InputError(f"{unknown_what} {shown(unknown[0])}; {known_what}")


def shown(value: object) -> str:
    """`repr(value)` for an error message: on one line and cut to SHOWN_CHARS characters,
    so that a huge or deeply nested value still gives a one-line error."""
    try:
        text = repr(value)
    except RecursionError:
        return f"a deeply nested {type(value).__name__}"
    except ValueError:  # an int beyond sys.get_int_max_str_digits()
        return f"a {type(value).__name__} too large to print"
    text = " ".join(text.split())
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."
