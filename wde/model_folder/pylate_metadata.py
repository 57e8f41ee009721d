"""ColBERT folders saved by PyLate <= 3 (``"model_type": "ColBERT"`` in ``config_sentence_transformers.json``,
modules ``[Transformer, pylate Dense]``), read as sentence-transformers' ``MultiVectorEncoder`` converts them:

- ``query_prefix`` / ``document_prefix`` (e.g. ``[unused0]`` / ``[unused1]``, or ``[Q] `` / ``[D] ``) prepend
  the query / document prompts; a prefix the vocabulary has but splits into pieces is registered as a
  special token (the engine's tokenizer), so prepending it as text gives the token PyLate inserted;
- ``do_query_expansion`` (default on) pads queries with [MASK] to ``query_length`` (32 when unset), attended
  to only with ``attend_to_expansion_tokens``; documents are cut at ``document_length``;
- the token projection is the Dense module; vectors are L2-normalized; documents drop ``skiplist_words``
  (PyLate's default: the punctuation characters); similarity is MaxSim.
"""

from __future__ import annotations

import string
from typing import Any

from wde.config import MULTI_VECTOR_SIMILARITY_NAMES, MultiVectorConfig

PYLATE_MODEL_TYPE = "ColBERT"


def is_pylate_colbert(st_config: dict[str, Any]) -> bool:
    return st_config.get("model_type") == PYLATE_MODEL_TYPE


def apply_pylate_colbert(st_config: dict[str, Any], metadata: Any, config_path: str) -> None:
    """Complete ``metadata`` (a SentenceTransformerMetadata whose Dense made its ``multi_vector``) from the
    PyLate keys of ``config_sentence_transformers.json``."""
    multi_vector: MultiVectorConfig | None = metadata.multi_vector
    if multi_vector is None:
        raise ValueError(f"{config_path} says model_type ColBERT, but modules.json has no token Dense module")
    # 1. prefixes -> prompts (and the special tokens that keep them one piece)
    for prefix_key, prompt_name in (("query_prefix", "query"), ("document_prefix", "document")):
        prefix = st_config.get(prefix_key)
        if prefix:
            saved = metadata.prompts.get(prompt_name) or ""
            metadata.prompts[prompt_name] = prefix + saved.removeprefix(prefix)
            metadata.prefix_tokens.append(prefix)
    # 2. query expansion and lengths
    if st_config.get("do_query_expansion") is not False:
        attend = st_config.get("attend_to_expansion_tokens", st_config.get("attend_to_mask_tokens"))
        multi_vector.query_expansion_length = int(st_config.get("query_length") or 32)
        multi_vector.query_expansion_strategy = "fixed"
        multi_vector.query_expansion_attend = bool(attend)
    elif st_config.get("query_length"):
        multi_vector.query_length = int(st_config["query_length"])
    if st_config.get("document_length"):
        multi_vector.document_length = int(st_config["document_length"])
    # 3. normalized vectors, the skiplist on documents, MaxSim
    multi_vector.normalize = True
    skiplist = st_config.get("skiplist_words")
    metadata.skiplist_words = list(string.punctuation) if skiplist is None else list(skiplist)
    similarity = st_config.get("similarity_fn_name")
    multi_vector.similarity = similarity if similarity in MULTI_VECTOR_SIMILARITY_NAMES else "maxsim"
