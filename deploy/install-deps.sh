#!/usr/bin/env bash
# Installs the Debian (bookworm) packages fabricmon's build, runtime, tests and demo need.
# Idempotent and non-interactive: packages already present are skipped without touching apt.
#
#   bash deploy/install-deps.sh [build|runtime|test|all]   (default: all)
#
# Run as root, or as a user with sudo: only the package step is elevated.
#
# It never changes what boots. Several test-only packages ship daemons whose Debian postinst
# enables them at boot (opensm would start a second subnet manager on every InfiniBand port of a
# real GPU node at the next reboot). policy-rc.d keeps them from starting now; afterwards every
# such daemon this script installed is disabled again, so the machine boots as before. A daemon
# that was already installed (the site's own opensm, Prometheus, node exporter) is left alone.
set -euo pipefail

# Libraries and tools that compile fabricmon.
BUILD_PACKAGES=(
  g++ cmake ninja-build pkg-config git
  libabsl-dev libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc
  prometheus-cpp-dev libcivetweb-dev zlib1g-dev libsystemd-dev libssl-dev
  libibverbs-dev libibumad-dev libibmad-dev libibnetdisc-dev libre2-dev
  # remote_write: snappy block compression of WriteRequests; curl posts them; zstd compresses recordings
  libsnappy-dev libcurl4-openssl-dev libzstd-dev
)
# What the daemons need on a node at run time (the shared libraries come with the -dev packages
# above on a build machine; the .debs name their own runtime dependencies).
RUNTIME_PACKAGES=(
  infiniband-diags ethtool iproute2
)
# Tests, benchmarks and the demo.
TEST_PACKAGES=(
  libgtest-dev libgmock-dev libbenchmark-dev
  ibsim-utils opensm
  prometheus prometheus-node-exporter
  iperf3 procps python3
  # deploy tests: systemd-analyze/systemd-sysusers, dpkg-shlibdeps (CPack DEB), YAML parsing
  systemd dpkg-dev python3-yaml
  # packages test: lintian on every built .deb
  lintian
  # sanitizers and fuzzing; openssl makes the test CA and certificates (tests/security)
  clang libclang-rt-14-dev openssl
  # formatting check (.ci/run, tests/check_format.sh)
  clang-format
  # remote_write receivers (VictoriaMetrics; Prometheus above) and a real Slurm for job lookup/gates
  victoria-metrics slurmctld slurmd slurm-client munge
)
# Services that test packages enable at boot in their postinst; tests start their own instances.
TEST_DAEMON_UNITS=(opensm.service prometheus.service prometheus-node-exporter.service iperf3.service victoria-metrics.service slurmctld.service slurmd.service munge.service)

case "${1:-all}" in
  build) PACKAGES=("${BUILD_PACKAGES[@]}") ;;
  runtime) PACKAGES=("${RUNTIME_PACKAGES[@]}") ;;
  test) PACKAGES=("${TEST_PACKAGES[@]}") ;;
  all) PACKAGES=("${BUILD_PACKAGES[@]}" "${RUNTIME_PACKAGES[@]}" "${TEST_PACKAGES[@]}") ;;
  *) echo "usage: $0 [build|runtime|test|all]" >&2; exit 2 ;;
esac

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
unit_file_present() { [[ -e /lib/systemd/system/$1 || -e /usr/lib/systemd/system/$1 ]]; }

missing=()
for p in "${PACKAGES[@]}"; do
  installed "$p" || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: run as root (no sudo here)" >&2; exit 2; }
  SUDO=(sudo)
fi

# Units whose package is about to be installed by this run: those are the ones to disable again.
new_units=()
for unit in "${TEST_DAEMON_UNITS[@]}"; do
  unit_file_present "$unit" || new_units+=("$unit")
done

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
# policy-rc.d: packaged services are not started by their postinst (tests run their own).
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
  printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee /usr/sbin/policy-rc.d >/dev/null
  "${SUDO[@]}" chmod +x /usr/sbin/policy-rc.d
  trap '"${SUDO[@]}" rm -f /usr/sbin/policy-rc.d' EXIT
fi
# --no-install-recommends keeps the prometheus server from pulling in its web-console extras.
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"

for unit in "${new_units[@]}"; do
  unit_file_present "$unit" || continue
  # Removes the boot symlinks (and the SysV links); works without a running systemd
  # (containers). A later upgrade keeps it disabled: the postinst re-enables only a unit that
  # deb-systemd-helper finds enabled.
  "${SUDO[@]}" systemctl --no-reload disable "$unit" >/dev/null 2>&1 || true
  echo "install-deps: $unit installed for the tests, left disabled at boot"
done
