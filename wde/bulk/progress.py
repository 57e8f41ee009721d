"""The progress of a bulk job on stderr: texts/s, tokens/s and ETA. A tqdm bar on a terminal; elsewhere (a
log file, CI) one plain line every ``PLAIN_INTERVAL_SECONDS`` and a last one at the end."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from tqdm.auto import tqdm

PLAIN_INTERVAL_SECONDS = 10.0


class Progress:
    def __init__(self, num_texts: int, enabled: bool = True, stream: TextIO | None = None) -> None:
        self.num_texts = num_texts
        self.num_done = 0
        self.num_tokens = 0
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self._start = time.perf_counter()
        self._last_line = self._start
        self._bar = None
        if enabled and self.stream.isatty():
            self._bar = tqdm(total=num_texts, unit="text", desc="embed", file=self.stream, smoothing=0.1)

    def update(self, num_texts: int, num_tokens: int) -> None:
        self.num_done += num_texts
        self.num_tokens += num_tokens
        if self._bar is not None:
            self._bar.set_postfix_str(f"{self.tokens_per_second:,.0f} tokens/s", refresh=False)
            self._bar.update(num_texts)
        elif self.enabled and time.perf_counter() - self._last_line >= PLAIN_INTERVAL_SECONDS:
            self._print_line()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self.enabled:
            self._print_line()

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self._start

    @property
    def texts_per_second(self) -> float:
        return self.num_done / max(self.seconds, 1e-9)

    @property
    def tokens_per_second(self) -> float:
        return self.num_tokens / max(self.seconds, 1e-9)

    def _print_line(self) -> None:
        self._last_line = time.perf_counter()
        share = self.num_done / self.num_texts if self.num_texts else 1.0
        num_left = self.num_texts - self.num_done
        eta = num_left / self.texts_per_second if self.num_done else float("nan")
        eta_text = time.strftime("%H:%M:%S", time.gmtime(eta)) if eta == eta else "?"
        print(
            f"embed: {self.num_done:,}/{self.num_texts:,} texts ({share:.1%}) {self.texts_per_second:,.1f} "
            f"texts/s {self.tokens_per_second:,.0f} tokens/s ETA {eta_text}",
            file=self.stream,
            flush=True,
        )
