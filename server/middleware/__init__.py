"""Pure ASGI middlewares, outermost first: HttpMetricsMiddleware (every answer counted and logged),
CORSMiddleware (with --cors-allow-origins), DrainingCutoffMiddleware (503 for requests cut off by
--graceful-timeout), ApiKeyMiddleware (401), DrainingMiddleware (503 while draining), RequestBodyMiddleware
(413 over --payload-limit, 408 over --body-read-timeout; cancels the handler when the client disconnects),
AdmissionMiddleware (429 over --max-concurrent-requests), HeadAsGetMiddleware (HEAD on GET routes).
Pure ASGI rather than ``BaseHTTPMiddleware`` so cancellation reaches the handler and bodies are not copied
twice."""
