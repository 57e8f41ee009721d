"""The OpenAI Batch API for embeddings and rerank: ``/v1/files`` and ``/v1/batches``.

Everything lives on disk under ``--batch-dir`` (written atomically, so a restart finds it whole)::

    files/<file id>.jsonl          an uploaded input file, or a batch's output / error file
    files/<file id>.json           its OpenAI file object (written after the content)
    batches/<batch id>.json        the OpenAI batch object (status, request_counts, file ids, timestamps)
    batches/<batch id>.progress    one line per answered input line, appended as lines finish

``BatchService`` (the routes' entry) holds the stores and the ``BatchRunner``, an asyncio task that runs one
batch at a time: validating (the input lines are parsed; a malformed line is answered with an error), then
in_progress (a bounded window of lines in flight, each POSTed through the app's own route at batch
priority: ``line_dispatch``), then finalizing (output and error files written from the progress file in
line order), then completed. On start-up a batch left validating / in_progress / finalizing resumes: lines
already in its progress file are not run again.

Under ``--api-workers N`` API worker 0 runs the Batch API (``batch_link.py``: its Unix socket) and the others
forward its requests there (``batch_forwarder.py``, the last step of ``RequestPipeline``).
"""
