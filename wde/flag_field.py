"""``flag(default, help=..., choices=...)``: a dataclass field that carries its command-line help and choices.

A config class (``EngineArgs``, ``server.settings.ServerSettings``) is then the one place a knob is described:
``wde``'s parser builds each ``--flag`` from the field (``flag_help`` / ``flag_choices``), as vLLM's config
docstrings feed its CLI. A test checks that every field of those classes has help.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import Field, field
from typing import Any

HELP, CHOICES = "help", "choices"


def flag(default: Any, *, help: str, choices: Sequence[str] | None = None) -> Any:
    """A field with ``default``, described by ``help`` (one line of ``--help``); ``choices``: the values
    the flag accepts (None: any)."""
    metadata = {HELP: help, CHOICES: None if choices is None else tuple(choices)}
    return field(default=default, metadata=metadata)


def flag_help(config_field: Field[Any]) -> str | None:
    """The field's help (None for a field not made by ``flag``)."""
    return config_field.metadata.get(HELP)


def flag_choices(config_field: Field[Any]) -> tuple[str, ...] | None:
    return config_field.metadata.get(CHOICES)
