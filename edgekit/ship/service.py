"""edgekit.service: the systemd unit every bundle carries, serving whatever release `current` points at.

Written at build time (the memory limit comes from the bench), installed once per box:

    systemctl link /var/lib/edgekit/current/edgekit.service && systemctl enable --now edgekit

The unit names only `current`: `edgekit install` and `edgekit rollback` switch that link, and
`systemctl daemon-reload && systemctl restart edgekit` starts the release it points at (the running
process keeps the files of the slot it started from: the previous slot is kept until the next install).
"""

from __future__ import annotations

import math
from string import Template

SERVICE = "edgekit.service"
DEFAULT_ROOT = "/var/lib/edgekit"
# Python, uvicorn and the requests in flight on top of what the bench measured, then a margin for longer
# prompts than the bench's: a limit that only a runaway process reaches.
SERVE_OVERHEAD_MIB = 256
HEADROOM = 1.5

UNIT = Template("""\
# systemd unit of the edgekit bundle $name (written by edgekit $version; signed with the bundle).
# It serves the release that $root/current points at (`edgekit install`, `edgekit rollback`):
#   systemctl link $root/current/edgekit.service && systemctl enable --now edgekit
# After an install or a rollback: systemctl daemon-reload && systemctl restart edgekit
# Another install root, edgekit elsewhere than /opt/edgekit, another port: `systemctl edit edgekit`.
[Unit]
Description=edgekit model server ($name, from $root/current)
Wants=network-online.target
After=network-online.target
StartLimitIntervalSec=600
StartLimitBurst=5

[Service]
Type=exec
Environment=PATH=/opt/edgekit/bin:/usr/local/bin:/usr/bin:/bin
Environment=PYTHONDONTWRITEBYTECODE=1
# Every file against its signature (the trust policy in /etc/edgekit/trusted-keys) before anything starts.
ExecStartPre=$root/current/run.sh verify
ExecStart=$root/current/run.sh serve --host 127.0.0.1 --port 8080
Restart=on-failure
RestartSec=5
# $memory_why
MemoryMax=${memory_max}M
DynamicUser=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
NoNewPrivileges=yes
ReadOnlyPaths=$root
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectControlGroups=yes
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX
LockPersonality=yes

[Install]
WantedBy=multi-user.target
""")


def memory_max_mib(peak: float | None, artifact: str, artifact_bytes: int) -> tuple[int, str]:
    """MemoryMax for serving `artifact`, in MiB (a multiple of 64), and where it came from: the peak resident
    memory a bench measured serving it (None: not benchmarked)."""
    if peak:
        why = f"the bench's peak RSS serving {artifact} ({peak:.0f} MiB) + {SERVE_OVERHEAD_MIB} MiB, × {HEADROOM}"
        base = peak
    else:
        base = artifact_bytes / 2**20
        why = f"no bench: {artifact}'s size ({base:.0f} MiB) + {SERVE_OVERHEAD_MIB} MiB, × {HEADROOM}"
    return 64 * math.ceil((base + SERVE_OVERHEAD_MIB) * HEADROOM / 64), why


def render_unit(name: str, version: str, memory_max: int, memory_why: str, root: str = DEFAULT_ROOT) -> str:
    return UNIT.substitute(name=name, version=version, root=root, memory_max=memory_max, memory_why=memory_why)
