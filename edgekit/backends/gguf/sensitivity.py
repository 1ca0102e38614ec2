"""Per-layer sensitivity of a GGUF artifact, for the report: which layers add most to its KLD.

For each layer (`blk.N`) — and the embedding and output tensors as one group — a probe file is spliced
from two files of the same model: that group's tensors exactly as the artifact has them, every other
tensor from the Q8_0 file (`base`). Each probe is scored against the reference on a few windows; the
layer's contribution is its probe's mean KLD minus the Q8_0 file's. Splicing copies tensor bytes (no
quantization runs), so a probe is exactly the artifact's tensors, importance matrix and fallbacks included.
The first probe's time, projected over every group, decides whether the measurement fits the budget.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from edgekit.backends.base import SensitivityProbe

OTHER = "embeddings and output"
PROBE_FILE = "probe.gguf"


def _group(name: str) -> str:
    found = re.match(r"blk\.(\d+)\.", name)
    return f"blk.{found.group(1)}" if found else OTHER


def groups(artifact: Any, base: Any) -> dict[str, list[str]]:
    """Tensor names by group, keeping only tensors whose type differs between the artifact and the base."""
    base_types = {t.name: t.tensor_type for t in base.tensors}
    found: dict[str, list[str]] = {}
    for tensor in artifact.tensors:
        if base_types.get(tensor.name) != tensor.tensor_type:
            found.setdefault(_group(tensor.name), []).append(tensor.name)
    return dict(sorted(found.items(), key=lambda kv: (kv[0] == OTHER, int(kv[0][4:]) if kv[0] != OTHER else 0)))


def splice(base: Any, swapped: dict[str, Any], dst: Path) -> None:
    """Write `base` (a GGUFReader) to `dst` with the tensors named in `swapped` taken from there instead."""
    import gguf

    arch = base.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(dst, arch=arch, endianess=base.endianess)
    alignment = base.fields.get("general.alignment")
    if alignment is not None:
        writer.data_alignment = int(alignment.contents())
    for field in base.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        sub_type = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), field.types[0], sub_type=sub_type)
    tensors = [swapped.get(t.name, t) for t in base.tensors]
    for t in tensors:
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in tensors:
        writer.write_tensor_data(t.data, tensor_endianess=base.endianess)
    writer.close()


def layer_sensitivity(artifact: Path, base: Path, probe: SensitivityProbe, out_dir: Path) -> dict[str, Any]:
    import gguf

    art, bas = gguf.GGUFReader(artifact), gguf.GGUFReader(base)
    by_name = {t.name: t for t in art.tensors}
    found = groups(art, bas)
    started = time.monotonic()
    base_kld, whole_kld = probe.score(base), probe.score(artifact)
    rows: list[dict[str, Any]] = []
    with probe.progress.task(f"sensitivity  {len(found)} layer groups", total=len(found), unit="groups") as shown:
        for name, members in found.items():
            began = time.monotonic()
            splice(bas, {n: by_name[n] for n in members}, out_dir / PROBE_FILE)
            kld = probe.score(out_dir / PROBE_FILE)
            (out_dir / PROBE_FILE).unlink()
            types = sorted({by_name[n].tensor_type.name for n in members})
            rows.append({"group": name, "tensors": len(members), "types": types, "kld_mean": kld,
                         "added": kld - base_kld})  # fmt: skip
            shown.advance()
            projected = time.monotonic() - started + (time.monotonic() - began) * (len(found) - len(rows))
            if len(rows) == 1 and projected > probe.budget_seconds:  # the report says why, and what to raise
                return {
                    "skipped": {
                        "groups": len(found),
                        "projected_seconds": projected,
                        "probe_seconds": time.monotonic() - began,
                        "budget_seconds": probe.budget_seconds,
                    }
                }
    return {"base_scheme": "Q8_0", "base_kld_mean": base_kld, "artifact_kld_mean": whole_kld,
            "groups": sorted(rows, key=lambda r: -r["added"])}  # fmt: skip
