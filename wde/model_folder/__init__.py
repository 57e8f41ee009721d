"""What a model folder says about itself, read before any model is built and without torch: config.json and
the architecture's registry entry (``registry.py``: each class by name, with the facts the readers need),
the weight and tokenizer files, sentence-transformers and PyLate metadata, the served outputs, the Hub
resolution, and the ``ModelInfo`` of it all (``model_info.read_model_info``). Two files only torch reads are
the exceptions, imported where they are read: BGE-M3's ``colbert_linear.pt`` (its shape) and a Jina v3
``pytorch_model*.bin`` (its tensor names; a safetensors checkpoint's come from its header)."""
