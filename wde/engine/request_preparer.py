"""``RequestPreparer``: what an engine does to a call before it queues it (validate, tokenize), done by the
process that received the call. ``wde serve --api-workers N``'s API workers prepare their requests and
send the engine process ready ones (token ids as arrays), so that its one loop neither validates nor
tokenizes; the engine then queues them with ``LLMEngine.add_prepared``.

    preparer = RequestPreparer(model_config, tokenizer)
    requests = preparer.prepare(request_ids, prompts, params)   # raises for a bad call, as add_requests
    ready = [r for r in requests if r.status != RequestStatus.FAILED]   # the others carry their error
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from wde.config import ModelConfig
from wde.engine.workflow import get_workflow
from wde.inputs import PoolingParams
from wde.request import Request
from wde.tokenizer import Tokenizer


class RequestPreparer:
    def __init__(self, model_config: ModelConfig, tokenizer: Tokenizer) -> None:
        """``tokenizer``: the engine's own kind (truncating at max_model_len: ``Tokenizer.from_pretrained``
        with the model config's values)."""
        workflow = get_workflow(model_config.task)
        self.tokenizer = tokenizer
        self.input_processor = workflow.input_processor(model_config)
        self.request_processor = workflow.request_processor(model_config, tokenizer, None)

    def prepare(
        self, request_ids: Sequence[str], prompts: Sequence[Any], params: PoolingParams
    ) -> list[Request]:
        """The call's requests, each ready (tokenized) or failed alone (too long with truncation off, refused
        by the tokenizer); raises the InputProcessor's TypeError / ValueError for a bad call."""
        requests = self.input_processor.process(request_ids, prompts, params)
        self.request_processor.prepare_all(requests)
        return requests
