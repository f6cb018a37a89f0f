#!/bin/sh
# fabricmon PrologSlurmctld: runs once per job on the controller (slurm.conf:
# PrologSlurmctld=/etc/slurm/fabricmon-prolog-slurmctld.sh, copied from /usr/share/fabricmon/slurm/
# and made executable), as SlurmUser, with SLURM_JOB_ID set. Registers the job with the
# aggregator (its nodes become peers for the straggler detector and `fabricmon diagnose --job`),
# then gates it: with FABRICMON_GATE=enforce a warning-or-worse finding on the job's nodes fails
# this prolog, and Slurm requeues a batch job (an interactive one is cancelled). Never fails
# because fabricmon is unreachable: monitoring must not stop the cluster.
set -u
env_file=${FABRICMON_SLURM_ENV:-/etc/fabricmon/slurm.env}
# shellcheck source=/dev/null
[ -r "$env_file" ] && . "$env_file"
fabricmon=${FABRICMON:-fabricmon}
args=${FABRICMON_ARGS:-}
job=${SLURM_JOB_ID:?SLURM_JOB_ID is not set: run me as the PrologSlurmctld of Slurm}

# shellcheck disable=SC2086  # FABRICMON_ARGS is a list of flags
if ! $fabricmon $args job start --name="$job" --slurm_job="$job" --source=slurm >/dev/null; then
  logger -t fabricmon-prolog "job $job: could not register it with the fabricmon aggregator" 2>/dev/null
fi
# shellcheck disable=SC2086
findings=$($fabricmon $args gate --job="$job" 2>&1)
status=$?
case $status in
  0) exit 0 ;;
  1)
    logger -t fabricmon-prolog "job $job: fabric findings on its nodes: $findings" 2>/dev/null
    echo "fabricmon: job $job: $findings" >&2
    [ "${FABRICMON_GATE:-warn}" = enforce ] && exit 1
    exit 0 ;;
  *)
    logger -t fabricmon-prolog "job $job: fabricmon gate gave no answer ($status): $findings" 2>/dev/null
    exit 0 ;;
esac
