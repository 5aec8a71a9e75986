"""The errors that mean bad user input: the CLI prints them as one line, exit status 2.

`InputError` is the one type the CLI treats as the user's mistake (with `OSError` for a path
and `DecodeError` for a video): a flag, a config field, an annotation line, a model or layout
name, a value out of range. Code that checks what a user gave raises it (or a subclass), naming
the flag, field or file. Anything else, `ValueError` included (torch's, numpy's, an internal
check's), is a bug and keeps its traceback.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad user input; the message names the flag, field or file it came from. A `ValueError`
    too, so library callers that catch `ValueError` for bad arguments keep working."""


class ConfigError(InputError):
    """A bad configuration value or override; the message names the field."""
