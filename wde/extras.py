"""Optional features and the pyproject extra that installs what each needs.

``pip install wde`` gives the library (``LLM.encode`` / ``score`` / ``rerank``) and ``wde embed``; a
feature whose packages come with an extra imports them only where it runs, and asked for without them it
fails with one line naming the extra (``pip install 'wde[server]'``). pyproject.toml's
``[project.optional-dependencies]`` is the list of what each extra installs; this module names which extra
a feature's module comes from.
"""

from __future__ import annotations

import importlib.util


class MissingExtraError(ModuleNotFoundError, ValueError):
    """A feature's package is not installed; the message names the extra that installs it. A ValueError
    too: a setting that asks for the feature is refused where the other bad settings are, in one line."""


def missing_extra_message(module: str, extra: str, feature: str) -> str:
    return f"{feature} needs {module}, which is not installed: pip install 'wde[{extra}]'"


def require(module: str, extra: str, feature: str) -> None:
    """Raise ``MissingExtraError`` naming ``extra`` when ``module`` is missing.

    ``feature``: what the user asked for, as they asked for it (``"--tokenizer-processes"``)."""
    if importlib.util.find_spec(module) is None:
        raise MissingExtraError(missing_extra_message(module, extra, feature), name=module)
