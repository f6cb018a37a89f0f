#!/usr/bin/env python3
"""Checks deploy/systemd/ without a running systemd (works in containers; PID 1 need not be systemd).

  * `systemd-analyze verify` on each unit, alone and with the fabric-collector drop-in: exit 0 AND
    no output (unknown directives and bad values are only warnings for systemd: they fail here).
    verify needs the ExecStart binaries to exist, so the units are copied to a temp dir with
    /usr/bin/fabricmon-* replaced by the built binaries.
  * The directives the deployment depends on (Type=notify, WatchdogSec=30, NotifyAccess=main,
    User=fabricmon matching the sysusers entry, the sandbox, no capabilities, the device policy,
    LimitNOFILE, the config paths, AssertPathExists= on the config and no ConditionPathExists=)
    are present with the expected values. (The units as `cmake --install` writes them for other
    prefixes are checked by packages_test.py.)
  * Every flag used on an ExecStart= line exists in the binary (`--helpfull`).
  * `systemd-analyze security --offline=yes`: prints each unit's exposure score and fails above a
    ceiling (a regression guard; `--offline` needs systemd >= 250, skipped before).

Exit 77 (skip) if systemd-analyze is not installed.

Usage: systemd_units_test.py --source=DIR --agent=BIN --aggregator=BIN
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
UNITS = ("fabricmon-agent.service", "fabricmon-aggregator.service")
DROPIN = "fabricmon-agent.service.d/fabric-collector.conf"
# Exposure ceilings (systemd-analyze security, 0 = locked down .. 10 = unprotected). Measured with
# systemd 252: agent 1.5 (with or without the drop-in), aggregator 1.1.
MAX_EXPOSURE = {"fabricmon-agent.service": 2.0, "fabricmon-aggregator.service": 1.5}

# Directive → expected value, for both units unless noted.
COMMON = {
    "Type": "notify",
    "NotifyAccess": "main",
    "Restart": "on-failure",
    "RestartPreventExitStatus": "2",
    "User": "fabricmon",
    "Group": "fabricmon",
    "LimitNOFILE": "65536",
    "CapabilityBoundingSet": "",
    "AmbientCapabilities": "",
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "ProtectKernelTunables": "yes",
    "ProtectKernelModules": "yes",
    "ProtectControlGroups": "yes",
    "RestrictNamespaces": "yes",
    "SystemCallArchitectures": "native",
}
AGENT = {
    "WatchdogSec": "30",
    "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6 AF_NETLINK",
    "DevicePolicy": "closed",
}
AGGREGATOR = {
    "WatchdogSec": "30",
    "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
    "PrivateDevices": "yes",
}
# Would break the agent's reads (see the unit's comments): /proc/net/* and
# /proc/sys/kernel/random/boot_id vanish with ProcSubset=pid; the fabric is in the host netns.
AGENT_FORBIDDEN = ("ProcSubset", "PrivateNetwork", "PrivateDevices", "PrivateUsers")

failures = []


def fail(message):
    failures.append(message)
    print("FAIL: " + message)


def parse_unit(path):
    """Returns {section: [(key, value), ...]} (values as written, repeated keys kept)."""
    sections = {}
    current = None
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("[") and line.endswith("]"):
                current = sections.setdefault(line[1:-1], [])
                continue
            key, _, value = line.partition("=")
            current.append((key.strip(), value.strip()))
    return sections


def values(sections, section, key):
    return [v for k, v in sections.get(section, []) if k == key]


def run(cmd, **kwargs):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          **kwargs)


def copy_units(source_dir, dest, binaries, with_dropin):
    os.makedirs(dest)
    for unit in UNITS:
        with open(os.path.join(source_dir, unit), encoding="utf-8") as f:
            text = f.read()
        for name, path in binaries.items():
            text = text.replace("/usr/bin/" + name + " ", path + " ")
        with open(os.path.join(dest, unit), "w", encoding="utf-8") as f:
            f.write(text)
    if with_dropin:
        os.makedirs(os.path.join(dest, os.path.dirname(DROPIN)))
        shutil.copy(os.path.join(source_dir, DROPIN), os.path.join(dest, DROPIN))


def check_verify(directory, label):
    for unit in UNITS:
        result = run(["systemd-analyze", "verify", "--man=no", "--generators=no",
                      "--recursive-errors=no", os.path.join(directory, unit)])
        output = result.stdout.strip()
        if result.returncode != 0 or output:
            fail(f"systemd-analyze verify {unit} ({label}): exit {result.returncode}\n{output}")
        else:
            print(f"ok: systemd-analyze verify {unit} ({label}): clean")


def check_security(directory, label):
    for unit in UNITS:
        result = run(["systemd-analyze", "security", "--offline=yes", "--no-pager",
                      os.path.join(directory, unit)])
        match = re.search(r"Overall exposure level for \S+: ([0-9.]+) (\w+)", result.stdout)
        if result.returncode != 0 and match is None:
            if "offline" in result.stdout.lower() and "unrecognized" in result.stdout.lower():
                print("note: systemd-analyze security --offline not supported (systemd < 250)")
                return
            fail(f"systemd-analyze security {unit}: exit {result.returncode}\n{result.stdout}")
            continue
        if match is None:
            fail(f"systemd-analyze security {unit}: no exposure level in\n{result.stdout}")
            continue
        score = float(match.group(1))
        print(f"exposure ({label}): {unit}: {score} {match.group(2)} "
              f"(ceiling {MAX_EXPOSURE[unit]})")
        if score > MAX_EXPOSURE[unit]:
            flagged = [l for l in result.stdout.splitlines() if l.startswith("✗")]
            fail(f"{unit} exposure {score} > {MAX_EXPOSURE[unit]}:\n" + "\n".join(flagged))
        if label == "with drop-in" and unit == "fabricmon-agent.service":
            device_line = [l for l in result.stdout.splitlines() if "DeviceAllow=" in l]
            if not any("char-infiniband_mad:rw" in l for l in device_line):
                fail("the fabric-collector drop-in was not applied: " + repr(device_line))


def check_directives(source_dir, binaries):
    sysusers = open(os.path.join(source_dir, "fabricmon.sysusers.conf"), encoding="utf-8").read()
    if not re.search(r"^u\s+fabricmon\s", sysusers, re.M):
        fail("fabricmon.sysusers.conf does not create user fabricmon")
    for unit in UNITS:
        daemon = unit[:-len(".service")]
        sections = parse_unit(os.path.join(source_dir, unit))
        expected = dict(COMMON)
        expected.update(AGENT if daemon == "fabricmon-agent" else AGGREGATOR)
        for key, want in expected.items():
            got = values(sections, "Service", key)
            if got != [want]:
                fail(f"{unit}: {key}= is {got}, expected [{want!r}]")
        if daemon == "fabricmon-agent":
            for key in AGENT_FORBIDDEN:
                if values(sections, "Service", key):
                    fail(f"{unit}: {key}= must not be set (breaks the agent's reads)")
            allowed = values(sections, "Service", "DeviceAllow")
            if any("infiniband" in v or "uvm" in v for v in allowed):
                fail(f"{unit}: base unit grants {allowed}; InfiniBand MAD access belongs in the "
                     "fabric-collector drop-in only, CUDA (nvidia-uvm) is never needed")
        config = f"/etc/fabricmon/{daemon[len('fabricmon-'):]}.textproto"
        exec_start = values(sections, "Service", "ExecStart")
        if exec_start != [f"/usr/bin/{daemon} --config={config}"]:
            fail(f"{unit}: ExecStart= is {exec_start}")
        # A missing configuration must fail the start loudly (`systemctl status` names the
        # file), not skip it silently as a ConditionPathExists= would.
        if values(sections, "Unit", "AssertPathExists") != [config]:
            fail(f"{unit}: expected AssertPathExists={config}")
        if values(sections, "Unit", "ConditionPathExists"):
            fail(f"{unit}: ConditionPathExists= skips the unit silently; use AssertPathExists=")
        if values(sections, "Install", "WantedBy") != ["multi-user.target"]:
            fail(f"{unit}: expected WantedBy=multi-user.target")
        # Every flag on ExecStart exists in the binary.
        helpfull = run([binaries[daemon], "--helpfull"]).stdout
        for line in exec_start:
            for flag in re.findall(r"\s--([a-z_]+)", " " + line):
                if f"-{flag} " not in helpfull and f"--{flag} " not in helpfull:
                    fail(f"{unit}: ExecStart flag --{flag} unknown to {daemon} --helpfull")
    dropin = parse_unit(os.path.join(source_dir, DROPIN))
    if values(dropin, "Service", "DeviceAllow") != ["char-infiniband_mad rw"]:
        fail(f"{DROPIN}: expected DeviceAllow=char-infiniband_mad rw")
    rules = open(os.path.join(source_dir, "90-fabricmon-umad.rules"), encoding="utf-8").read()
    rule_lines = [l for l in rules.splitlines() if l.strip() and not l.startswith("#")]
    if rule_lines != ['SUBSYSTEM=="infiniband_mad", KERNEL=="umad*", GROUP="fabricmon", '
                      'MODE="0660"']:
        fail(f"90-fabricmon-umad.rules: unexpected rules {rule_lines}")
    if not failures:
        print("ok: directives, ExecStart flags, sysusers, drop-in and udev rule")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    parser.add_argument("--agent", required=True)
    parser.add_argument("--aggregator", required=True)
    args = parser.parse_args()
    if shutil.which("systemd-analyze") is None:
        print("SKIP: systemd-analyze not installed (Debian package systemd)")
        return SKIP
    source_dir = os.path.join(args.source, "deploy", "systemd")
    binaries = {"fabricmon-agent": os.path.abspath(args.agent),
                "fabricmon-aggregator": os.path.abspath(args.aggregator)}
    print(run(["systemd-analyze", "--version"]).stdout.splitlines()[0])
    check_directives(source_dir, binaries)
    with tempfile.TemporaryDirectory(prefix="fabricmon-units-") as tmp:
        plain = os.path.join(tmp, "plain")
        dropin = os.path.join(tmp, "dropin")
        copy_units(source_dir, plain, binaries, with_dropin=False)
        copy_units(source_dir, dropin, binaries, with_dropin=True)
        check_verify(plain, "alone")
        check_verify(dropin, "with drop-in")
        check_security(plain, "alone")
        check_security(dropin, "with drop-in")
    if failures:
        print(f"\n{len(failures)} failure(s)")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
