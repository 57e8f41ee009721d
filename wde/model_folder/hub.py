"""Models by Hugging Face Hub id: ``ORG/NAME`` becomes a local snapshot folder of huggingface_hub's cache.

``resolve_model_path(name_or_path, revision, token)``:

1. an existing directory is used as it is (local folders work unchanged; ``revision`` does not apply);
2. anything else that is a repo id goes through huggingface_hub (``HF_HOME`` / ``HF_HUB_CACHE``,
   ``HF_ENDPOINT``, ``HF_TOKEN``, ``HF_HUB_OFFLINE`` are its own settings):
   a. the revision's small metadata files (``config.json``, ``modules.json``, ...): ``snapshot_download``
      resolves the branch or tag to a commit (offline or unreachable: the cache's ref) and fetches only
      what the cache lacks;
   b. a repo whose config.json needs remote code for an architecture wde lacks is refused before any
      weight moves;
   c. a snapshot that already holds everything the model needs is returned without another request;
   d. otherwise the commit's file list is read and only the files wde reads are downloaded
      (``needed_files``): weights in one format (safetensors, else ``pytorch_model*.bin``), tokenizer
      files, the sentence-transformers modules; never ONNX, OpenVINO, TF or Flax files.

Every Hub failure becomes a ``HubModelError`` (a ``ValueError``) of one line that says what to do:
``wde serve`` prints it and exits 2.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from wde.model_folder.bge_m3 import COLBERT_FILE, SPARSE_FILE
from wde.model_folder.model_files import (
    FAST_TOKENIZER_FILE,
    SLOW_TOKENIZER_FILES,
    has_tokenizer_files,
    weight_files,
)
from wde.model_folder.st_metadata import module_kind

logger = logging.getLogger(__name__)

# root files that say what the model is: read before any weight is fetched (a, above)
METADATA_PATTERNS = (
    "config*.json",  # config.json, config_sentence_transformers.json
    "modules.json",
    "sentence_*_config.json",  # sentence_bert_config.json
    SPARSE_FILE,  # BGE-M3's lexical and ColBERT heads (small; the layout is known only by their presence)
    COLBERT_FILE,
)
TOKENIZER_PATTERNS = (
    FAST_TOKENIZER_FILE,
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    *(name for group in SLOW_TOKENIZER_FILES for name in group),
)
# weight formats in the order wde prefers them (as model_files.weight_files reads a folder)
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")
# other weight formats a module folder may hold beside ours: never downloaded
OTHER_WEIGHT_SUFFIXES = (".bin", ".safetensors", ".onnx", ".h5", ".msgpack", ".ot", ".pt", ".pth", ".xml")
# sentence-transformers modules with no files of their own
FILELESS_MODULES = ("Normalize",)
# the packages whose exceptions mean "the Hub cannot be reached" (huggingface_hub 2.x, 1.x, 0.x)
HTTP_CLIENTS = ("httpx2", "httpx", "requests", "urllib3")
COMMIT = re.compile(r"[0-9a-f]{40}")  # a git commit hash, as the Hub names snapshot folders
REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")


class HubModelError(ValueError):
    """A model named by Hub id cannot be resolved; the one-line message says what to do."""


def looks_like_repo_id(name: str) -> bool:
    """``ORG/NAME`` (or a legacy single ``NAME``): not a path (``/x``, ``./x``, ``~/x``, ``a/b/c``)."""
    return REPO_ID.fullmatch(name) is not None and ".." not in name and "--" not in name


def read_token_file(path: str) -> str:
    """The access token in ``path`` (whitespace stripped), for ``--hf-token-file``."""
    try:
        token = Path(path).expanduser().read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        raise HubModelError(f"hf_token_file {path!r} cannot be read ({e})") from e
    if not token:
        raise HubModelError(f"hf_token_file {path!r} is empty; write the Hub access token (hf_...) into it")
    return token


def resolve_model_path(name_or_path: str, revision: str | None = None, token: str | None = None) -> str:
    """A local model folder for ``name_or_path``: the directory itself, or the Hub snapshot of the repo id
    (downloaded where the cache lacks it). Raises ``HubModelError`` (one line) when neither works."""
    # 1. a local directory wins, whatever it is named
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise HubModelError(f"model {name_or_path!r} is a local directory without a config.json")
        if revision is not None:
            logger.warning("revision %r applies to Hub models; %s is a local folder", revision, name_or_path)
        return str(path.resolve())
    if not looks_like_repo_id(name_or_path):
        raise HubModelError(
            f"model {name_or_path!r} is not a local directory with a config.json, nor a Hub repo id "
            "(ORG/NAME); pass a model folder in HuggingFace layout or a repo id such as "
            "sentence-transformers/all-MiniLM-L6-v2"
        )
    # 2. the Hub, through huggingface_hub's cache
    with _hub_errors(name_or_path, revision, token):
        return _download_snapshot(name_or_path, revision, token)


def snapshot_commit(snapshot: str) -> str | None:
    """The commit a huggingface_hub cache snapshot folder holds (``.../snapshots/<commit>``); None for a
    folder laid out otherwise."""
    path = Path(snapshot)
    is_commit = COMMIT.fullmatch(path.name) is not None
    return path.name if is_commit and path.parent.name == "snapshots" else None


def needed_files(repo_files: Iterable[str], module_folders: Iterable[str]) -> list[str]:
    """The files of a repository that wde reads: root metadata, tokenizer and weights in one format, and
    each sentence-transformers module folder's config and weights (``module_folders``: modules.json's
    paths). Nothing else: no ONNX / OpenVINO / TF / Flax exports, no checkpoints in other folders."""
    files = sorted(set(repo_files))
    root = [name for name in files if "/" not in name]
    chosen = [name for name in root if _matches(name, METADATA_PATTERNS + TOKENIZER_PATTERNS)]
    chosen += _preferred_weights(root)
    for folder in module_folders:
        inside = [name for name in files if name.rpartition("/")[0] == folder]
        chosen += [name for name in inside if not name.endswith(OTHER_WEIGHT_SUFFIXES)]
        chosen += _preferred_weights(inside)
    return sorted(set(chosen))


def _download_snapshot(repo_id: str, revision: str | None, token: str | None) -> str:
    from huggingface_hub import HfApi, constants, snapshot_download

    # a. the metadata files of the revision (the commit's snapshot folder is named by its hash)
    snapshot = Path(
        snapshot_download(
            repo_id,
            revision=revision,
            token=token,
            allow_patterns=list(METADATA_PATTERNS),
            tqdm_class=_QuietProgress,  # a few small files: the progress bars are for the weights (d)
        )
    )
    if not (snapshot / "config.json").is_file():
        raise HubModelError(f"{repo_id} has no config.json: it is not a model in HuggingFace layout")
    # b. a repo that needs remote code is refused before any weight moves
    _refuse_remote_code(repo_id, json.loads((snapshot / "config.json").read_text(encoding="utf-8")))
    # c. the cache already holds the whole model: no further request
    missing = _missing_parts(snapshot)
    if not missing:
        logger.info("%s: the cached snapshot %s", repo_id, snapshot)
        return str(snapshot)
    if constants.HF_HUB_OFFLINE:
        raise HubModelError(
            f"the cached snapshot of {repo_id} ({snapshot}) lacks {', '.join(missing)}; HF_HUB_OFFLINE=1 "
            "keeps wde from fetching them: run once with network access to complete it"
        )
    # d. the commit's file list, and only the files wde reads
    commit = snapshot.name
    info = HfApi(token=token).model_info(repo_id, revision=commit)
    repo_files = [sibling.rfilename for sibling in info.siblings or []]
    files = needed_files(repo_files, _module_folders(snapshot))
    logger.info("%s: fetching %d files of commit %s from %s", repo_id, len(files), commit, constants.ENDPOINT)
    return str(snapshot_download(repo_id, revision=commit, token=token, allow_patterns=files))


class _QuietProgress(tqdm):
    """huggingface_hub's progress bars, switched off."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["disable"] = True
        super().__init__(*args, **kwargs)


