"""``wde embed --ray``: the same job on Ray Data. Workers read the input (``ray.data.read_*``), drop the ids
already written, embed in an actor pool of wde engines (``WdeEmbedder``), and the driver writes the chunks
that come back as parts of the same output directory, so a run started with ``--ray`` resumes without it
and the other way round.

Ids by position (txt inputs; records without the id field) need one reader in input order: the driver
reads those inputs and hands Ray the pending records (``ray.data.from_arrow``). Give records an id field
to have the cluster read them in parallel.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import math
import time
from collections.abc import Iterator
from typing import Any

from wde.bulk.fingerprint import EncodeOptions
from wde.bulk.part_sink import PartSink
from wde.bulk.ray import WdeEmbedder
from wde.bulk.readers import InputSpec, read_chunks
from wde.engine_args import EngineArgs
from wde.extras import require

logger = logging.getLogger(__name__)

# Reading and filtering reserve no CPU: the actor pool takes every CPU for its engines, and a read task
# that waits for a free CPU would wait for ever (the actors never give theirs back).
READ_CPUS = 0
CONTEXT_SETTINGS = {
    "enable_progress_bars": False,  # ours is on stderr
    "print_on_execution_start": False,
    # the v2 parquet reader lists files in a task that takes a CPU whatever num_cpus says: it would wait
    # for ever behind the actors, and it reads a file as one block whatever override_num_blocks says; the
    # v1 reader runs with no CPU and splits a file into the blocks asked for
    "use_datasource_v2": False,
}


def embed_on_ray(
    spec: InputSpec,
    args: EngineArgs,
    options: EncodeOptions,
    chunk_size: int,
    num_records: int,
    done: set[Any],
    sink: PartSink,
    num_actors: int | None,
    cpus_per_actor: float,
) -> dict[str, float]:
    """Returns the start-up timings: ``ray_init_seconds`` and ``ray_first_part_seconds``."""
    require("ray", "ray", "wde embed --ray")
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
    # 2. the pipeline: read, drop what is done, embed in the actor pool
    try:
        with data_context_settings():
            dataset = _read(spec, chunk_size, num_records, done)
            dataset = dataset.map_batches(
                WdeEmbedder,
                fn_constructor_kwargs={**dataclasses.asdict(args), **options.as_kwargs()},
                batch_size=None,  # a block a call: _read makes blocks of about chunk_size rows
                batch_format="numpy",
                compute=ray.data.ActorPoolStrategy(size=num_actors),
                num_cpus=cpus_per_actor,
            )
            # 3. the driver writes each block that comes back as one part, as soon as it comes (batches of
            #    chunk_size rows would hold a finished block back until the next one is done)
            pipeline_start = time.perf_counter()
            first_part_seconds = None
            for batch in dataset.iter_batches(batch_size=None, batch_format="numpy"):
                ids = batch["id"]  # [num_texts]
                if len(ids) == 0:
                    continue
                # [num_texts, dim], [num_texts]; the texts for the part's record digest
                sink.write(ids, batch["text"], batch["embedding"], batch["num_tokens"])
                if first_part_seconds is None:
                    first_part_seconds = time.perf_counter() - pipeline_start
    finally:
        # the actor pool ends when the last handle to its actors goes, some of which sit in reference
        # cycles: collect them now, or the next job's actors wait for these CPUs
        dataset = None
        gc.collect()
        if started_here:
            ray.shutdown()
    return {"ray_init_seconds": init_seconds, "ray_first_part_seconds": first_part_seconds or 0.0}


@contextlib.contextmanager
def data_context_settings() -> Iterator[None]:
    """Ray Data's settings the pipeline needs, put back after (a caller's own Ray session keeps its own)."""
    import ray

    context = ray.data.DataContext.get_current()
    saved_settings = {name: getattr(context, name) for name in CONTEXT_SETTINGS}
    for name, value in CONTEXT_SETTINGS.items():
        setattr(context, name, value)
    try:
        yield
    finally:
        for name, value in saved_settings.items():
            setattr(context, name, value)


def _read(spec: InputSpec, chunk_size: int, num_records: int, done: set[Any]) -> Any:
    """A dataset of (id, text) rows not yet written, in blocks of about ``chunk_size`` rows.

    The actor pool is handed whole blocks: a file read as one block (Ray's default below its target block
    size, 128 MiB) would be embedded by one actor while the others wait. One block per chunk spreads the
    chunks over every actor."""
    import pyarrow as pa
    import ray

    if spec.positional_ids or spec.limit is not None:  # the driver reads them (a --limit: the first ones)
        tables = [
            pa.table({"id": chunk.ids, "text": chunk.texts}) for chunk in read_chunks(spec, chunk_size, done)
        ]
        return ray.data.from_arrow(tables)
    path = str(spec.path)
    assert spec.id_field is not None  # positional ids (and a limit) were read above
    num_blocks = max(1, math.ceil(num_records / chunk_size))
    if spec.format == "jsonl":
        # lines=False is pyarrow's reader, which reads JSON lines and keeps "001" a string (lines=True is
        # pandas', which makes it the int 1)
        dataset = ray.data.read_json(
            path, lines=False, file_extensions=None, num_cpus=READ_CPUS, override_num_blocks=num_blocks
        )
    elif spec.format == "csv":
        import pyarrow.csv as pa_csv

        column_types = {spec.text_field: pa.string(), spec.id_field: pa.string()}  # as the in-process reader
        dataset = ray.data.read_csv(
            path,
            convert_options=pa_csv.ConvertOptions(column_types=column_types),
            parse_options=pa_csv.ParseOptions(newlines_in_values=True),  # quoted multi-line texts
            num_cpus=READ_CPUS,
            override_num_blocks=num_blocks,
        )
    else:
        dataset = ray.data.read_parquet(
            path, columns=[spec.id_field, spec.text_field], num_cpus=READ_CPUS, override_num_blocks=num_blocks
        )
    # no repartition, select_columns or filter: each would be a task that waits for a CPU the actors hold
    # (the read itself splits its output into the blocks asked for above)
    return dataset.map_batches(
        _id_and_text,  # type: ignore[arg-type]  # (Ray's stubs do not see fn_kwargs)
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
