"""Benchmarks of wde against sentence-transformers and peer engines (run from the repository root:
``python -m benchmarks.offline``, or ``wde bench``); never imported by ``wde``."""