def _missing_parts(snapshot: Path) -> list[str]:
    """What the snapshot lacks of config.json, weights, tokenizer files and the sentence-transformers
    modules' files (empty: the model is whole)."""
    missing = [] if (snapshot / "config.json").is_file() else ["config.json"]
    if not weight_files(snapshot):
        missing.append("weights")
    if not has_tokenizer_files(snapshot):
        missing.append("tokenizer files")
    for folder, kind in _modules(snapshot):
        if kind in FILELESS_MODULES:
            continue
        if not (snapshot / folder / "config.json").is_file():
            missing.append(f"{folder}/config.json")
        elif kind == "Dense" and not weight_files(snapshot / folder):
            missing.append(f"{folder} weights")
    return missing


def _modules(snapshot: Path) -> list[tuple[str, str]]:
    """(folder, kind) of each sentence-transformers module that has a folder (modules.json's paths)."""
    modules_path = snapshot / "modules.json"
    if not modules_path.is_file():
        return []
    modules = json.loads(modules_path.read_text(encoding="utf-8"))
    return [
        (str(module["path"]).strip("/"), module_kind(str(module.get("type", ""))))
        for module in modules
        if isinstance(module, dict) and module.get("path")
    ]


def _module_folders(snapshot: Path) -> list[str]:
    return [folder for folder, kind in _modules(snapshot) if kind not in FILELESS_MODULES]


