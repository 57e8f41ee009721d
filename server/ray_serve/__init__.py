"""``wde serve --ray``: the same FastAPI app (every route, error shape and metric of ``wde serve``) served
by Ray Serve replicas. ``flags.py`` adds the command-line flags without importing Ray."""
