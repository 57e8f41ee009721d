"""wde's HTTP server: TEI- and OpenAI-compatible routes over an ``AsyncLLMEngine``.

Nothing here is imported by ``wde``; FastAPI is imported only by ``server.app`` and what it builds, so
``wde bench`` (through ``server.cli``) runs without the server extra. The folders go by role, each floor
importing only those below (``tests/unit/test_layering.py``'s ``SERVER_FLOORS``; docs/architecture.md draws
them): ``cli.py``; ``launch/`` and ``ray_serve/`` (the processes); ``app.py``, ``openapi.py``,
``middleware/``, ``routes/``; ``batches/`` (the Batch API); ``app_state.py``; ``engine_link/`` (engine client,
engine process, wire); ``served_models/``; ``observability/``; ``process/`` (what each process sets up);
``protocols/`` (the bodies, one module per API family); errors, answers, doors, settings.
"""
