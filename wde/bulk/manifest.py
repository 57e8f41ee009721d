"""``OUT/_manifest.json``: what an output directory was made from (its fingerprint and the settings behind
it) and, once every record is written, that it is complete."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from wde.bulk.atomic_file import write_atomically
from wde.bulk.fingerprint import differences, fingerprint, fingerprinted

MANIFEST_NAME = "_manifest.json"
LAYOUT = "wde-embed/1"


class FingerprintMismatchError(ValueError):
    """The output directory was written from another input, model or settings."""


@dataclass
class Manifest:
    fingerprint: str
    settings: dict[str, Any]
    layout: str = LAYOUT
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    complete: bool = False
    num_rows: int | None = None  # set once complete
    embedding_dim: int | None = None  # set once complete

    @classmethod
    def read(cls, folder: Path) -> Manifest | None:
        path = folder / MANIFEST_NAME
        if not path.exists():
            return None
        with path.open(encoding="utf-8") as f:
            raw = json.load(f)
        if raw.get("layout") != LAYOUT:
            raise ValueError(
                f"{path} has layout {raw.get('layout')!r}, not {LAYOUT!r}: it was written by another tool or "
                "wde version; pass a new --output directory"
            )
        return cls(**{key: raw[key] for key in raw if key in cls.__dataclass_fields__})

    def write(self, folder: Path) -> None:
        data = (json.dumps(asdict(self), indent=2, sort_keys=True) + "\n").encode()

        def write(f: BinaryIO) -> None:
            f.write(data)

        write_atomically(folder / MANIFEST_NAME, write)

    def check_matches(self, current: str, settings: dict[str, Any], folder: Path) -> None:
        """Raise ``FingerprintMismatchError`` unless ``current`` is this manifest's fingerprint (or the one
        its settings give now: a manifest of an older wde fingerprinted the input's bytes too)."""
        if current in (self.fingerprint, fingerprint(self.settings)):
            return
        changed = ", ".join(differences(fingerprinted(self.settings), fingerprinted(settings)))
        raise FingerprintMismatchError(
            f"{folder} was written from another input, model or settings (differs in: "
            f"{changed or 'the fingerprint'}); "
            "pass a new --output directory, or delete this one to start over"
        )
