#!/bin/sh
# fabricmon node Prolog: runs on every node of a job before it starts (slurm.conf:
# Prolog=/etc/slurm/fabricmon-prolog.sh), as root. Gates this node alone (SLURMD_NODENAME).
# With FABRICMON_GATE=enforce a warning-or-worse finding fails the prolog: Slurm then DRAINS this
# node and requeues the job. That is strong: read README "Slurm" before enabling it.
set -u
env_file=${FABRICMON_SLURM_ENV:-/etc/fabricmon/slurm.env}
# shellcheck source=/dev/null
[ -r "$env_file" ] && . "$env_file"
fabricmon=${FABRICMON:-fabricmon}
node=${SLURMD_NODENAME:-$(hostname -s)}
# shellcheck disable=SC2086
findings=$($fabricmon ${FABRICMON_ARGS:-} gate --nodes="$node" 2>&1)
status=$?
if [ "$status" = 1 ]; then
  logger -t fabricmon-prolog "node $node, job ${SLURM_JOB_ID:-?}: $findings" 2>/dev/null
  [ "${FABRICMON_GATE:-warn}" = enforce ] && exit 1
fi
exit 0
