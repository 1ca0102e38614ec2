"""Shipping bundles to boxes: OpenSSF signatures (`sign`, `keys`), the box's trust policy (`trust`), one
deterministic file per bundle (`pack`), and on the box atomic installs into slots with a smoke test,
status and rollback (`unpack`, `slots`, `install`), plus the systemd unit a bundle carries (`service`).

Box side: nothing here imports the build side or torch (import-linter contracts in pyproject.toml).
"""
