"""The ``wde`` command: ``wde serve [MODEL] [flags]``, ``wde embed INPUT --output OUT [flags]`` and
``wde bench [flags]``.

Engine flags come from the ``EngineArgs`` fields, server flags from ``ServerSettings`` plus the HTTP
listener's; every flag can also be set as ``WDE_<FLAG>`` (``WDE_MAX_NUM_BATCHED_TOKENS=4096``,
``WDE_API_KEY=...``); the command line wins. FastAPI and uvicorn are imported only by ``serve``, so
``wde bench`` runs without the server extra; it runs the top-level ``benchmarks`` package (lazily imported,
never by ``wde``).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import sys
import types
import typing
from collections.abc import Sequence
from dataclasses import MISSING, fields
from typing import Any

from server.process.config_process import build_configs, workers_likely
from server.process.log_setup import configure_logging, skip_unused_record_fields
from server.process.memory_release import limit_malloc_arenas
from server.process.openmp_spin import bound_openmp_spin
from server.process.tokenizer_parallelism import serial_tokenizer_calls
from server.ray_serve.flags import add_ray_serve_flags
from server.settings import ServerSettings
from wde.engine_args import EngineArgs
from wde.extras import missing_extra_message
from wde.flag_field import flag_choices, flag_help

ENV_PREFIX = "WDE_"
# `wde bench` runs the top-level benchmarks package of a source checkout (the server images leave it out)
NO_BENCHMARKS = (
    "the benchmarks package is not installed: run wde bench from a source checkout "
    '(pip install -c constraints.txt -e ".[server,bench]")'
)

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # 1. bench: everything after the word goes to the benchmark's own parser; with --server URL it is the
    #    HTTP load benchmark against that running server, otherwise the offline one
    if argv and argv[0] == "bench":
        try:
            from benchmarks import offline, server_load
            from benchmarks.dataset import BenchmarkDataError
        except ModuleNotFoundError as e:
            if e.name != "benchmarks":
                raise
            print(f"wde bench: error: {NO_BENCHMARKS}", file=sys.stderr)
            return 2

        rest = argv[1:]
        uses_server = any(arg == "--server" or arg.startswith("--server=") for arg in rest)
        try:
            (server_load.main if uses_server else offline.main)(rest)
        except BenchmarkDataError as e:
            print(f"wde bench: error: {e}", file=sys.stderr)
            return 2
        return 0
    # 2. serve or embed
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "embed":
        return embed(args)
    if args.command != "serve":
        parser.print_help()
        return 2
    return serve(args, parser)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="wde", description="prefill-only inference server (embeddings)")
    commands = parser.add_subparsers(dest="command", metavar="{serve,embed,bench}")
    serve_parser = commands.add_parser(
        "serve",
        help="serve a model over HTTP (TEI- and OpenAI-compatible)",
        description="Serve a model over HTTP. Every flag can be set as WDE_<FLAG> in the environment.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    commands.add_parser("bench", help="offline throughput vs sentence-transformers (wde bench --help)")
    # 1. engine flags, from the EngineArgs fields
    engine_group = serve_parser.add_argument_group("engine")
    engine_group.add_argument(
        "model",
        nargs="*",
        default=[],
        help=f"{field_help(EngineArgs, 'model')}; several: one server for them all (the request's model "
        "picks one)",
    )
    engine_group.add_argument(  # TEI's flag (and its MODEL_ID environment variable), for drop-in configs
        "--model-id", action="append", default=[], help="the same as MODEL: TEI's flag; MODEL_ID is read too"
    )
    engine_group.add_argument(
        "--model-config",
        default=None,
        help="a YAML file of models to serve, each with its own engine flags and served name (README "
        "'Several models')",
    )
    _add_dataclass_flags(engine_group, EngineArgs, skip=frozenset({"model"}))
    # 2. server flags: the listener's, then the ServerSettings fields
    server_group = serve_parser.add_argument_group("server")
    server_group.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: all)")
    server_group.add_argument("--port", type=int, default=8000, help="TCP port to listen on")
    server_group.add_argument(
        "--graceful-timeout",
        type=float,
        default=30.0,
        help="on SIGTERM, seconds to let in-flight requests finish before cancelling them",
    )
    server_group.add_argument(
        "--log-level", default="info", choices=LOG_LEVELS, help="the server's log level (uvicorn's too)"
    )
    _add_dataclass_flags(server_group, ServerSettings)
    add_ray_serve_flags(serve_parser.add_argument_group("ray serve"))
    # 3. WDE_<FLAG> environment variables become the defaults
    _apply_environment(serve_parser)
    _add_embed_parser(commands)
    return parser


def _add_embed_parser(commands: Any) -> None:
    embed_parser = commands.add_parser(
        "embed",
        help="embed a file of texts into parquet parts, resumable (jsonl, csv, parquet, txt)",
        description="Embed every record of INPUT into OUT, a directory of parquet parts (id, embedding, "
        "num_tokens); run the same command again to resume after an interruption.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    job = embed_parser.add_argument_group("job")
    job.add_argument("input", help="a .jsonl, .csv, .parquet or .txt file (txt: one text per line)")
    job.add_argument(
        "--output", "-o", required=True, help="the output directory (created; resumed if it exists)"
    )
    job.add_argument("--text-field", default="text", help="the field holding the text")
    job.add_argument(
        "--id-field", default="id", help="the field holding a unique id (records without it: their position)"
    )
    job.add_argument(
        "--input-format", choices=("jsonl", "csv", "parquet", "txt"), help="default: from the suffix"
    )
    job.add_argument(
        "--limit", type=int, help="only the first N records (try a large file; a later run resumes)"
    )
    job.add_argument("--chunk-size", type=int, default=1024, help="texts per part file (and per engine call)")
    job.add_argument("--dimensions", type=int, help="Matryoshka: keep the first N dimensions, renormalized")
    job.add_argument("--prompt-name", help="the model's prompt to prepend (sentence-transformers prompts)")
    job.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=True, help="progress on stderr"
    )
    job.add_argument("--log-level", default="info", choices=LOG_LEVELS, help="the log level")
    ray_group = embed_parser.add_argument_group("ray")
    ray_group.add_argument(
        "--ray", action="store_true", help="run on Ray Data (the cluster of RAY_ADDRESS, else a local one)"
    )
    ray_group.add_argument(
        "--num-actors", type=int, help="engines in the actor pool (default: cluster CPUs / --cpus-per-actor)"
    )
    ray_group.add_argument(
        "--cpus-per-actor", type=float, default=1.0, help="CPUs (torch threads) per engine"
    )
    engine_group = embed_parser.add_argument_group("engine")
    engine_group.add_argument(
        "--model", "--model-id", dest="model", default=None, help=field_help(EngineArgs, "model")
    )
    _add_dataclass_flags(engine_group, EngineArgs, skip=frozenset({"model"}))
    _apply_environment(embed_parser)


def embed(args: argparse.Namespace) -> int:
    """Exit 2 with one line for a user error (a flag, the input, a model folder, an output made with other
    settings), 130 when interrupted (the parts written stay; the same command resumes), 0 when done."""
    configure_logging(args.log_level)
    try:
        from wde.bulk import embed as embed_file

        result = embed_file(
            args.input,
            args.output,
            text_field=args.text_field,
            id_field=args.id_field,
            input_format=args.input_format,
            limit=args.limit,
            chunk_size=args.chunk_size,
            dimensions=args.dimensions,
            prompt_name=args.prompt_name,
            use_ray=args.ray,
            num_actors=args.num_actors,
            cpus_per_actor=args.cpus_per_actor,
            show_progress=args.progress,
            **{name: getattr(args, name) for name in EngineArgs.field_names()},
        )
    except (ValueError, TypeError, OSError, ImportError) as e:
        print(f"wde embed: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            f"wde embed: interrupted; the finished parts stay in {args.output}: run the same command to "
            "resume",
            file=sys.stderr,
        )
        return 130
    print(result.summary())
    return 0


def serve(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Exit 2 with one line for a user error found before anything loads (a flag, the model folder, the
    port); 1 when the model fails to load; 0 after a graceful drain."""
    # 1. settings and the model folders, checked before anything loads or binds (one malloc arena first,
    #    before any thread: freed heap goes back to the system, server/process/memory_release.py; OpenMP's
    #    idle spin bounded before torch loads: server/process/openmp_spin.py; tokenizers' thread pool off:
    #    server/process/tokenizer_parallelism.py)
    limit_malloc_arenas()
    bound_openmp_spin()
    serial_tokenizer_calls()
    settings = ServerSettings(**{name: getattr(args, name) for name in ServerSettings.field_names()})
    configure_logging(args.log_level)
    skip_unused_record_fields()
    try:
        settings = settings.with_api_key_file()
        settings.verify()
        settings = dataclasses.replace(settings, batch_dir=str(settings.batch_folder(args.port)))
        all_engine_args = _served_engine_args(args)
    except (ValueError, TypeError, OSError) as e:
        return _startup_error(str(e))
    # each model's config, built once: the registry and its engine take it from here (with API workers, the
    # engine process builds them, started now: the supervisor never imports torch)
    engine_start = None
    if workers_likely(settings.api_workers) and not args.ray:
        try:
            from server.launch.supervisor import EngineStart
        except ImportError as e:
            return _startup_error(missing_extra_message(e.name or str(e), "server", "wde serve"))
        engine_start = EngineStart(all_engine_args, settings, args.log_level)
    try:
        served = build_configs(all_engine_args) if engine_start is None else engine_start.configs()
    except (ValueError, TypeError, OSError) as e:
        return _startup_error(str(e))
    # 2. the HTTP server (FastAPI and uvicorn imported only now): binds the port, then loads the model
    if args.ray:  # each replica builds its models' configs once, on its own machine (its device)
        if settings.api_workers not in ("auto", 1):
            return _startup_error(
                "--api-workers > 1 and --ray: Ray Serve scales with replicas; drop one flag"
            )
        try:
            from server.app import build_app
            from server.ray_serve.deployment import serve_on_ray
        except ImportError as e:
            return _startup_error(missing_extra_message(e.name or str(e), "server,ray", "wde serve --ray"))
        engine_args = all_engine_args[0] if len(all_engine_args) == 1 else all_engine_args
        return serve_on_ray(args, functools.partial(build_app, engine_args, settings))
    try:
        from server.launch.draining_server import serve as serve_http
        from server.launch.supervisor import choose_api_workers, serve_with_workers
        from server.process.listener import StartupError
    except ImportError as e:
        return _startup_error(missing_extra_message(e.name or str(e), "server", "wde serve"))
    # 3. one process, or API workers in front of an engine process (--api-workers)
    num_workers, why = choose_api_workers(settings.api_workers, served)
    if num_workers == 1 and engine_start is not None:
        engine_start.end()  # auto chose one process after all (no GPU)
    try:
        if num_workers == 1:
            return serve_http(
                served, settings, args.host, args.port, args.graceful_timeout, args.log_level, why
            )
        assert engine_start is not None  # num_workers > 1 only where workers_likely said so
        return serve_with_workers(
            engine_start,
            served,
            settings,
            args.host,
            args.port,
            args.graceful_timeout,
            args.log_level,
            num_workers,
            why,
        )
    except StartupError as e:
        return _startup_error(str(e))


