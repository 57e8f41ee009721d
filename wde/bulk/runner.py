"""``wde.bulk.embed``: embed every record of a file into a directory of parquet parts, resuming where an
interrupted run stopped. ``wde embed`` is this function behind flags."""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wde.bulk.fingerprint import EncodeOptions, fingerprint, fingerprint_settings
from wde.bulk.output_dir import OutputDir
from wde.bulk.part_sink import PartSink
from wde.bulk.progress import Progress
from wde.bulk.ray import dense_embedding
from wde.bulk.readers import InputSpec, count_records, read_chunks
from wde.bulk.record_digest import check_parts_unchanged
from wde.config import ModelConfig
from wde.engine_args import EngineArgs
from wde.entrypoints.llm import LLM

logger = logging.getLogger(__name__)

DEFAULT_CHUNK_SIZE = 1024


@dataclass
class BulkResult:
    """What one call did: ``num_embedded`` texts this run, ``num_skipped`` found already written."""

    output: Path
    num_records: int
    num_skipped: int
    num_embedded: int
    num_tokens: int
    num_parts_written: int
    seconds: float  # the embedding loop, model load included
    load_seconds: float | None = None  # in process: loading the model (none when an llm was passed)
    ray_init_seconds: float | None = None  # ray.init (start or join a cluster)
    ray_first_part_seconds: float | None = None  # from the pipeline's start to its first chunk back

    def summary(self) -> str:
        """One line for the end of ``wde embed``."""
        parts = f"{self.num_parts_written} part{'s' * (self.num_parts_written != 1)}"
        line = (
            f"{self.output}: {self.num_records:,} records; embedded {self.num_embedded:,} texts "
            f"({self.num_tokens:,} tokens) into {parts} in {self.seconds:.1f} s, "
            f"{self.texts_per_second:,.1f} texts/s, {self.tokens_per_second:,.0f} tokens/s"
        )
        if self.load_seconds is not None:
            line += f" (model load {self.load_seconds:.1f} s)"
        if self.num_skipped:
            line += f"; {self.num_skipped:,} were already written"
        if self.ray_init_seconds is not None:
            line += (
                f"; ray start-up: ray.init {self.ray_init_seconds:.1f} s, first part after "
                f"{self.ray_first_part_seconds:.1f} s"
            )
        return line

    @property
    def texts_per_second(self) -> float:
        return self.num_embedded / max(self.seconds, 1e-9)

    @property
    def tokens_per_second(self) -> float:
        return self.num_tokens / max(self.seconds, 1e-9)


