#!/bin/bash
# A peer of launch.yml for bench/run.py: torchx submits and waits, as a user does on the login
# host, from a shell with the cluster's conda env active (torchx's Slurm jobs inherit the
# submitting environment, --export=ALL: that is how their torchrun comes from that env).
#   torchx_ddp.sh CONDA_ROOT ENV_NAME NCCL_ENV_FILE OMP_THREADS TORCHX [torchx run arguments...]
set -eu
conda_root=$1 env_name=$2 nccl_env=$3 omp=$4 torchx=$5
shift 5
source "$conda_root/etc/profile.d/conda.sh"
# By prefix, as the launch's job script activates it (<envs>/<name> links to the current version).
conda activate "$conda_root/envs/$(readlink "$conda_root/envs/$env_name" || echo "$env_name")"
source "$nccl_env"
export OMP_NUM_THREADS=$omp
# torchrun (bench/peers/torchrun), which the env lacks and dist.ddp calls.
export PATH="$(cd "$(dirname "$0")" && pwd)/bin:$PATH"
exec "$torchx" "$@"