def _served_engine_args(args: argparse.Namespace) -> list[EngineArgs]:
    """One EngineArgs per served model: the positional models, then --model-config's; none: the default."""
    base = EngineArgs(**{name: getattr(args, name) for name in EngineArgs.field_names() if name != "model"})
    served = [dataclasses.replace(base, model=model) for model in _model_names(args)]
    if args.model_config is not None:
        from server.served_models.models_file import read_models_file

        served += read_models_file(args.model_config, base)
    return served or [base]


def _model_names(args: argparse.Namespace) -> list[str]:
    """The positional models and --model-id's; none of them nor --model-config: TEI's MODEL_ID variable."""
    names = [*args.model, *args.model_id]
    if not names and args.model_config is None and os.environ.get("MODEL_ID"):
        names = [os.environ["MODEL_ID"]]
    return names


def _startup_error(message: str) -> int:
    print(f"wde serve: error: {message}", file=sys.stderr)
    return 2


def field_help(cls: type, name: str) -> str:
    """The help of ``cls``'s field ``name`` (``wde.flag_field.flag``)."""
    help_text = flag_help(next(field for field in fields(cls) if field.name == name))
    if help_text is None:
        raise ValueError(f"{cls.__name__}.{name} has no help: declare it with wde.flag_field.flag(...)")
    return help_text


