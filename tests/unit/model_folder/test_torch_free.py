"""The model-folder readers (``wde/model_folder/``) run without torch and without importing a family: reading
a folder's config.json, its sentence-transformers metadata and its ``ModelInfo`` (in a fresh interpreter, so
that nothing the rest of the suite imported hides an import)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

READ_THE_BUNDLED_FOLDER = """
import sys
from wde.engine_args import default_model_path
from wde.model_folder.model_info import read_hf_config, read_model_info
from wde.model_folder.registry import MODEL_REGISTRY, resolve_architecture
from wde.model_folder.st_metadata import read_st_metadata

path = default_model_path()
config = read_hf_config(path)
assert resolve_architecture(config["architectures"], path, config)[1].class_name == "BertModel"
assert read_st_metadata(path).pooling.method == "mean"
info = read_model_info(path, path)
assert info.model_entry.class_path == "wde.models.bert:BertModel", info.model_entry
for architecture, entry in MODEL_REGISTRY.items():  # every entry's hooks, on a config of its own names
    entry.reserved_positions(entry.standard_config({"max_position_embeddings": 512, "n_embd": 64}))
families = sorted(name for name in sys.modules if name == "wde.models" or name.startswith("wde.models."))
assert "torch" not in sys.modules, "the readers imported torch"
assert not families, f"the readers imported {families}"
print("torch-free")
"""


def test_reading_a_model_folder_imports_neither_torch_nor_a_family() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, "-c", READ_THE_BUNDLED_FOLDER],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "torch-free"
