"""Token bytes → text, incrementally: UTF-8 characters split across tokens, and stop strings.

Text that might be the start of a stop string is held back until it is known not to be one, so
a client never receives part of a stop sequence.
"""

from __future__ import annotations

import codecs


class TextStream:
    def __init__(self, stop: list[str] | None = None) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = [s for s in (stop or []) if s]
        self._held = ""
        self.stopped = False  # a stop string was found: nothing more is emitted
        self.text = ""  # everything emitted so far

    def feed(self, data: bytes) -> str:
        """The text that can be emitted after `data` (possibly empty)."""
        if self.stopped:
            return ""
        return self._emit(self._held + self._decoder.decode(data))

    def flush(self) -> str:
        """At the end of generation: whatever is still held back."""
        if self.stopped:
            return ""
        text = self._held + self._decoder.decode(b"", final=True)
        self._held = ""
        cut = self._first_stop(text)
        if cut is not None:
            self.stopped = True
            text = text[:cut]
        self.text += text
        return text

    def _emit(self, text: str) -> str:
        cut = self._first_stop(text)
        if cut is not None:
            self.stopped = True
            self._held = ""
            self.text += text[:cut]
            return text[:cut]
        keep = self._partial_stop_suffix(text)
        ready, self._held = text[: len(text) - keep], text[len(text) - keep :]
        self.text += ready
        return ready

    def _first_stop(self, text: str) -> int | None:
        found = [i for s in self._stop if (i := text.find(s)) >= 0]
        return min(found) if found else None

    def _partial_stop_suffix(self, text: str) -> int:
        """Length of the longest end of `text` that is the beginning of a stop string."""
        best = 0
        for stop in self._stop:
            for n in range(min(len(stop) - 1, len(text)), best, -1):
                if text.endswith(stop[:n]):
                    best = n
                    break
        return best