def _add_dataclass_flags(group: Any, cls: type, skip: frozenset[str] = frozenset()) -> None:
    """One --flag per field of ``cls``, its help and choices read from the field (``flag``)."""
    hints = typing.get_type_hints(cls)
    for field in fields(cls):
        if field.name in skip:
            continue
        flag = "--" + field.name.replace("_", "-")
        default = None if field.default is MISSING else field.default
        spec = _argparse_spec(hints[field.name])
        help_text = field_help(cls, field.name)
        if spec.get("type") is bool:
            group.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=help_text)
        else:
            group.add_argument(flag, default=default, choices=flag_choices(field), help=help_text, **spec)


def _argparse_spec(hint: Any) -> dict[str, Any]:
    """``int | None`` -> int; ``int | str`` -> an int or a keyword ("auto"); ``list[int]`` -> several ints;
    ``bool`` -> a --flag/--no-flag pair; anything else parses as str."""
    options = [hint]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        options = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    if len(options) == 1 and typing.get_origin(options[0]) is list:
        (item,) = typing.get_args(options[0]) or (str,)
        return {"type": item if item in (int, float) else str, "nargs": "+"}
    if len(options) == 1 and options[0] in (bool, int, float):
        return {"type": options[0]}
    if set(options) == {int, str}:
        return {"type": _int_or_keyword}
    return {"type": str}


