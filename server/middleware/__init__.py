"""The app's middlewares: ``RequestPipeline`` (``request_pipeline.py``: metrics and the access log, the drain
cutoff, the API key, draining, the request body's limits and the client's disconnect, admission, HEAD on GET
routes, ignored request fields; one pure-ASGI layer) and, with tracing on, ``TracingMiddleware`` outside it.
Pure ASGI rather than ``BaseHTTPMiddleware`` so cancellation reaches the handler and bodies are not copied
twice."""
