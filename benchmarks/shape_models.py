"""The model shapes of the CPU shapes matrix (``benchmarks.shapes``), each a sentence-transformers folder that
sentence-transformers, its ONNX / OpenVINO peers and wde all load:

- real weights: all-MiniLM-L6-v2 (bundled with wde) and all-mpnet-base-v2 (``benchmarks.real_weights``,
  fetched on request); their rows also get MRR@10 on the rerank set;
- random weights of published shapes, written once into ``.bench-cache/shapes/<name>/`` (a fixed seed, so
  a folder, and the peers' exports keyed by it, serve every later run): BERT-base and -large, bge-m3's
  XLM-R large encoder with the MiniLM vocabulary, a BERT-base cross-encoder, Qwen3-Embedding-0.6B and
  EmbeddingGemma-300m cut to 4 layers; tiny ones for ``--smoke``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.peers import REPO_ROOT
from benchmarks.random_bert import write_random_bert, write_random_cross_encoder, write_random_xlm_roberta
from benchmarks.random_decoder import write_random_decoder, write_random_gemma3
from benchmarks.real_weights import ST_MARKER, mpnet_path

SHAPES_DIR = REPO_ROOT / ".bench-cache" / "shapes"
CUT_LAYERS = 4  # the decoders' layers on a CPU

# (folder, tokenizer folder) -> the folder, written
Writer = Callable[[Path, Path], Path]


@dataclass(frozen=True)
class Shape:
    description: str  # the table's heading
    task: str = "embed"  # or "score": a cross-encoder, timed on (query, candidate) pairs
    write: Writer | None = None  # random weights
    locate: Callable[[], Path | None] | None = None  # real weights: the folder, or None when not there
    missing: str = ""  # what to do when locate answers None
    # the st-* peers' backends that can load it (benchmarks/peer_scripts/st_backend.py): ONNX Runtime's venv
    # (sentence-transformers 5.7) loads the encoders; OpenVINO's (6.2) also a decoder saved by 6.x
    peer_backends: tuple[str, ...] = ("onnx", "openvino")
    why_no_peer: str = ""  # for the backends it leaves out: one line

    @property
    def real_weights(self) -> bool:
        return self.locate is not None


class ShapeUnavailableError(RuntimeError):
    """The shape's folder is not there; the message says how to get it."""


def _bundled_minilm() -> Path:
    from wde.engine_args import default_model_path

    return Path(default_model_path())


def bert(description: str, size: str, write: Callable[..., Path] = write_random_bert) -> Shape:
    """A random BERT-sized encoder (``random_bert.BERT_SIZES``): BertModel, or ``write``'s architecture."""
    return Shape(description, write=lambda path, tokenizer: write(path, size, tokenizer))


def cross_encoder(description: str, size: str) -> Shape:
    """A random one-label BERT cross-encoder, timed on (query, candidate) pairs; the st-* peers load it as a
    ``CrossEncoder`` on their backends."""
    return Shape(
        description,
        task="score",
        write=lambda path, tokenizer: write_random_cross_encoder(path, size, tokenizer),
    )


NO_ONNX_DECODER = "sentence-transformers 5.7 (the ONNX peers' venv) cannot load a decoder saved by 6.x"
# measured in the OpenVINO venv (transformers 5.5): optimum-intel refuses to export Gemma3
NO_OPENVINO_GEMMA3 = "optimum-intel exports Gemma3 only under transformers <= 5.0"


def decoder(
    description: str,
    write: Callable[..., Path],
    shape: str,
    num_layers: int | None = None,
    no_openvino: str = "",
) -> Shape:
    """A random decoder embedder (``random_decoder``), cut to ``num_layers``; OpenVINO's st-* peers only,
    none where ``no_openvino`` says why optimum-intel cannot export the family."""
    peer_backends: tuple[str, ...] = () if no_openvino else ("openvino",)
    why = f"{NO_ONNX_DECODER}; {no_openvino}" if no_openvino else NO_ONNX_DECODER
    return Shape(
        description,
        write=lambda path, tokenizer: write(path, shape, tokenizer, num_layers=num_layers),
        peer_backends=peer_backends,
        why_no_peer=why,
    )


CUT = f"cut to {CUT_LAYERS} layers"
SHAPES: dict[str, Shape] = {
    "minilm": Shape("all-MiniLM-L6-v2 (real weights, bundled)", locate=_bundled_minilm),
    "mpnet": Shape(
        "all-mpnet-base-v2 (real weights)",
        locate=mpnet_path,
        missing="all-mpnet-base-v2 is not fetched: run `make bench-shapes-weights` or pass "
        "--fetch-real-weights",
    ),
    "bert-base": bert("BERT-base shape (random BertModel: 12 layers, hidden 768)", "base"),
    "bert-large": bert("BERT-large shape (random BertModel: 24 layers, hidden 1024)", "large"),
    "xlmr-large": bert(
        "XLM-R-large shape, bge-m3's encoder (random XLMRobertaModel: 24 layers, hidden 1024; vocabulary cut "
        "to MiniLM's 30,522; CLS pooling)",
        "large",
        write_random_xlm_roberta,
    ),
    "bert-base-ce": cross_encoder(
        "BERT-base cross-encoder (random BertForSequenceClassification, 1 label) on rerank pairs", "base"
    ),
    "qwen3-0.6b-4l": decoder(
        f"Qwen3-Embedding-0.6B shape {CUT} (random Qwen3Model; MiniLM tokenizer)",
        write_random_decoder,
        "qwen3-0.6b",
        CUT_LAYERS,
    ),
    "gemma3-300m-4l": decoder(
        f"EmbeddingGemma-300m shape {CUT} (random Gemma3TextModel; MiniLM tokenizer)",
        write_random_gemma3,
        "gemma3-300m",
        CUT_LAYERS,
        no_openvino=NO_OPENVINO_GEMMA3,
    ),
    # --smoke
    "bert-tiny": bert("tiny BERT (random: 2 layers, hidden 64)", "tiny"),
    "bert-tiny-ce": cross_encoder("tiny BERT cross-encoder (random: 2 layers, hidden 64)", "tiny"),
    "qwen3-tiny": decoder("tiny Qwen3 (random: 2 layers, hidden 64)", write_random_decoder, "qwen3-tiny"),
    "gemma3-tiny": decoder(
        "tiny Gemma3 (random: 2 layers, hidden 64)",
        write_random_gemma3,
        "gemma3-tiny",
        no_openvino=NO_OPENVINO_GEMMA3,
    ),
}
DEFAULT_SHAPES = (
    "minilm",
    "mpnet",
    "bert-base",
    "bert-large",
    "xlmr-large",
    "bert-base-ce",
    "qwen3-0.6b-4l",
    "gemma3-300m-4l",
)
SMOKE_SHAPES = ("bert-tiny", "bert-tiny-ce", "qwen3-tiny", "gemma3-tiny")


def shape_folder(name: str, root: Path = SHAPES_DIR) -> Path:
    """The sentence-transformers folder of shape ``name``: found (real weights; ``ShapeUnavailableError``
    saying how to fetch it when it is not there) or written once under ``root`` (random weights, through a
    ``.partial`` sibling renamed when complete)."""
    shape = SHAPES[name]
    if shape.locate is not None:
        if (found := shape.locate()) is None:
            raise ShapeUnavailableError(shape.missing)
        return found
    assert shape.write is not None
    folder = root / name
    if (folder / ST_MARKER).is_file():
        return folder
    import shutil

    partial = folder.with_name(name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    shape.write(partial, _bundled_minilm())
    partial.rename(folder)
    return folder
