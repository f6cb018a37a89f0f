#!/usr/bin/env bash
# deploy/install-deps.sh never changes what boots: after it ran (the test command runs it first),
# none of the test-only daemons it installs is enabled at boot, and the script itself still
# declares every such unit it installs. Exit 77 (skipped) without systemctl.
set -uo pipefail
source_dir=${1:?usage: install_deps_boot_test.sh SOURCE_DIR}
script="$source_dir/deploy/install-deps.sh"
command -v systemctl >/dev/null || { echo "systemctl not installed"; exit 77; }

# The units the script promises to leave disabled, read from the script itself.
mapfile -t units < <(sed -n 's/^TEST_DAEMON_UNITS=(\(.*\))$/\1/p' "$script" | tr ' ' '\n' | grep .)
if ((${#units[@]} == 0)); then
  echo "FAIL: no TEST_DAEMON_UNITS in $script"; exit 1
fi
# Every test package that ships a boot-enabled daemon must be in that list: a package added to
# the test list later cannot slip through. Packages ship units under /lib/systemd/system;
# templates (name@.service) are enabled only per instance, never by a postinst.
mapfile -t test_packages < <(sed -n '/^TEST_PACKAGES=(/,/^)/p' "$script" | sed 's/#.*//' |
  tr ' ' '\n' | grep -vE '^(TEST_PACKAGES=\(|\)|)$')
# Looked up in the shell itself: `printf ... | grep -qx` under pipefail failed whenever grep
# matched and exited before printf had written the rest (SIGPIPE, status 141), a false FAIL.
declare -A declared=()
for unit in "${units[@]}"; do declared[$unit]=1; done
failed=0
for pkg in "${test_packages[@]}"; do
  # systemd is the init system itself (the machine that boots with it already has it; one
  # without it does not boot it because a package was installed).
  [[ $pkg == systemd ]] && continue
  for unit_path in $(dpkg -L "$pkg" 2>/dev/null | grep -E "^/(usr/)?lib/systemd/system/[^/@]+\.service$"); do
    unit=$(basename "$unit_path")
    grep -q '^WantedBy=' "$unit_path" || continue  # nothing a postinst could enable
    if [[ -z ${declared[$unit]:-} ]]; then
      echo "FAIL: $pkg ships $unit but install-deps.sh does not disable it"; failed=1
    fi
  done
done
for unit in "${units[@]}"; do
  state=$(systemctl is-enabled "$unit" 2>/dev/null)
  case "$state" in
    ""|disabled|masked|static|indirect) echo "ok: $unit is ${state:-not installed}" ;;
    *) echo "FAIL: $unit is '$state' at boot after install-deps.sh"; failed=1 ;;
  esac
done
exit $failed
