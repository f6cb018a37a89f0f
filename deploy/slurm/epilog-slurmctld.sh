#!/bin/sh
# fabricmon EpilogSlurmctld: runs once per job on the controller when it ends (slurm.conf:
# EpilogSlurmctld=/etc/slurm/fabricmon-epilog-slurmctld.sh). Ends the job's registration. Always
# exits 0: an epilog failure would drain nodes for a monitoring problem.
set -u
env_file=${FABRICMON_SLURM_ENV:-/etc/fabricmon/slurm.env}
# shellcheck source=/dev/null
[ -r "$env_file" ] && . "$env_file"
fabricmon=${FABRICMON:-fabricmon}
job=${SLURM_JOB_ID:?SLURM_JOB_ID is not set: run me as the EpilogSlurmctld of Slurm}
# shellcheck disable=SC2086
if ! out=$($fabricmon ${FABRICMON_ARGS:-} job end --name="$job" 2>&1); then
  logger -t fabricmon-epilog "job $job: $out" 2>/dev/null
fi
exit 0
