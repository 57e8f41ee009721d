"""Pure ASGI middlewares, outermost first: HttpMetricsMiddleware (every answer counted), ApiKeyMiddleware
(401), AdmissionMiddleware (503 draining, 429 over --max-concurrent-requests), RequestBodyMiddleware (413
over --payload-limit; cancels the handler when the client disconnects). Pure ASGI rather than
``BaseHTTPMiddleware`` so cancellation reaches the handler and bodies are not copied twice."""
