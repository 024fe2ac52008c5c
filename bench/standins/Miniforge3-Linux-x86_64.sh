#!/bin/bash
# The project's Miniforge installer stand-in, counted: each run adds a line to
# $BENCH_INSTALLER_LOG, so the benchmark can say how often provisioning ran the NAS installer.
set -euo pipefail
if [[ -n ${BENCH_INSTALLER_LOG:-} ]]; then
  echo "miniforge $(date +%s.%N) $*" >> "$BENCH_INSTALLER_LOG"
fi
here=$(cd "$(dirname "$0")" && pwd)
exec bash "$here/../../tests/standins/Miniforge3-Linux-x86_64.sh" "$@"
