"""The HTTP bodies (pydantic v2), one module per API family: ``tei``, ``openai``, ``cohere``, ``vllm``,
``infinity``, ``batch``; what they share (inputs, options, ``RequestModel``) is in ``common``."""
