"""``wde embed --ray``: the same job on Ray Data. Workers read the input (``ray.data.read_*``), drop the ids
already written, embed in an actor pool of wde engines (``WdeEmbedder``), and the driver writes the chunks
that come back as parts of the same output directory, so a run started with ``--ray`` resumes without it
and the other way round.

Ids by position (txt inputs; records without the id field) need one reader in input order: the driver
reads those inputs and hands Ray the pending records (``ray.data.from_arrow``). Give records an id field
to have the cluster read them in parallel.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import time
from typing import Any

from wde.bulk import require
from wde.bulk.fingerprint import EncodeOptions
from wde.bulk.ray import WdeEmbedder
from wde.bulk.readers import InputSpec, read_chunks
from wde.bulk.runner import PartSink
from wde.engine_args import EngineArgs

logger = logging.getLogger(__name__)

# Reading and filtering reserve no CPU: the actor pool takes every CPU for its engines, and a read task
# that waits for a free CPU would wait for ever (the actors never give theirs back).
READ_CPUS = 0
CONTEXT_SETTINGS = {
    "enable_progress_bars": False,  # ours is on stderr
    "print_on_execution_start": False,
    # the v2 parquet reader lists files in a task that takes a CPU whatever num_cpus says: it would wait
    # for ever behind the actors; the v1 reader runs with none
    "use_datasource_v2": False,
}


def embed_on_ray(
    spec: InputSpec,
    args: EngineArgs,
    options: EncodeOptions,
    chunk_size: int,
    done: set[Any],
    sink: PartSink,
    num_actors: int | None,
    cpus_per_actor: float,
) -> dict[str, float]:
    """Returns the start-up timings: ``ray_init_seconds`` and ``ray_first_part_seconds``."""
    require("ray", "ray")
    import ray

    # 1. join the cluster of RAY_ADDRESS (or the running one), else start a local one
    start = time.perf_counter()
    started_here = not ray.is_initialized()
    if started_here:
        # the workers' logs (the engines' start-up lines) with --log-level debug
        ray.init(logging_level=logging.WARNING, log_to_driver=logger.isEnabledFor(logging.DEBUG))
    init_seconds = time.perf_counter() - start
    num_cpus = int(ray.cluster_resources().get("CPU", 1))
    num_actors = num_actors or max(1, int(num_cpus // cpus_per_actor))
    logger.info(
        "ray: init in %.1f s (cluster at %s, %d CPUs); %d actors x %g CPUs",
        init_seconds,
        ray.get_runtime_context().gcs_address,
        num_cpus,
        num_actors,
        cpus_per_actor,
    )
    # 2. the pipeline: read, drop what is done, embed in the actor pool. The settings it needs are put back
    #    after, so that a caller's own Ray session keeps its own.
    context = ray.data.DataContext.get_current()
    saved_settings = {name: getattr(context, name) for name in CONTEXT_SETTINGS}
    for name, value in CONTEXT_SETTINGS.items():
        setattr(context, name, value)
    try:
        dataset = _read(spec, chunk_size, done)
        dataset = dataset.map_batches(
            WdeEmbedder,
            fn_constructor_kwargs={**dataclasses.asdict(args), **options.as_kwargs()},
            batch_size=chunk_size,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=num_actors),
            num_cpus=cpus_per_actor,
        )
        # 3. the driver writes each chunk that comes back as one part
        pipeline_start = time.perf_counter()
        first_part_seconds = None
        for batch in dataset.iter_batches(batch_size=chunk_size, batch_format="numpy"):
            ids = batch["id"]  # [num_texts]
            if len(ids) == 0:
                continue
            sink.write(ids, batch["embedding"], batch["num_tokens"])  # [num_texts, dim], [num_texts]
            if first_part_seconds is None:
                first_part_seconds = time.perf_counter() - pipeline_start
    finally:
        # the actor pool ends when the last handle to its actors goes, some of which sit in reference
        # cycles: collect them now, or the next job's actors wait for these CPUs
        dataset = None
        gc.collect()
        for name, value in saved_settings.items():
            setattr(context, name, value)
        if started_here:
            ray.shutdown()
    return {"ray_init_seconds": init_seconds, "ray_first_part_seconds": first_part_seconds or 0.0}


def _read(spec: InputSpec, chunk_size: int, done: set[Any]) -> Any:
    """A dataset of (id, text) rows not yet written."""
    import pyarrow as pa
    import ray

    if spec.positional_ids:
        tables = [
            pa.table({"id": chunk.ids, "text": chunk.texts}) for chunk in read_chunks(spec, chunk_size, done)
        ]
        return ray.data.from_arrow(tables)
    path = str(spec.path)
    if spec.format == "jsonl":
        # lines=False is pyarrow's reader, which reads JSON lines and keeps "001" a string (lines=True is
        # pandas', which makes it the int 1)
        dataset = ray.data.read_json(path, lines=False, file_extensions=None, num_cpus=READ_CPUS)
    elif spec.format == "csv":
        import pyarrow.csv as pa_csv

        column_types = {spec.text_field: pa.string(), spec.id_field: pa.string()}  # as the in-process reader
        dataset = ray.data.read_csv(
            path,
            convert_options=pa_csv.ConvertOptions(column_types=column_types),
            parse_options=pa_csv.ParseOptions(newlines_in_values=True),  # quoted multi-line texts
            num_cpus=READ_CPUS,
        )
    else:
        dataset = ray.data.read_parquet(path, columns=[spec.id_field, spec.text_field], num_cpus=READ_CPUS)
    # no repartition, select_columns or filter: each would be a task that waits for a CPU the actors hold
    # (Ray Data already splits a read into blocks for the cluster's CPUs)
    return dataset.map_batches(
        _id_and_text,
        fn_kwargs={
            "id_field": spec.id_field,
            "text_field": spec.text_field,
            "done_ids": pa.array(list(done)) if done else None,
        },
        batch_format="pyarrow",
        num_cpus=READ_CPUS,
    )


def _id_and_text(batch: Any, id_field: str, text_field: str, done_ids: Any) -> Any:
    """The rows of ``batch`` (a pyarrow Table) not in ``done_ids``, as columns id and text."""
    import pyarrow.compute as pc

    table = batch.select([id_field, text_field]).rename_columns(["id", "text"])
    if done_ids is None:
        return table
    return table.filter(pc.invert(pc.is_in(table["id"], value_set=done_ids)))
