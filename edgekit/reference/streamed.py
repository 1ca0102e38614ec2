"""The reference computed one decoder layer at a time: memory that does not grow with the model.

The whole-model reference (`edgekit.reference.torch_runner.TorchRunner`) holds every weight in the reference
dtype (FP32 on a CPU: 28 GB for a 7B model) and runs one window after another. This runs the same
transformers modules in the other order. The model is built on the meta device (no memory); then its
embedding, each decoder layer in turn and last its final norm and head are materialized from the
checkpoint's memory-mapped safetensors (`edgekit.sources.weights`), every sequence to score (the eval windows
and the task items, all known in advance) is pushed through, and the module is freed again. Between
layers, every sequence's hidden states wait in a memory-mapped float32 file (exact for FP32, FP16 and
BF16 alike). Each sequence still goes through each layer on its own, in transformers' own forward (the
model's layer list cut to the one layer held), so masks, sliding windows, rotary embeddings, embedding
scaling and logit soft-capping are transformers' and the logits are those of the whole model, to the
bit. Every dtype asked for (the reference's and the noise floor's) is computed in the same pass, so
the weights are read from disk once.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgekit.sources.weights import CheckpointTensors


def skeleton(config: Any, dtype: str) -> Any:
    """The model on the meta device, built exactly as `from_pretrained` builds it (buffers are real)."""
    import torch
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM

    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.tie_weights()
    return model.eval()


def checkpoint_key(model: Any, module: Any, tied: bool) -> dict[str, str]:
    """For each tensor of `module` (parameters and saved buffers): its name in the checkpoint.

    A tied head is read from the embedding's tensor (`tied` is decided on the fresh skeleton: materializing a
    module replaces its parameters, which unties them).
    """
    names = {id(m): n for n, m in model.named_modules()}
    if tied and module is model.get_output_embeddings():
        module = model.get_input_embeddings()
    prefix = names[id(module)] + "." if names[id(module)] else ""
    return {name: prefix + name for name in module.state_dict()}


def is_tied(model: Any) -> bool:
    head, embedding = model.get_output_embeddings(), model.get_input_embeddings()
    return head is not None and head.weight is embedding.weight


def why_not_streamable(folder: Path, config: Any) -> str | None:
    """None when the checkpoint can be streamed, else what stands in the way."""
    tensors = CheckpointTensors(folder)
    if not tensors.tensors:
        return "it has no .safetensors files"
    if bad := tensors.unsupported():
        return f"tensors of type {', '.join(bad)}"
    model = skeleton(config, "float32")
    base = model.get_decoder()
    if not hasattr(base, "layers") or not hasattr(base, "norm") or model.get_output_embeddings() is None:
        return f"{type(model).__name__} has no decoder layer list, final norm and head to stream"
    modules = [model.get_input_embeddings(), *base.layers, base.norm, model.get_output_embeddings()]
    missing = [key for m in modules for key in checkpoint_key(model, m, is_tied(model)).values() if key not in tensors]
    return f"tensors {missing[:3]} are not in the checkpoint under these names" if missing else None


@contextlib.contextmanager
def _cut(base: Any, layers: list[Any], norm: Any) -> Iterator[None]:
    """The base model's forward with only `layers` and `norm` (transformers' masks and rotary stay its own)."""
    from torch import nn

    saved = base.layers, base.norm
    base.layers, base.norm = nn.ModuleList(layers), norm
    try:
        yield
    finally:
        base.layers, base.norm = saved


class StreamedModel:
    """Final hidden states of every sequence in every dtype, one decoder layer at a time; then a runner each."""

    def __init__(
        self,
        checkpoint: Path,
        device: str,
        dtypes: Sequence[str],
        sequences: Sequence[Sequence[int]],
        workdir: Path,
        threads: int | None = None,
    ) -> None:
        import torch
        from transformers import AutoConfig

        if threads:
            torch.set_num_threads(threads)
        self.checkpoint, self.device, self._torch = checkpoint, device, torch
        self.tensors = CheckpointTensors(checkpoint)
        self.config = AutoConfig.from_pretrained(checkpoint)
        self.models = {d: skeleton(self.config, d) for d in dict.fromkeys(dtypes)}
        self.tied = is_tied(next(iter(self.models.values())))
        self.index: dict[tuple[int, ...], tuple[int, int]] = {}
        for ids in sequences:
            key = tuple(int(i) for i in ids)
            if key not in self.index:
                start = sum(n for _, n in self.index.values())
                self.index[key] = (start, len(key))
        total = sum(n for _, n in self.index.values())
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        hidden = int(self.config.get_text_config().hidden_size)
        self.hidden = {d: np.lib.format.open_memmap(workdir / f"hidden-{d}.npy", mode="w+", dtype=np.float32,
                                                    shape=(max(total, 1), hidden)) for d in self.models}  # fmt: skip

    @property
    def layers(self) -> int:
        return len(next(iter(self.models.values())).get_decoder().layers)

    def run(self, advance: Callable[[], None]) -> None:
        """Embedding, then every decoder layer, for every dtype and sequence; `advance` after each step."""
        with self._torch.inference_mode():
            for dtype, model in self.models.items():
                embedding = model.get_input_embeddings()
                with self._held(model, embedding):
                    for ids in self.index:
                        self._put(dtype, ids, embedding(self._torch.tensor([ids], device=self.device)))
            advance()
            for i in range(self.layers):
                for dtype, model in self.models.items():
                    base = model.get_decoder()
                    layer = base.layers[i]
                    with self._held(model, layer), _cut(base, [layer], self._torch.nn.Identity()):
                        for ids in self.index:
                            out = base(inputs_embeds=self._get(dtype, ids), use_cache=False)
                            self._put(dtype, ids, out.last_hidden_state)
                advance()

    def runner(self, dtype: str) -> HeadRunner:
        return HeadRunner(self, dtype)

    @contextlib.contextmanager
    def _held(self, model: Any, module: Any) -> Iterator[None]:
        """`module`'s weights, read from the checkpoint in the skeleton's dtypes, for as long as the block runs."""
        keys = checkpoint_key(model, module, self.tied)
        current = module.state_dict(keep_vars=True)
        state = {name: self.tensors.load(key).to(device=self.device, dtype=current[name].dtype)
                 for name, key in keys.items() if key in self.tensors}  # fmt: skip
        module.load_state_dict(state, assign=True, strict=False)
        try:
            yield
        finally:
            module.to("meta")  # frees the weights; the module is not used again in this dtype

    def _get(self, dtype: str, ids: tuple[int, ...]) -> Any:
        start, n = self.index[ids]
        rows = self._torch.from_numpy(np.array(self.hidden[dtype][start : start + n]))
        return rows.to(device=self.device, dtype=getattr(self._torch, dtype)).unsqueeze(0)

    def _put(self, dtype: str, ids: tuple[int, ...], states: Any) -> None:
        start, n = self.index[ids]
        self.hidden[dtype][start : start + n] = states[0].float().cpu().numpy()

    def close(self) -> None:
        self.hidden.clear()
        self.models.clear()
        shutil.rmtree(self.workdir, ignore_errors=True)


class HeadRunner:
    """Logits of the streamed sequences in one dtype: final norm and head applied to their last hidden states."""

    def __init__(self, stream: StreamedModel, dtype: str) -> None:
        self.name = f"torch {stream.device} {dtype} (streamed)"
        self._stream, self._dtype = stream, dtype
        self._model = stream.models[dtype]
        self._tokenizer: Any = None
        self._held = contextlib.ExitStack()
        norm, head = self._model.get_decoder().norm, self._model.get_output_embeddings()
        self._held.enter_context(stream._held(self._model, norm))
        self._held.enter_context(stream._held(self._model, head))

    @property
    def vocab_size(self) -> int:
        return int(self._model.config.vocab_size)

    def tokenize(self, text: str) -> list[int]:
        from edgekit.sources.tokenizer import HFTokenizer

        self._tokenizer = self._tokenizer or HFTokenizer.from_folder(self._stream.checkpoint)
        return self._tokenizer.tokenize(text)

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        key = tuple(int(i) for i in ids)
        if key not in self._stream.index:
            raise KeyError(f"a sequence of {len(key)} tokens that was not streamed")
        torch, base = self._stream._torch, self._model.get_decoder()
        with torch.inference_mode(), _cut(base, [], base.norm):
            out = self._model(inputs_embeds=self._stream._get(self._dtype, key), use_cache=False)
            return out.logits[0].float().cpu().numpy()

    def close(self) -> None:
        self._held.close()
