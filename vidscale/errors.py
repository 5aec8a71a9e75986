"""The error every layer raises for bad user input: the CLI prints it as one line, exit 2."""

from __future__ import annotations


class ConfigError(ValueError):
    """A bad configuration value or override; the message names the field."""
