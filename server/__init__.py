"""wde's HTTP server: TEI- and OpenAI-compatible routes over an ``AsyncLLMEngine``.

Nothing here is imported by ``wde``; FastAPI is imported only by ``server.app`` and the routes, so
``wde bench`` (through ``server.cli``) runs without the server extra.
"""
