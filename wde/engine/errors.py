"""Errors of one request (its input, the caller's to fix, or its execution) and raising a call's first."""

from __future__ import annotations

from collections.abc import Sequence

from wde.outputs import ErrorOutput, RequestOutput


class InputTooLongError(ValueError):
    """An input is longer than max_model_len and its request asked not to truncate."""


class TaskNotSupportedError(ValueError):
    """The loaded model does not serve the operation asked for (e.g. embeddings from a cross-encoder)."""


class OutputNotSupportedError(TaskNotSupportedError):
    """The embedding model does not produce the output asked for (sparse from a dense-only model, a
    precision of other than dense output, chunked long inputs of a kind that cannot be averaged)."""


class RequestFailedError(RuntimeError):
    """An accepted request could not run for a reason other than its input (e.g. the forward pass failed)."""


def raise_for_errors(outputs: Sequence[RequestOutput]) -> None:
    """Raise the first failed input's error, named by position (bad input keeps its ValueError type)."""
    errors = [(index, output) for index, output in enumerate(outputs) if isinstance(output, ErrorOutput)]
    if not errors:
        return
    index, first = errors[0]
    more = f" ({len(errors) - 1} more inputs failed)" if len(errors) > 1 else ""
    message = f"inputs[{index}]: {first.error}{more}"
    error: Exception = RequestFailedError(message)
    if first.is_input_error and isinstance(first.error, (ValueError, TypeError)):
        try:
            error = type(first.error)(message)
        except Exception:  # an exception type that takes other arguments
            error = ValueError(message)
    raise error from first.error
