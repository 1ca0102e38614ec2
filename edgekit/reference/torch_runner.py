"""The reference model: the source checkpoint on torch + transformers.

FP16 on CUDA when a GPU is present, otherwise the CPU in FP32 (FP16/BF16 selectable). The
resolved device and dtype are reported with every figure that depends on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.errors import MissingDependencyError, NoCudaDevice


@dataclass(frozen=True)
class ReferenceDevice:
    device: str  # "cuda" or "cpu"
    dtype: str  # "float32", "float16" or "bfloat16"
    name: str  # "NVIDIA A10G", "Intel(R) Xeon(R) ..."


def resolve_device(device: str, dtype: str) -> ReferenceDevice:
    try:
        import torch
    except ImportError:
        raise MissingDependencyError("torch (needed for the reference)", "gguf") from None
    has_cuda = torch.cuda.is_available()
    if device == "cuda" and not has_cuda:
        raise NoCudaDevice()
    chosen = "cuda" if device == "cuda" or (device == "auto" and has_cuda) else "cpu"
    if dtype == "auto":
        dtype = "float16" if chosen == "cuda" else "float32"
    if chosen == "cuda":
        name = torch.cuda.get_device_name(0)
    else:
        import platform

        name = _cpu_name() or platform.processor() or platform.machine()
    return ReferenceDevice(chosen, dtype, name)


def _cpu_name() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


class TorchRunner:
    """Logits for token ids from the HF checkpoint."""

    def __init__(self, checkpoint: Path, device: ReferenceDevice, threads: int | None = None) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        from edgekit.sources.tokenizer import HFTokenizer

        if threads:
            torch.set_num_threads(threads)
        self.name = f"torch {device.device} {device.dtype}"
        self.device = device
        self._torch = torch
        self._tokenizer = HFTokenizer.from_folder(checkpoint)
        # Any: transformers types `.to` through a decorator whose signature takes the model as its first argument
        model: Any = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=getattr(torch, device.dtype),
                                                          use_safetensors=True)  # fmt: skip
        self._model = model.to(device.device)
        self._model.eval()

    @property
    def vocab_size(self) -> int:
        return int(self._model.config.vocab_size)

    def tokenize(self, text: str) -> list[int]:
        return self._tokenizer.tokenize(text)

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        torch = self._torch
        with torch.inference_mode():
            batch = torch.tensor([list(ids)], dtype=torch.long, device=self.device.device)
            out = self._model(input_ids=batch, use_cache=False).logits[0]
            return out.float().cpu().numpy()

    def generate(self, prompt: Sequence[int], stop: Sequence[int], max_new: int) -> list[int]:
        """Greedy continuation with the key/value cache: one token's forward per step, not the whole sequence's
        (at 1B that is the difference between minutes and seconds for the report's five prompts)."""
        torch = self._torch
        out: list[int] = []
        with torch.inference_mode():
            step = torch.tensor([list(prompt)], dtype=torch.long, device=self.device.device)
            past = None
            for _ in range(max_new):
                result = self._model(input_ids=step, past_key_values=past, use_cache=True, logits_to_keep=1)
                past = result.past_key_values
                token = int(torch.argmax(result.logits[0, -1].float()))
                out.append(token)
                if token in stop:
                    break
                step = torch.tensor([[token]], dtype=torch.long, device=self.device.device)
        return out

    def close(self) -> None:
        del self._model


class WholeModel:
    """The reference with every weight loaded at once, one `TorchRunner` per dtype asked for (one at a time)."""

    def __init__(self, checkpoint: Path, device: ReferenceDevice, threads: int | None = None) -> None:
        self.checkpoint, self.device, self.threads = checkpoint, device, threads

    def runner(self, dtype: str) -> TorchRunner:
        return TorchRunner(self.checkpoint, ReferenceDevice(self.device.device, dtype, self.device.name), self.threads)

    def close(self) -> None:
        pass
