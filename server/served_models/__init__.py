"""The served models: the registry that loads, holds and swaps them (``ModelRegistry.use``), the swap
policy, the memory estimate, the ``--models`` file and the model a request reached."""