def _int_or_keyword(raw: str) -> int | str:
    try:
        return int(raw)
    except ValueError:
        return raw


def _apply_environment(parser: argparse.ArgumentParser) -> None:
    for action in parser._actions:
        if action.dest in ("help", argparse.SUPPRESS):
            continue
        name = ENV_PREFIX + action.dest.upper()
        action.help = f"{action.help or ''} [env: {name}]".strip()
        raw = os.environ.get(name)
        if raw is None:
            continue
        try:
            value = _parse_env(action, raw)
        except ValueError as e:
            parser.error(f"{name}={raw!r}: {e}")
        if action.choices is not None and value not in action.choices and not isinstance(value, list):
            parser.error(f"{name}={raw!r}: choose from {', '.join(map(str, action.choices))}")
        action.default = value


def _parse_env(action: argparse.Action, raw: str) -> Any:
    if isinstance(action, argparse.BooleanOptionalAction):
        lowered = raw.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ValueError("expected true/false, 1/0, yes/no or on/off")
    convert = action.type if callable(action.type) else str
    if action.nargs in ("+", "*"):  # a list: WDE_CUDA_GRAPH_BUCKETS="256,512,1024" (commas or spaces)
        return [convert(item) for item in raw.replace(",", " ").split()]
    return convert(raw)


if __name__ == "__main__":
    sys.exit(main())
