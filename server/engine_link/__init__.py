"""The link between the API workers and the engine process of ``wde serve --api-workers N``: the engine
client (``client.py``: ``RemoteEngineThread``), the engine process (``engine_process.py``), the wire and its
message types (``messages.py``), the models' turns in the engine process (``model_turns.py``), the metrics
forwarded to it (``linked_metrics.py``) and the workers' shared in-flight counts (``in_flight.py``). The
processes are started by ``server/launch/``; nothing here imports the app, FastAPI or Starlette."""