def _refuse_remote_code(repo_id: str, config: dict[str, Any]) -> None:
    """A config.json with ``auto_map`` (modeling code shipped in the repo) for an architecture wde lacks."""
    from wde.model_folder.registry import MODEL_REGISTRY

    auto_map = config.get("auto_map")
    architectures = list(config.get("architectures") or [])
    if not auto_map or any(name in MODEL_REGISTRY for name in architectures):
        return
    architecture = architectures[0] if architectures else str(config.get("model_type", "unknown"))
    code = auto_map.get("AutoModel") if isinstance(auto_map, dict) else None
    raise HubModelError(
        f"{repo_id} needs remote code for architecture {architecture}"
        + (f" ({code} in the repository)" if code else "")
        + f", which wde does not run; wde serves {', '.join(sorted(MODEL_REGISTRY))}"
    )


def _preferred_weights(names: list[str]) -> list[str]:
    for pattern in WEIGHT_PATTERNS:
        found = [name for name in names if fnmatch.fnmatch(name.rpartition("/")[2], pattern)]
        if found:
            return found
    return []


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in patterns)


@contextmanager
def _hub_errors(repo_id: str, revision: str | None, token: str | None) -> Iterator[None]:
    """Turns huggingface_hub's exceptions into one ``HubModelError`` line naming the repo and the remedy."""
    try:
        yield
    except HubModelError:
        raise
    except Exception as e:
        message = _error_message(e, repo_id, revision or "main", token)
        if message is None:
            raise
        raise HubModelError(message) from e


def _error_message(error: Exception, repo: str, revision: str, token: str | None) -> str | None:
    from huggingface_hub import constants, get_token
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    endpoint, cache = constants.ENDPOINT, constants.HF_HUB_CACHE
    page = f"{endpoint}/{repo}"
    if isinstance(error, GatedRepoError) or (_status(error) in (401, 403) and not _repo_missing(error)):
        if token or get_token():
            return (
                f"{repo} is gated or private and the token (HF_TOKEN or --hf-token-file) has no access to "
                f"it: accept its terms at {page} with that account, or use a token that can read it"
            )
        return (
            f"{repo} is gated: accept its terms at {page}, then set HF_TOKEN (or --hf-token-file) to an "
            "access token of that account"
        )
    if isinstance(error, RepositoryNotFoundError):
        return (
            f"model {repo!r} is not a local directory, and the Hub ({endpoint}) has no repository {repo} "
            "(not found; if it is private, set HF_TOKEN)"
        )
    if isinstance(error, RevisionNotFoundError):
        return f"{repo} has no revision {revision!r} (not found): pass a branch, tag or commit of {page}"
    if isinstance(error, (LocalEntryNotFoundError, OfflineModeIsEnabled)) and constants.HF_HUB_OFFLINE:
        return (
            f"{repo} (revision {revision}) is not in the Hugging Face cache ({cache}) and HF_HUB_OFFLINE=1: "
            f"run once with network access (or `hf download {repo}`), or point HF_HUB_CACHE at a cache "
            "that has it"
        )
    if isinstance(error, HfHubHTTPError):
        first_line = next((line for line in str(error).splitlines() if line.strip()), "")
        return f"the Hub ({endpoint}) refused {repo}: {first_line}"
    # the HTTP client's own errors (httpx2 / httpx / requests) and huggingface_hub's fallback when the
    # Hub cannot be reached and the cache lacks the revision
    if isinstance(error, LocalEntryNotFoundError) or type(error).__module__.split(".")[0] in HTTP_CLIENTS:
        return (
            f"cannot reach the Hub ({endpoint}) for {repo}, and its revision {revision} is not (wholly) in "
            f"the Hugging Face cache ({cache}): check the network or HF_ENDPOINT ({type(error).__name__})"
        )
    return None


def _status(error: Exception) -> int | None:
    response = getattr(error, "response", None)
    return getattr(response, "status_code", None)


def _repo_missing(error: Exception) -> bool:
    response = getattr(error, "response", None)
    headers = getattr(response, "headers", None) or {}
    return headers.get("X-Error-Code") == "RepoNotFound"
