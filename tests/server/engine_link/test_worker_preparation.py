"""An API worker prepares the calls it sends together with the same options as one (one tokenizer call for
all their texts), and each call's requests are what preparing it alone gives; a call that fails validation
fails alone, with the wording (and input position) it has alone, and its group-mates still go."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence

import pytest

from server.engine_link.client import EngineLink, RemoteEngineThread
from tests.tiny_models import SEED, save_tiny_bert
from wde import EngineArgs
from wde.entrypoints.engine_thread import Call
from wde.inputs import PoolingParams
from wde.request import Request, RequestStatus


class Answers:
    """A ``CallSink``: the calls answered here, and the errors of those that failed."""

    def __init__(self) -> None:
        self.done: list[Call] = []
        self.errors: dict[int, BaseException] = {}

    def finished(self, calls: Sequence[Call]) -> None:
        self.done += calls

    def failed(self, call: Call, error: BaseException) -> None:
        self.errors[id(call)] = error


@pytest.fixture(scope="module")
def thread(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RemoteEngineThread]:
    path = save_tiny_bert(tmp_path_factory.mktemp("preparation"), seed=SEED + 53)
    engine_args = EngineArgs(model=str(path), device="cpu", max_model_len=16)
    with tempfile.TemporaryDirectory(prefix="wde-test-prepare-") as ipc_dir:  # no engine process behind it
        link = EngineLink("test0", ipc_dir, None)
        try:
            link.engine(0, engine_args, engine_args.create_engine_config()).start()  # makes the tokenizer
            yield link.threads[0]
        finally:
            link.close()


def call(texts: Sequence[object], params: PoolingParams, sink: Answers, name: str) -> Call:
    call = Call([f"{name}-{i}" for i in range(len(texts))], list(texts), params, None, None)
    call.sink = sink  # type: ignore[assignment]
    return call


def ids(requests: list[Request] | None) -> list[tuple[str, list[int] | None, RequestStatus]]:
    assert requests is not None
    return [(r.request_id, None if r.token_ids is None else list(r.token_ids), r.status) for r in requests]


def test_calls_prepared_together_equal_each_prepared_alone(thread: RemoteEngineThread) -> None:
    sink = Answers()
    plain, short = PoolingParams(), PoolingParams(max_input_tokens=4)
    too_long = " ".join(["word"] * 40)  # over max_model_len 16 with truncation off: fails alone, here
    calls = [
        call(["a first text"], plain, sink, "a"),
        call(["a second text", "and a third"], plain, sink, "b"),
        call(["one with fewer tokens kept"], short, sink, "c"),
        call([], plain, sink, "d"),
        call([{"prompt": too_long}], PoolingParams(truncate=False), sink, "e"),
    ]
    together = thread._prepare_together(calls)
    assert [c for c, _ in together] == calls
    for each, requests in together:
        alone = thread._prepare_one(each.request_ids, each.prompts, each.params)
        assert ids(requests) == ids(alone)
    assert ids(together[3][1]) == []
    assert together[4][1][0].status == RequestStatus.FAILED  # type: ignore[index]
    assert not sink.errors


def test_a_call_that_fails_validation_fails_alone_with_its_own_wording(thread: RemoteEngineThread) -> None:
    sink = Answers()
    params = PoolingParams()
    good = call(["a good text"], params, sink, "good")
    bad = call(["fine", 123], params, sink, "bad")  # position 1 of its own call, not of the group
    other = call(["another good text"], params, sink, "other")
    together = dict((id(c), requests) for c, requests in thread._prepare_together([good, bad, other]))
    assert together[id(bad)] is None
    error = sink.errors[id(bad)]
    assert isinstance(error, TypeError) and str(error).startswith("inputs[1]: expected a str"), error
    for each in (good, other):
        assert ids(together[id(each)]) == ids(thread._prepare_one(each.request_ids, each.prompts, params))
    assert set(sink.errors) == {id(bad)}


def test_a_group_is_one_tokenizer_call(thread: RemoteEngineThread, monkeypatch: pytest.MonkeyPatch) -> None:
    preparer = thread._preparer
    assert preparer is not None
    seen: list[int] = []
    prepare = preparer.prepare

    def counting(
        request_ids: Sequence[str], prompts: Sequence[object], params: PoolingParams
    ) -> list[Request]:
        seen.append(len(prompts))
        return prepare(request_ids, prompts, params)

    monkeypatch.setattr(preparer, "prepare", counting)
    sink = Answers()
    thread._prepare_together([call([f"text {i}"], PoolingParams(), sink, f"q{i}") for i in range(7)])
    assert seen == [7]


def test_large_calls_path_is_unchanged(thread: RemoteEngineThread) -> None:
    """The preparing thread's one call goes through the same code (``_prepare``)."""
    from server.engine_link.client import _Outgoing

    sink = Answers()
    one = call(["a large call, in the test a small one"], PoolingParams(), sink, "large")
    outgoing = _Outgoing()
    sent = thread._prepare(one, outgoing)
    assert sent is not None and sent.positions == [0] and len(outgoing.calls) == 1
