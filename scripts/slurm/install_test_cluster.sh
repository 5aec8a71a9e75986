#!/usr/bin/env bash
# Install what tests/cluster needs to start a real one-node SLURM (Debian's packages, as root).
set -euo pipefail
command -v slurmctld >/dev/null && command -v munged >/dev/null && exit 0
[ "$(id -u)" = 0 ] || { echo "installing SLURM needs root" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null
# The packages start their own daemons where systemd runs; the tests start theirs.
