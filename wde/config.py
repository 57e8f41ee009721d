"""Engine configuration: stdlib dataclasses, each validated by one ``verify()``.

``EngineArgs`` (in ``engine_args.py``) is the single user-facing set of knobs; it builds these.
Nothing here imports torch: dtypes are kept as names and resolved by the model runner.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from wde.extras import require
from wde.output_kinds import OUTPUT_KINDS

# "fast": the fastest dtype the device computes natively (the platform's ``fast_dtype``; CPU: bfloat16 with
# AVX-512-BF16 or AMX, else float32); "auto": float32 on CPU, float16 on CUDA
DTYPE_NAMES = ("auto", "fast", "float32", "bfloat16", "float16")
RESOLVED_DTYPE_NAMES = DTYPE_NAMES[2:]
DEVICE_NAMES = ("auto", "cpu", "cuda")
EXECUTOR_NAMES = ("sync", "async")
TASK_NAMES = ("auto", "embed", "score")
POOLING_METHOD_NAMES = ("cls", "mean", "max", "last")
SCORE_ACTIVATION_NAMES = ("sigmoid", "softmax", "tanh", "identity")
PAIR_TRUNCATION_NAMES = ("longest_first", "only_second")
CUDA_GRAPH_MODE_NAMES = ("none", "eager", "lazy", "idle")
DENSE_ACTIVATION_NAMES = ("identity", "tanh", "sigmoid", "relu", "gelu")
SPARSE_METHOD_NAMES = ("splade", "token_weights")  # masked-LM logits (SPLADE); one weight per token (BGE-M3)
SPARSE_POOLING_NAMES = ("max", "sum")  # sentence-transformers' SpladePooling pooling_strategy
SPARSE_ACTIVATION_NAMES = ("relu", "log1p_relu")  # SpladePooling activation_function
SPARSE_SIMILARITY_NAMES = ("dot", "cosine")  # SparseEncoder's similarity_fn_name that wde scores with
MULTI_VECTOR_SIMILARITY_NAMES = ("maxsim", "meanmaxsim")  # MultiVectorEncoder's similarity_fn_name
LONG_INPUT_MODE_NAMES = ("truncate", "error", "chunk")  # an input over max_model_len: cut, refused, windows
CHUNK_SCORE_NAMES = ("max", "mean", "first")  # a chunked document's score from its windows' scores
# long_input chunk: windows of one call (about one 1,000,000-character text at 256 tokens a window)
DEFAULT_LONG_INPUT_MAX_WINDOWS = 1024
PRECISION_NAMES = ("float32", "int8", "uint8", "binary", "ubinary")  # quantized dense outputs
INPUT_TYPE_NAMES = ("query", "document")  # the side of a late-interaction model a text is encoded on
QUERY_EXPANSION_STRATEGY_NAMES = ("fixed", "min")  # sentence-transformers' query_expansion["strategy"]
# Post-load weight quantization methods (wde.layers.quantization.quantize.QUANTIZERS implements them).
QUANTIZATION_NAMES = ("int8", "fp8")
# Attention backends besides "auto" (wde.layers.attention.selector.BACKENDS implements them).
ATTENTION_BACKEND_NAMES = ("flash_attn", "xformers", "torch_varlen", "varlen_cpu", "torch_sdpa", "naive")


@dataclass
class PoolingConfig:
    """How token states become one vector: from sentence-transformers metadata or defaults."""

    method: str = "cls"
    normalize: bool = False

    def verify(self) -> None:
        if self.method not in POOLING_METHOD_NAMES:
            raise ValueError(f"pooling method {self.method!r} is not one of {POOLING_METHOD_NAMES}")


@dataclass
class DenseConfig:
    """One sentence-transformers ``Dense`` module after pooling: ``activation(pooled @ weight.T + bias)``."""

    path: str  # the module's folder: config.json + model.safetensors (or pytorch_model.bin)
    in_features: int
    out_features: int
    bias: bool = True
    activation: str = "tanh"

    def verify(self) -> None:
        if self.activation not in DENSE_ACTIVATION_NAMES:
            raise ValueError(
                f"{self.path}: Dense activation {self.activation!r} is not one of {DENSE_ACTIVATION_NAMES}"
            )


@dataclass
class SparseConfig:
    """Vocabulary weights per text. ``splade``: ``log(1 + relu(mlm_logits))`` (once more log1p for
    ``log1p_relu``) pooled over each text's tokens by ``pooling``. ``token_weights`` (BGE-M3): one weight
    per token, ``relu(linear(hidden))`` from ``weights_path`` (a ``sparse_linear.pt`` state dict), the
    largest per repeated token id, ``skip_token_ids`` (special tokens) dropped. ``max_active_dims`` keeps
    the largest weights only (None: all non-zero ones)."""

    pooling: str = "max"
    activation: str = "relu"
    max_active_dims: int | None = None
    similarity: str = "dot"  # how LLM.score / rerank compare two sparse vectors (SparseEncoder.similarity)
    method: str = "splade"
    weights_path: str | None = None
    skip_token_ids: tuple[int, ...] = ()

    def verify(self) -> None:
        if self.method not in SPARSE_METHOD_NAMES:
            raise ValueError(f"sparse method {self.method!r} is not one of {SPARSE_METHOD_NAMES}")
        if self.method == "token_weights" and self.weights_path is None:
            raise ValueError("token_weights sparse output needs weights_path (the sparse_linear.pt file)")
        if self.pooling not in SPARSE_POOLING_NAMES:
            raise ValueError(
                f"SpladePooling pooling_strategy {self.pooling!r} is not one of {SPARSE_POOLING_NAMES}"
            )
        if self.activation not in SPARSE_ACTIVATION_NAMES:
            raise ValueError(
                f"SpladePooling activation_function {self.activation!r} is not one of "
                f"{SPARSE_ACTIVATION_NAMES}"
            )
        if self.max_active_dims is not None and self.max_active_dims < 1:
            raise ValueError(f"max_active_dims ({self.max_active_dims}) must be >= 1")
        if self.similarity not in SPARSE_SIMILARITY_NAMES:
            raise ValueError(
                f"similarity_fn_name {self.similarity!r} is not one of {SPARSE_SIMILARITY_NAMES} for sparse "
                "scoring; edit config_sentence_transformers.json"
            )


@dataclass
class MultiVectorConfig:
    """One vector per token (late interaction): the final hidden states, projected by ``projection`` (a
    sentence-transformers Dense folder, or BGE-M3's ``colbert_linear.pt`` file), then L2-normalized.

    ``skip_first``: the first token's vector is left out (BGE-M3's [CLS]). ``skiplist_ids``: tokens left
    out of a document's vectors (and of a query's with ``skiplist_queries``), as MultiVectorMask does.
    A query (``input_type="query"``) is cut at ``query_length`` tokens and, with ``query_expansion_length``,
    padded with ``query_expansion_token_id`` up to that many tokens (ColBERT's query augmentation:
    strategy ``fixed`` cuts every query to that length first, ``min`` only pads shorter ones; the other
    tokens attend to the expansion tokens only with ``query_expansion_attend``); a document is cut at
    ``document_length``."""

    projection: DenseConfig | None = None
    normalize: bool = True
    skip_first: bool = False
    skiplist_ids: tuple[int, ...] = ()
    skiplist_queries: bool = False
    query_length: int | None = None
    document_length: int | None = None
    query_expansion_length: int | None = None
    query_expansion_token_id: int | None = None
    query_expansion_strategy: str = "fixed"  # fixed: every query is that long; min: at least that long
    query_expansion_attend: bool = False  # whether the other tokens attend to the expansion tokens
    similarity: str = "maxsim"  # maxsim: sum over query tokens; meanmaxsim: divided by their number

    def verify(self) -> None:
        if self.projection is not None:
            self.projection.verify()
        if self.similarity not in MULTI_VECTOR_SIMILARITY_NAMES:
            raise ValueError(
                f"similarity_fn_name {self.similarity!r} is not one of {MULTI_VECTOR_SIMILARITY_NAMES} for "
                "multi-vector scoring; edit config_sentence_transformers.json"
            )
        for name in ("query_length", "document_length", "query_expansion_length"):
            value = getattr(self, name)
            if value is not None and value < 2:
                raise ValueError(f"{name} ({value}) must be >= 2 (room for the special tokens)")
        if (self.query_expansion_length is None) != (self.query_expansion_token_id is None):
            raise ValueError("query expansion needs both its length and its token id")
        if self.query_expansion_strategy not in QUERY_EXPANSION_STRATEGY_NAMES:
            raise ValueError(
                f"query_expansion strategy {self.query_expansion_strategy!r} is not one of "
                f"{QUERY_EXPANSION_STRATEGY_NAMES}"
            )

    @property
    def hides_expansion_tokens(self) -> bool:
        """Queries carry expansion tokens the other tokens do not attend to (the attention hides them)."""
        return self.query_expansion_length is not None and not self.query_expansion_attend

    @property
    def size(self) -> int | None:
        """The size of one token vector after the projection (None: the model's hidden size)."""
        return self.projection.out_features if self.projection is not None else None


NO_ADAPTER = -1  # a token's adapter index when it runs with the base weights (wde.layers.lora)


@dataclass(frozen=True)
class TaskAdapters:
    """A checkpoint's LoRA task adapters (Jina v3's ``lora_adaptations``, stacked in its weights in this
    order). A request runs with the one its ``prompt_name`` names (sentence-transformers' Jina v3 prompts
    are named after the tasks), else with ``default`` (config.json's ``default_task``; None: the base
    weights)."""

    names: tuple[str, ...]
    default: str | None = None

    def chosen(self, prompt_name: str | None) -> str | None:
        """The adapter a request with this ``prompt_name`` runs with (None: the base weights)."""
        return prompt_name if prompt_name in self.names else self.default

    def index(self, prompt_name: str | None) -> int:
        """``chosen``'s position in ``names``, or NO_ADAPTER."""
        chosen = self.chosen(prompt_name)
        return NO_ADAPTER if chosen is None else self.names.index(chosen)


@dataclass
class ModelConfig:
    model: str
    tokenizer: str
    dtype: str
    architecture: str
    hf_config: dict[str, Any]
    max_model_len: int
    truncate: bool = True
    task: str = "embed"
    pooling: PoolingConfig = field(default_factory=PoolingConfig)
    # sentence-transformers Dense modules applied after pooling, in order (EmbeddingGemma: 768->3072->768)
    dense_layers: list[DenseConfig] = field(default_factory=list)
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    served_model_name: str | None = None
    model_revision: str | None = None  # the Hub commit served (a model by Hub id); None: a local folder
    # score task: activation on the classifier's logits, and how an over-long pair is cut
    score_activation: str = "sigmoid"
    pair_truncation: str = "longest_first"
    # score task of an LLM reranker: (query, document) -> one text by str.format(instruction=, query=,
    # document=); the text after {document} is kept when an over-long input is cut. None: a tokenizer pair.
    pair_template: str | None = None
    pair_instruction: str | None = None  # the {instruction} unless a request names its own
    # an input over max_model_len unless a request says otherwise: "truncate", "error" or "chunk" (windows
    # of max_model_len overlapping by long_input_overlap tokens, aggregated; wde/entrypoints/long_inputs.py)
    long_input: str = "truncate"
    long_input_overlap: int = 0
    long_input_max_windows: int = DEFAULT_LONG_INPUT_MAX_WINDOWS  # chunk: windows of one call, at most
    # None: the checkpoint's weights as they are; "int8": int8 block linears (CPU, float32 only)
    quantization: str | None = None
    # embed task: the output kinds served (wde.output_kinds), the first is a request's default; the
    # configuration of the sparse and multi-vector heads when served
    outputs: tuple[str, ...] = ("dense",)
    sparse: SparseConfig | None = None
    multi_vector: MultiVectorConfig | None = None
    # tokens the tokenizer must keep whole (a PyLate ColBERT's [unused0] query prefix): added as special
    added_special_tokens: tuple[str, ...] = ()
    # rows of the position table no token can use (the registry entry's ``ModelEntry.reserved_positions``)
    num_reserved_positions: int = 0
    # LoRA task adapters a request picks by its prompt_name (``ModelEntry.task_adapters``); None: none
    task_adapters: TaskAdapters | None = None

    @property
    def max_position_embeddings(self) -> int:
        return int(self.hf_config.get("max_position_embeddings", 512))

    @property
    def max_positions(self) -> int:
        """The longest input the position table allows."""
        return max_positions(self.hf_config, self.num_reserved_positions)

    @property
    def vocab_size(self) -> int:
        return int(self.hf_config["vocab_size"])

    @property
    def hidden_size(self) -> int:
        return int(config_value(self.hf_config, "hidden_size", "dim", "d_model"))

    @property
    def embedding_size(self) -> int:
        """The size of an embedding before Matryoshka truncation: the last Dense module's output, else the
        hidden size."""
        return self.dense_layers[-1].out_features if self.dense_layers else self.hidden_size

    @property
    def intermediate_size(self) -> int:
        return int(config_value(self.hf_config, "intermediate_size", "hidden_dim", "d_ff"))

    @property
    def num_labels(self) -> int:
        return num_labels(self.hf_config)

    @property
    def has_dense_output(self) -> bool:
        """An embedding model with dense vectors among its outputs (not a cross-encoder, not SPLADE alone)."""
        return self.task == "embed" and "dense" in self.outputs

    def verify(self) -> None:
        if self.dtype not in RESOLVED_DTYPE_NAMES:
            raise ValueError(
                f"dtype {self.dtype!r} is not one of {RESOLVED_DTYPE_NAMES} (after resolving 'auto' / 'fast')"
            )
        if self.task not in TASK_NAMES[1:]:
            raise ValueError(f"task {self.task!r} is not one of {TASK_NAMES[1:]}")
        if self.max_model_len < 1:
            raise ValueError(f"max_model_len ({self.max_model_len}) must be >= 1")
        limit = self.max_positions
        if self.max_model_len > limit:
            raise ValueError(
                f"max_model_len ({self.max_model_len}) is larger than the model's position table "
                f"({limit} usable positions from max_position_embeddings="
                f"{self.max_position_embeddings}); pass --max-model-len {limit} or less"
            )
        if self.score_activation not in SCORE_ACTIVATION_NAMES:
            raise ValueError(
                f"score_activation {self.score_activation!r} is not one of {SCORE_ACTIVATION_NAMES}"
            )
        if self.pair_truncation not in PAIR_TRUNCATION_NAMES:
            raise ValueError(
                f"pair_truncation {self.pair_truncation!r} is not one of {PAIR_TRUNCATION_NAMES}"
            )
        if self.default_prompt_name is not None and self.default_prompt_name not in self.prompts:
            raise ValueError(
                f"default_prompt_name {self.default_prompt_name!r} is not among the model's prompts "
                f"{sorted(self.prompts)}"
            )
        if self.long_input not in LONG_INPUT_MODE_NAMES:
            raise ValueError(f"long_input {self.long_input!r} is not one of {LONG_INPUT_MODE_NAMES}")
        if not 0 <= self.long_input_overlap < self.max_model_len // 2:
            raise ValueError(
                f"long_input_overlap ({self.long_input_overlap}) must be >= 0 and less than half of "
                f"max_model_len ({self.max_model_len})"
            )
        if isinstance(self.long_input_max_windows, bool) or self.long_input_max_windows < 1:
            raise ValueError(f"long_input_max_windows must be >= 1, got {self.long_input_max_windows!r}")
        if self.quantization is not None and self.quantization not in QUANTIZATION_NAMES:
            raise ValueError(f"quantization {self.quantization!r} is not one of {QUANTIZATION_NAMES}")
        self.pooling.verify()
        self._verify_dense_layers()
        self._verify_outputs()

    def _verify_outputs(self) -> None:
        unknown = [kind for kind in self.outputs if kind not in OUTPUT_KINDS]
        if not self.outputs or unknown:
            raise ValueError(f"outputs {list(self.outputs)} must be one or more of {list(OUTPUT_KINDS)}")
        expansion = self.multi_vector.query_expansion_length if self.multi_vector else None
        if expansion is not None and expansion > self.max_model_len:
            raise ValueError(
                f"query_expansion length ({expansion}) is longer than max_model_len ({self.max_model_len})"
            )
        for kind, config in (("sparse", self.sparse), ("multi_vector", self.multi_vector)):
            if (kind in self.outputs) != (config is not None):
                raise ValueError(f"a model serves {kind} output exactly when it has its {kind} configuration")
            if config is not None:
                config.verify()

    def _verify_dense_layers(self) -> None:
        size, source = self.hidden_size, "the model's hidden size"
        for dense in self.dense_layers:
            dense.verify()
            if dense.in_features != size:
                raise ValueError(
                    f"{dense.path}: Dense in_features ({dense.in_features}) does not match {source} "
                    f"({size}); the sentence-transformers modules do not fit this model"
                )
            size, source = dense.out_features, f"the out_features of {dense.path}"


@dataclass
class SchedulerConfig:
    # None: "auto", sized by the model runner's profile run (``runner.initialize()`` returns it, and the
    # engine runs with ``with_budget``'s copy); see wde/worker/memory_budget.py.
    max_num_batched_tokens: int | None
    max_num_seqs: int
    # How many queued requests the lazy RequestProcessor looks at (0: two steps' worth of sequences): the
    # first half is what the next steps take, the second half is tokenized ahead of need.
    max_num_lookahead: int = 0
    budget_reason: str = "set explicitly"  # why max_num_batched_tokens is what it is (logged, tested)
    # The engine loop's hold before a step for the clients the last step answered (0: off); see
    # wde/engine/batch_forming.py.
    max_batch_wait_seconds: float = 0.0
    # threads of the engine's TokenizerPool (wde/engine/tokenizer_pool.py); 0: tokenize on the engine thread
    tokenizer_workers: int = 0
    # processes that tokenize instead of the threads (wde/engine/tokenizer_processes.py); 0: none
    tokenizer_processes: int = 0

    def __post_init__(self) -> None:
        if self.max_num_lookahead == 0:
            self.max_num_lookahead = 2 * self.max_num_seqs

    def with_budget(self, max_num_batched_tokens: int, reason: str) -> SchedulerConfig:
        """A copy with the token budget the runner chose (this one stays as configured)."""
        return replace(self, max_num_batched_tokens=max_num_batched_tokens, budget_reason=reason)

    def verify(self) -> None:
        if self.max_num_batched_tokens is not None and self.max_num_batched_tokens < 1:
            raise ValueError(f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= 1")
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs ({self.max_num_seqs}) must be >= 1")
        if self.max_num_lookahead < 1:
            raise ValueError(f"max_num_lookahead ({self.max_num_lookahead}) must be >= 1")
        if self.tokenizer_workers < 0:
            raise ValueError(f"tokenizer_workers ({self.tokenizer_workers}) must be >= 0 (0: no threads)")
        if self.tokenizer_processes < 0:
            raise ValueError(
                f"tokenizer_processes ({self.tokenizer_processes}) must be >= 0 (0: tokenize in this process)"
            )
        if self.tokenizer_processes > 0:  # they talk to the engine over ZMQ
            require("zmq", "server", "tokenizer_processes > 0 (--tokenizer-processes)")
        if self.max_batch_wait_seconds < 0:
            raise ValueError(f"max_batch_wait_ms ({self.max_batch_wait_seconds * 1e3:g}) must be >= 0")


@dataclass
class DeviceConfig:
    """The resolved device knobs; each means what the ``EngineArgs`` field of its name says (its help)."""

    device: str  # "cpu" or "cuda" ("auto" resolved)
    attention_backend: str = "auto"
    executor: str = "sync"  # resolved: "auto" is the platform's choice
    gpu_memory_utilization: float = 0.3  # the default leaves most of a GPU to other work
    cuda_graph_mode: str = "lazy"
    cuda_graph_buckets: list[int] | None = None  # None: wde/worker/cuda_graphs.default_buckets
    compile_model: bool = False

    def verify(self) -> None:
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization ({self.gpu_memory_utilization}) must be in (0, 1]")
        if self.cuda_graph_mode not in CUDA_GRAPH_MODE_NAMES:
            raise ValueError(
                f"cuda_graph_mode {self.cuda_graph_mode!r} is not one of {CUDA_GRAPH_MODE_NAMES}"
            )
        if self.device not in DEVICE_NAMES[1:]:
            raise ValueError(
                f"device {self.device!r} is not one of {DEVICE_NAMES[1:]} (after resolving 'auto')"
            )
        if self.executor not in EXECUTOR_NAMES:
            raise ValueError(f"executor {self.executor!r} is not one of {EXECUTOR_NAMES}")


@dataclass
class EngineConfig:
    model_config: ModelConfig
    scheduler_config: SchedulerConfig
    device_config: DeviceConfig

    def verify(self) -> None:
        self.model_config.verify()
        self.scheduler_config.verify()
        self.device_config.verify()
        if self.device_config.device == "cpu" and self.model_config.dtype == "float16":
            raise ValueError(
                "dtype 'float16' on device 'cpu' is slow and inexact on CPU; "
                "pass --dtype bfloat16 or --dtype float32"
            )
        self._verify_quantization()

    def _verify_quantization(self) -> None:
        method, dtype = self.model_config.quantization, self.model_config.dtype
        device = self.device_config.device
        if method == "int8" and device != "cpu":
            raise ValueError(
                f"quantization 'int8' runs on CPU only (device {device!r}); on CUDA use --dtype float16 or "
                "bfloat16, or pass --device cpu"
            )
        if method == "int8" and dtype != "float32":
            raise ValueError(
                f"quantization 'int8' computes in float32 between its int8 matmuls; dtype {dtype!r} is not "
                "supported with it: pass --dtype float32 (the CPU default)"
            )
        if method == "fp8" and device != "cuda":
            raise ValueError(
                f"quantization 'fp8' runs on GPUs with FP8 matrix units only (device {device!r}); on the CPU "
                "use --quantization int8"
            )
        if method == "fp8" and dtype not in ("float16", "bfloat16"):
            raise ValueError(
                f"quantization 'fp8' computes in 16 bits between its float8 matmuls; dtype {dtype!r} is not "
                "supported with it: pass --dtype float16 or bfloat16"
            )


def max_positions(hf_config: dict[str, Any], num_reserved_positions: int = 0) -> int:
    """Usable positions: the table's rows less those the family reserves (``ModelEntry.reserved_positions``:
    XLM-RoBERTa style models and MPNet reserve padding_idx + 1)."""
    return int(hf_config.get("max_position_embeddings", 512)) - num_reserved_positions


def config_value(hf_config: dict[str, Any], *names: str) -> Any:
    """The first of ``names`` the config has: families name the same size differently (DistilBERT's "dim"
    is everyone else's "hidden_size")."""
    for name in names:
        if name in hf_config:
            return hf_config[name]
    raise KeyError(f"config.json has none of {names}")


def num_labels(hf_config: dict[str, Any]) -> int:
    """Classifier outputs: HF configs store id2label and derive num_labels from it (2 if neither is set)."""
    if "id2label" in hf_config:
        return len(hf_config["id2label"])
    return int(hf_config.get("num_labels", 2))
