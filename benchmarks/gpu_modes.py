"""GPU start-up time and throughput for each ``--cuda-graph-mode`` and each attention backend, on the bundled
model and on a BERT-base-sized random model (12 layers, hidden 768), written to a temporary directory.

    python -m benchmarks.gpu_modes --data ../shared/data/docs.jsonl

Prints one markdown table per model: engine start-up seconds (load + profile + start-up captures), tokens/s
of ``LLM.encode`` over the texts (median of repeats), and the graphs captured by the end.
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.dataset import load_texts

MODES = ("none", "eager", "lazy", "idle")
BASE_CONFIG = {
    "architectures": ["BertModel"],
    "model_type": "bert",
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "hidden_act": "gelu",
    "layer_norm_eps": 1e-12,
}


def write_bert_base(directory: Path, tokenizer_dir: Path) -> Path:
    """A randomly initialized BERT-base in HF layout, with the bundled model's tokenizer."""
    import torch
    from safetensors.torch import save_file

    from wde.layers.attention.backends.naive import NaiveBackend
    from wde.models.bert import BertModel

    config = {
        **BASE_CONFIG,
        "vocab_size": json.loads((tokenizer_dir / "config.json").read_text())["vocab_size"],
    }
    model = BertModel(config, NaiveBackend(12, 64))
    state = {}
    for name, tensor in model.state_dict().items():  # back to HF names: split the fused QKV
        if ".attention.qkv_proj." in name:
            prefix, kind = name.split(".attention.qkv_proj.")
            for part, chunk in zip(("query", "key", "value"), tensor.chunk(3), strict=True):
                state[f"{prefix}.attention.self.{part}.{kind}"] = chunk.contiguous()
        else:
            state[name.replace(".intermediate.", ".intermediate.dense.")] = tensor.contiguous()
    directory.mkdir(parents=True, exist_ok=True)
    save_file({k: v.to(torch.float16) for k, v in state.items()}, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps(config))
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (tokenizer_dir / name).exists():
            shutil.copy(tokenizer_dir / name, directory / name)
    return directory


def measure(
    model: str, texts: list[str], repeats: int, **engine_args: object
) -> tuple[float, float, list[int]]:
    """(start-up seconds, median tokens/s, buckets captured)."""
    import torch

    from wde import LLM

    torch.cuda.synchronize()
    start = time.perf_counter()
    llm = LLM(model, device="cuda", **engine_args)
    startup = time.perf_counter() - start
    num_tokens = sum(output.num_tokens for output in llm.encode(texts))  # warm-up (and lazy captures)
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        llm.encode(texts)
        seconds.append(time.perf_counter() - start)
    graphs = llm.engine.runner.cuda_graphs
    captured = sorted(graphs.graphs) if graphs is not None else []
    llm.engine.shutdown()
    del llm
    gc.collect()
    torch.cuda.empty_cache()
    return startup, num_tokens / statistics.median(seconds), captured


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default="../shared/data/docs.jsonl")
    parser.add_argument("--limit", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    args = parser.parse_args(argv)

    import torch

    from wde.engine_args import default_model_path
    from wde.layers.attention.selector import BACKENDS

    texts = load_texts(args.data, args.limit)
    dtype = getattr(torch, args.dtype)
    with tempfile.TemporaryDirectory() as scratch:
        models = {
            "all-MiniLM-L6-v2": default_model_path(),
            "BERT-base (random)": str(
                write_bert_base(Path(scratch) / "bert-base", Path(default_model_path()))
            ),
        }
        print(f"# {torch.cuda.get_device_name()}, {len(texts)} texts from {args.data}, {args.dtype}")
        for label, model in models.items():
            print(f"\n## {label}\n")
            print("| backend | cuda graph mode | start-up s | tokens/s | graphs captured |")
            print("|---|---|---|---|---|")
            for backend, backend_cls in BACKENDS.items():
                available, reason = backend_cls.is_available("cuda", dtype, 64 if "base" in label else 32)
                if not available:
                    print(f"| {backend} | - | - | - | skipped: {reason} |")
                    continue
                modes = MODES if backend_cls.supports_cuda_graphs else ("none",)
                for mode in modes:
                    startup, tokens_per_s, captured = measure(
                        model,
                        texts,
                        args.repeats,
                        dtype=args.dtype,
                        attention_backend=backend,
                        cuda_graph_mode=mode,
                    )
                    print(f"| {backend} | {mode} | {startup:.2f} | {tokens_per_s:,.0f} | {captured or '-'} |")


if __name__ == "__main__":
    main()
