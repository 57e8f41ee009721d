"""One request's life in the engine: queued -> tokenized -> scheduled -> finished (or failed/aborted)."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from wde.inputs import PoolingParams


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    ABORTED = "aborted"

    @property
    def is_finished(self) -> bool:
        return self in (RequestStatus.FINISHED, RequestStatus.FAILED, RequestStatus.ABORTED)


@dataclass(eq=False)
class Request:
    request_id: str
    # Exactly one of text / text_pair / token_ids is set by the InputProcessor.
    text: str | None = None
    text_pair: tuple[str, str] | None = None
    token_ids: list[int] | None = None
    token_type_ids: list[int] | None = None
    params: PoolingParams = field(default_factory=PoolingParams)
    truncate: bool = True
    arrival_time: float = field(default_factory=time.monotonic)
    scheduled_time: float | None = None
    status: RequestStatus = RequestStatus.WAITING
    error: Exception | None = None
    truncated: bool = False  # cut to max_model_len

    @property
    def is_tokenized(self) -> bool:
        return self.token_ids is not None

    @property
    def num_tokens(self) -> int:
        if self.token_ids is None:
            raise RuntimeError(f"request {self.request_id} is not tokenized yet")
        return len(self.token_ids)

    def fail(self, error: Exception) -> None:
        self.status = RequestStatus.FAILED
        self.error = error
