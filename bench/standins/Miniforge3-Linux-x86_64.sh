#!/bin/sh
# The project's stand-in installer, counted: each run adds a line to the log below, so the
# benchmark can say how often provisioning ran the NAS installer. bench/run.py writes this
# file with its paths filled in into the cluster's state dir, beside a copy of the stand-in
# (provisioning copies an installer to a private temp dir and runs it as the NAS owner: no
# path relative to this file and no variable of the harness's environment reaches it there).
set -eu
echo "miniforge $(date +%s.%N) $*" >> "@LOG@"
exec bash "@REAL@" "$@"