def embed(
    input: str | Path,
    output: str | Path,
    *,
    model: str | None = None,
    text_field: str = "text",
    id_field: str | None = "id",
    input_format: str | None = None,
    limit: int | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    dimensions: int | None = None,
    normalize: bool | None = None,
    prompt_name: str | None = None,
    use_ray: bool = False,
    num_actors: int | None = None,
    cpus_per_actor: float = 1.0,
    show_progress: bool = True,
    llm: LLM | None = None,
    **engine_args: Any,
) -> BulkResult:
    """Embed the ``text_field`` of every record of ``input`` (jsonl, csv, parquet or txt) into ``output``, a
    directory of parquet parts (id, embedding, num_tokens) that ``pandas.read_parquet(output)`` reads whole.

    Every record is checked (a string text within the character limit, unique ids) before any is embedded.
    A second call with the same input, model and settings skips the ids already written (a killed run
    resumes and re-embeds at most the chunks it had in flight); the input may have changed meanwhile (a bad
    record fixed) as long as the records already written did not (else ``ChangedRecordsError``); other
    settings raise ``FingerprintMismatchError``. ``limit`` takes only the first records (a first try of a
    large file; a later run with a larger or no limit resumes). A run that fails says why in
    ``OUT/_log.jsonl``.
    ``use_ray`` runs the embedding on Ray Data (an actor pool of ``num_actors`` engines, ``cpus_per_actor``
    each; the cluster of ``RAY_ADDRESS``, else a local one). Other keyword
    arguments are ``EngineArgs`` fields (``dtype``, ``max_num_batched_tokens``, ...); or pass ``llm``, an
    ``LLM`` already loaded, to embed with it in this process.
    """
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
    # 1. the input, the model's settings and the fingerprint, all checked before a model loads
    spec = InputSpec.create(input, text_field, id_field, input_format, limit)
    if spec.positional_ids and spec.format != "txt":
        logger.info("the records have no %r field: their ids are their positions (from 0)", id_field)
    if llm is not None and (use_ray or model is not None or engine_args):
        raise ValueError("pass either llm (a loaded LLM, in this process) or model and engine arguments")
    args = EngineArgs(model=model, **engine_args)
    model_config = llm.model_config if llm is not None else args.create_engine_config().model_config
    local_args = _resolved(args, model_config)  # loads in this process without resolving a Hub id again
    _check_dense_embedder(model_config)
    options = EncodeOptions(dimensions, normalize, prompt_name)
    settings = fingerprint_settings(spec, model_config, options)
    # 2. every record checked, before the output directory is made or touched
    num_records = count_records(spec)
    # 3. the output directory: the ids of its parts are done, if the input still holds them as they were
    out = OutputDir.open(output, fingerprint(settings), settings)
    try:
        if out.parts.names and out.manifest.settings.get("input") != settings["input"]:
            check_parts_unchanged(spec, out.parts)
            out.record_input(settings)
        done = out.parts.finished_ids()
        if out.num_stale_files:
            logger.info("removed %d unfinished part file(s) of an interrupted run", out.num_stale_files)
        if done:
            logger.info(
                "resuming: %d of %d records are in %d parts", len(done), num_records, len(out.parts.names)
            )
        out.journal.record("run", num_records=num_records, num_done=len(done), ray=use_ray)
        progress = Progress(max(num_records - len(done), 0), show_progress)  # done: a larger limit's, too
        sink = PartSink(out, progress)
        # 4. embed what is left
        timings: dict[str, float] = {}
        try:
            if len(done) < num_records and use_ray:
                from wde.bulk.ray_runner import embed_on_ray

                timings = embed_on_ray(
                    spec, args, options, chunk_size, num_records, done, sink, num_actors, cpus_per_actor
                )
            elif len(done) < num_records:
                timings = _embed_in_process(spec, llm or local_args, options, chunk_size, done, sink)
        finally:
            progress.close()
        # 5. every record written: say so in the manifest (rows: parts of a run with a larger limit count)
        out.mark_complete(len(done) + progress.num_done, out.parts.embedding_dim())
        out.journal.record("finished", num_parts=len(out.parts.names), seconds=round(progress.seconds, 3))
    except BaseException as e:  # Ctrl-C included: the log says how the run ended
        out.journal.record("failed", error=f"{type(e).__name__}: {e}")
        raise
    finally:
        out.close()
    return BulkResult(
        output=out.folder,
        num_records=num_records,
        num_skipped=len(done),
        num_embedded=progress.num_done,
        num_tokens=progress.num_tokens,
        num_parts_written=sink.num_parts,
        seconds=progress.seconds,
        load_seconds=timings.get("load_seconds"),
        ray_init_seconds=timings.get("ray_init_seconds"),
        ray_first_part_seconds=timings.get("ray_first_part_seconds"),
    )


def _embed_in_process(
    spec: InputSpec,
    engine: LLM | EngineArgs,
    options: EncodeOptions,
    chunk_size: int,
    done: set[Any],
    sink: PartSink,
) -> dict[str, float]:
    """One chunk at a time through one engine (``engine``: loaded, or the arguments to load it with);
    returns ``load_seconds`` when it loaded the model."""
    timings: dict[str, float] = {}
    if isinstance(engine, EngineArgs):
        start = time.perf_counter()
        engine = LLM(**dataclasses.asdict(engine))
        timings["load_seconds"] = time.perf_counter() - start
    for chunk in read_chunks(spec, chunk_size, done):
        sink.begin(len(chunk.ids), chunk.ids[0])
        outputs = engine.encode(chunk.texts, output="dense", **options.as_kwargs())
        embeddings = np.stack([dense_embedding(output) for output in outputs])  # [num_texts, dim]
        num_tokens = np.array([output.num_tokens for output in outputs], dtype=np.int32)  # [num_texts]
        sink.write(chunk.ids, chunk.texts, embeddings, num_tokens)
    return timings


def _resolved(args: EngineArgs, model_config: ModelConfig) -> EngineArgs:
    """``args`` naming the model folder already resolved (a Hub id's snapshot) and its served name. Ray
    actors keep the Hub id: each resolves it on its own node, where the driver's cache may not be."""
    if args.model is None or Path(args.model).expanduser().is_dir():
        return args
    served_name = args.served_model_name or model_config.served_model_name
    return dataclasses.replace(args, model=model_config.model, revision=None, served_model_name=served_name)


def _check_dense_embedder(model_config: ModelConfig) -> None:
    if not model_config.has_dense_output:
        served = "scores" if model_config.task != "embed" else f"{', '.join(model_config.outputs)} vectors"
        raise ValueError(
            f"wde embed writes dense embeddings, and {model_config.served_model_name} "
            f"({model_config.architecture}, task {model_config.task!r}) serves {served}; pass an embedding "
            "model (--model DIR)"
        )
