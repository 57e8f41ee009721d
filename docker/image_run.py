"""How `make docker-check` runs the image, as operators do: a read-only root filesystem, a tmpfs ``/tmp``,
host folders as the ``/models`` and ``/data`` volumes, the image's own user, environment and entrypoint.

``ContainerRun``: ``ENGINE run --read-only --tmpfs /tmp -v MODELS:/models -v DATA:/data -p PORT:8000 IMAGE
[ARGS]`` (the README's command; ARGS replace the image's CMD, as ``docker run`` does). ``ChrootRun``, where
no container runtime works (a machine that is itself a sandbox): the image's filesystem from ``podman image
mount``, in a private mount namespace, bind-mounted read-only, with a tmpfs ``/tmp``, the two volumes,
``/proc`` and ``/dev``; the entrypoint (and ARGS, else the CMD) runs there with ``chroot
--userspec=UID:GID`` and the image's environment only."""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

CONTAINER_PORT = 8000


class ImageRun(Protocol):
    description: str

    def exit_code(self) -> int | None: ...

    def terminate(self) -> None: ...

    def wait(self, timeout: float) -> int: ...

    def logs(self) -> str: ...

    def close(self) -> None: ...


def image_config(engine: str, image: str) -> dict[str, Any]:
    done = subprocess.run([engine, "image", "inspect", image], capture_output=True, text=True, check=True)
    inspected = json.loads(done.stdout)[0]
    return inspected.get("Config") or inspected["ContainerConfig"]


class ContainerRun:
    def __init__(self, engine: str, name: str, log_path: Path) -> None:
        self.engine = engine
        self.name = name
        self.log_path = log_path
        self.description = f"{engine} run --read-only --tmpfs /tmp"

    @classmethod
    def start(
        cls,
        engine: str,
        image: str,
        port: int,
        models: Path,
        data: Path,
        log_path: Path,
        args: Sequence[str] = (),
    ) -> ContainerRun:
        """Raises RuntimeError (with the engine's last line) when the engine cannot run a container here."""
        name = f"wde-check-{port}"
        command = [
            *(engine, "run", "--detach", "--name", name, "--read-only", "--tmpfs", "/tmp"),
            *("-v", f"{models}:/models", "-v", f"{data}:/data", "-p", f"127.0.0.1:{port}:{CONTAINER_PORT}"),
            image,
            *args,
        ]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            subprocess.run([engine, "rm", "--force", name], capture_output=True)
            lines = done.stderr.strip().splitlines() or [f"exit code {done.returncode}"]
            raise RuntimeError(lines[-1])
        return cls(engine, name, log_path)

    def exit_code(self) -> int | None:
        done = subprocess.run(
            [self.engine, "inspect", "--format", "{{.State.Running}} {{.State.ExitCode}}", self.name],
            capture_output=True,
            text=True,
        )
        running, _, code = done.stdout.strip().partition(" ")
        return None if running == "true" else int(code or -1)

    def terminate(self) -> None:
        subprocess.run([self.engine, "kill", "--signal", "TERM", self.name], capture_output=True, check=True)

    def wait(self, timeout: float) -> int:
        done = subprocess.run(
            [self.engine, "wait", self.name], capture_output=True, text=True, timeout=timeout
        )
        return int(done.stdout.strip().splitlines()[-1])

    def logs(self) -> str:
        done = subprocess.run([self.engine, "logs", self.name], capture_output=True, text=True)
        self.log_path.write_text(done.stdout + done.stderr)
        return done.stdout + done.stderr

    def close(self) -> None:
        self.logs()
        subprocess.run([self.engine, "rm", "--force", self.name], capture_output=True)


class ChrootRun:
    def __init__(self, process: subprocess.Popen[bytes], image: str, log_path: Path, user: str) -> None:
        self.process = process
        self.image = image
        self.log_path = log_path
        self.description = (
            f"podman image mount + chroot --userspec={user}, root filesystem read-only, tmpfs /tmp"
        )

    @classmethod
    def start(
        cls, image: str, port: int, models: Path, data: Path, log_path: Path, args: Sequence[str] = ()
    ) -> ChrootRun:
        config = image_config("podman", image)
        done = subprocess.run(["podman", "image", "mount", image], capture_output=True, text=True, check=True)
        root = done.stdout.strip()
        user = _numeric_user(Path(root), config.get("User") or "root")
        env = [item for item in config.get("Env") or [] if not item.startswith("WDE_PORT=")]
        command = [*(config.get("Entrypoint") or []), *(args or config.get("Cmd") or [])]
        mounts = [
            f"mount --bind {root} {root}",
            f"mount -o remount,bind,ro {root}",  # the root filesystem: read-only
            f"mount -t proc proc {root}/proc",
            f"mount --rbind /dev {root}/dev",
            f"mount -t tmpfs -o mode=1777 tmpfs {root}/tmp",
            f"mount --bind {models} {root}/models",
            f"mount --bind {data} {root}/data",
        ]
        run = [
            *("chroot", f"--userspec={user}", root, "env", "-i"),
            *env,
            f"WDE_PORT={port}",
            *command,
        ]
        script = " && ".join([*mounts, "cd /", "exec " + shlex.join(run)])
        with log_path.open("wb") as log:  # unshare -m without --fork: the process becomes `wde serve` itself
            process = subprocess.Popen(["unshare", "--mount", "sh", "-c", script], stdout=log, stderr=log)
        return cls(process, image, log_path, user)

    def exit_code(self) -> int | None:
        return self.process.poll()

    def terminate(self) -> None:
        self.process.terminate()

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout)

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)
        time.sleep(0.2)  # the namespace's mounts go with its last process
        subprocess.run(["podman", "image", "unmount", self.image], capture_output=True)


def _numeric_user(root: Path, user: str) -> str:
    """The image's USER as uid:gid, read from its own /etc/passwd (chroot --userspec needs numbers there)."""
    name, _, group = user.partition(":")
    if name.isdigit():
        return f"{name}:{group or name}"
    for line in (root / "etc" / "passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == name:
            return f"{fields[2]}:{group or fields[3]}"
    raise RuntimeError(f"the image's USER {user!r} is not in its /etc/passwd")
