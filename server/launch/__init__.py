"""The launchers: ``wde serve``'s processes as they start and stop (the supervisor, the API workers, the
single-process draining server) and the uvicorn plumbing only they use (protocol class, transports,
options, start-up log)."""
