"""A Hugging Face Hub endpoint on 127.0.0.1 (a thread) that serves model folders through the routes
``huggingface_hub.snapshot_download`` and ``HfApi.model_info`` call, so that the real client downloads:

    GET  /api/models/ORG/NAME/revision/REV          {"id", "sha", "siblings": [{"rfilename"}], "gated", ...}
    GET  /api/models/ORG/NAME/tree/REV[/PATH]       [{"type": "file", "oid", "size", "path"}, ...]
    HEAD /ORG/NAME/resolve/REV/FILE                 X-Repo-Commit, ETag, Content-Length (no body)
    GET  /ORG/NAME/resolve/REV/FILE                 the same headers and the bytes

with the Hub's error answers: ``X-Error-Code: RepoNotFound`` (404), ``RevisionNotFound`` (404),
``EntryNotFound`` (404), and ``GatedRepo`` (401 on a gated repo's files without the repo's token). Every
request is recorded (method, path) so that tests count downloads.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

from tests.hub_cache import folder_commit, model_files


@dataclass
class HubRepo:
    revisions: dict[str, Path]  # branch or tag -> the folder it holds
    gated_token: str | None = None  # a gated repo: its files need "Authorization: Bearer <token>"
    refs: dict[str, str] = field(default_factory=dict)  # branch or tag -> commit
    files: dict[str, dict[str, bytes]] = field(default_factory=dict)  # commit -> path -> bytes

    def __post_init__(self) -> None:
        for revision, folder in self.revisions.items():
            commit = folder_commit(folder)
            self.refs[revision] = commit
            self.files[commit] = model_files(folder)

    def commit_of(self, revision: str) -> str | None:
        return revision if revision in self.files else self.refs.get(revision)


@dataclass
class LocalHub:
    url: str
    repos: dict[str, HubRepo]
    requests: list[tuple[str, str]]

    def downloads(self) -> list[str]:
        """The files fetched with GET .../resolve/... (in request order)."""
        return [
            path.split("/resolve/", 1)[1].split("/", 1)[1]
            for method, path in self.requests
            if method == "GET" and "/resolve/" in path
        ]


@contextmanager
def local_hub(repos: dict[str, HubRepo]) -> Iterator[LocalHub]:
    """A running endpoint for ``repos`` (repo id -> HubRepo); stopped on exit."""
    requests: list[tuple[str, str]] = []
    lock = threading.Lock()

    class Handler(_HubHandler):
        pass

    Handler.repos = repos
    Handler.requests = requests
    Handler.lock = lock
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield LocalHub(f"http://127.0.0.1:{server.server_address[1]}", repos, requests)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class _HubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the Hub: every answer carries a Content-Length
    repos: dict[str, HubRepo]
    requests: list[tuple[str, str]]
    lock: threading.Lock

    def do_GET(self) -> None:
        self._answer(with_body=True)

    def do_HEAD(self) -> None:
        self._answer(with_body=False)

    def log_message(self, format: str, *args: object) -> None:  # quiet: the tests read self.requests
        return None

    def _answer(self, with_body: bool) -> None:
        path = urlsplit(self.path).path
        with self.lock:
            self.requests.append((self.command, unquote(path)))
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] in ("revision", "tree"):
            self._api(f"{parts[2]}/{parts[3]}", parts[4], unquote(parts[5]), with_body)
        elif len(parts) >= 5 and parts[2] == "resolve":
            self._resolve(
                f"{parts[0]}/{parts[1]}", unquote(parts[3]), unquote("/".join(parts[4:])), with_body
            )
        else:
            self._error(404, "RepoNotFound", f"no route {path}", with_body)

    def _api(self, repo_id: str, kind: str, revision: str, with_body: bool) -> None:
        repo = self.repos.get(repo_id)
        if repo is None:
            return self._error(404, "RepoNotFound", f"Repository {repo_id} not found", with_body)
        commit = repo.commit_of(revision)
        if commit is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", with_body)
        files = repo.files[commit]
        if kind == "revision":
            body: object = {
                "id": repo_id,
                "modelId": repo_id,
                "sha": commit,
                "private": False,
                "gated": "manual" if repo.gated_token else False,
                "disabled": False,
                "tags": [],
                "siblings": [{"rfilename": name} for name in files],
            }
        else:
            body = [
                {"type": "file", "oid": hashlib.sha1(data).hexdigest(), "size": len(data), "path": name}
                for name, data in files.items()
            ]
        self._send(200, json.dumps(body).encode(), {"Content-Type": "application/json"}, with_body)

    def _resolve(self, repo_id: str, revision: str, name: str, with_body: bool) -> None:
        repo = self.repos.get(repo_id)
        if repo is None:
            return self._error(404, "RepoNotFound", f"Repository {repo_id} not found", with_body)
        if repo.gated_token and self.headers.get("Authorization") != f"Bearer {repo.gated_token}":
            message = (
                f"Access to model {repo_id} is restricted. You must have access to it and be authenticated"
            )
            return self._error(401, "GatedRepo", message, with_body)
        commit = repo.commit_of(revision)
        if commit is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", with_body)
        data = repo.files[commit].get(name)
        if data is None:
            return self._error(404, "EntryNotFound", f"{name} does not exist", with_body, commit)
        headers = {
            "Content-Type": "application/octet-stream",
            "X-Repo-Commit": commit,
            "ETag": f'"{hashlib.sha256(data).hexdigest()}"',
        }
        self._send(200, data, headers, with_body)

    def _error(
        self, status: int, code: str, message: str, with_body: bool, commit: str | None = None
    ) -> None:
        headers = {"Content-Type": "application/json", "X-Error-Code": code, "X-Error-Message": message}
        if commit is not None:
            headers["X-Repo-Commit"] = commit
        self._send(status, json.dumps({"error": message}).encode(), headers, with_body)

    def _send(self, status: int, body: bytes, headers: dict[str, str], with_body: bool) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if with_body:
            self.wfile.write(body)
