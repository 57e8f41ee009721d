"""EngineClient: both engines ``AsyncLLMEngine`` drives (this process's thread and the engine process's
client of ``wde serve --api-workers``) have every member of the seam (mypy checks the types; every server
suite runs over both)."""

from __future__ import annotations

import inspect

import pytest

from server.engine_link.client import RemoteEngineThread
from wde.entrypoints.engine_client import EngineClient
from wde.entrypoints.engine_thread import EngineThread

ATTRIBUTES = ("state", "info", "counts", "listeners", "forward_clock", "residency")  # set in __init__


def seam_members() -> set[str]:
    return {name for name in vars(EngineClient) if not name.startswith("_")} | set(
        EngineClient.__annotations__
    )


@pytest.mark.parametrize("client", [EngineThread, RemoteEngineThread])
def test_each_client_has_every_member_of_the_seam(client: type) -> None:
    methods = seam_members() - set(ATTRIBUTES)
    assert methods == {
        "start",
        "wait_until_ready",
        "wait_until_dead",
        "stop",
        "unavailable_reason",
        "add",
        "add_many",
        "abort",
    }
    for name in methods:
        assert callable(getattr(client, name)), name
        ours, theirs = (
            inspect.signature(getattr(EngineClient, name)),
            inspect.signature(getattr(client, name)),
        )
        assert list(ours.parameters) == list(theirs.parameters), name
    source = inspect.getsource(client.__init__) + inspect.getsource(client.__mro__[1].__init__)
    assert all(f"self.{name}" in source for name in ATTRIBUTES), client
