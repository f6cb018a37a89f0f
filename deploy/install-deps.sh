#!/usr/bin/env bash
# Installs every Debian (bookworm) package that fabricmon's build, tests and demo need.
# Idempotent and non-interactive: packages already present are skipped without touching apt.
set -euo pipefail

PACKAGES=(
  # toolchain
  g++ cmake ninja-build pkg-config git
  # libraries fabricmon links
  libabsl-dev libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc
  prometheus-cpp-dev libcivetweb-dev zlib1g-dev libsystemd-dev libssl-dev
  libibverbs-dev libibumad-dev libibmad-dev libibnetdisc-dev libre2-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  infiniband-diags ibsim-utils opensm
  prometheus prometheus-node-exporter
  iproute2 ethtool iperf3 procps python3
  # deploy tests: systemd-analyze/systemd-sysusers, dpkg-shlibdeps (CPack DEB), YAML parsing
  systemd dpkg-dev python3-yaml
  # sanitizers and fuzzing; openssl makes the test CA and certificates (tests/security)
  clang libclang-rt-14-dev openssl
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# --no-install-recommends keeps the prometheus server from pulling in its web-console extras.
# policy-rc.d: never start the packaged prometheus/node-exporter services; tests run their own.
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod +x /usr/sbin/policy-rc.d
  trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
fi
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
