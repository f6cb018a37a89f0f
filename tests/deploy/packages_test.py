#!/usr/bin/env python3
"""Builds the Debian packages with CPack and installs them into a throwaway root.

  1. `cpack -G DEB` from the build directory (output in a temp dir, the build tree is untouched
     apart from CPack's staging) → fabricmon-agent_*.deb, fabricmon-aggregator_*.deb.
  2. `dpkg-deb -f`: package names, version (project version + "-1"), architecture, Section,
     Maintainer, Description; Depends non-empty, from dpkg-shlibdeps (libc6, libgrpc++,
     libprotobuf; the agent also libsystemd0, which its Type=notify unit needs).
  3. `dpkg-deb -c` / `--ctrl-tarfile`: the exact file lists (binaries, unit, sysusers entry, doc
     and examples, Prometheus rules and scrape config, dashboards), nothing outside /usr and
     /etc/fabricmon, no conffiles, maintainer scripts present and executable; the packaged units
     equal deploy/systemd's (prefix /usr: no path rewritten).
  4. `dpkg --root=ROOT --force-script-chrootless --force-depends -i` (root only): a real dpkg
     install into an empty directory, running the maintainer scripts on this machine with
     DPKG_ROOT=ROOT — they must exit 0 without systemd running and create the user fabricmon in
     ROOT/etc/passwd (systemd-sysusers --root), touching nothing outside ROOT. Then reinstall (the
     upgrade path), remove and purge. --root needs no base system in ROOT because the scripts run
     chrootless; without root privileges (dpkg chowns files) the test falls back to `dpkg-deb -x`.
  5. Runs the INSTALLED binaries: `fabricmon-agent --help`, `fabricmon-agent --once
     --sysfs_root=<gpud-h100 capture> --config=<installed example>` (must print the HCA
     counters), `fabricmon-aggregator --help`, `fabricmon --help`.
  6. `systemd-analyze verify --root=ROOT` on the installed units (ExecStart resolved inside ROOT),
     `promtool check config` on the installed scrape.yml (its relative rule_files finds the
     installed rules.yml), when those tools are installed.

Exit 77 (skip) when cpack, dpkg-deb or dpkg-shlibdeps (package dpkg-dev) is missing.

Usage: packages_test.py --build=DIR --source=DIR --fixtures=DIR
"""

import argparse
import glob
import io
import os
import pwd
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

SKIP = 77
failures = []

AGENT_FILES = {
    "usr/bin/fabricmon-agent",
    "usr/lib/systemd/system/fabricmon-agent.service",
    "usr/lib/sysusers.d/fabricmon-agent.conf",
    "usr/share/doc/fabricmon-agent/README.md",
    "usr/share/doc/fabricmon-agent/examples/agent.textproto",
    "usr/share/doc/fabricmon-agent/examples/90-fabricmon-umad.rules",
    "usr/share/doc/fabricmon-agent/examples/fabricmon-agent.service.d/fabric-collector.conf",
    "usr/share/man/man1/fabricmon-agent.1.gz",
}
AGGREGATOR_FILES = {
    "usr/bin/fabricmon-aggregator",
    "usr/bin/fabricmon",
    "usr/lib/systemd/system/fabricmon-aggregator.service",
    "usr/lib/sysusers.d/fabricmon-aggregator.conf",
    "usr/share/doc/fabricmon-aggregator/README.md",
    "usr/share/doc/fabricmon-aggregator/examples/aggregator.textproto",
    "usr/share/fabricmon/prometheus/rules.yml",
    "usr/share/fabricmon/prometheus/scrape.yml",
    "usr/share/man/man1/fabricmon-aggregator.1.gz",
    "usr/share/man/man1/fabricmon.1.gz",
}


def fail(message):
    failures.append(message)
    print("FAIL: " + message)


def run(cmd, check=True, **kwargs):
    result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            **kwargs)
    if check and result.returncode != 0:
        fail(f"{' '.join(cmd)}: exit {result.returncode}\n{result.stdout[-4000:]}")
    return result


def cpack_value(build, name):
    with open(os.path.join(build, "CPackConfig.cmake"), encoding="utf-8") as f:
        match = re.search(r'set\(%s "([^"]*)"\)' % re.escape(name), f.read())
    return match.group(1) if match else None


def expected_dashboards(source):
    found = set()
    root = os.path.join(source, "dashboards")
    for dirpath, _, files in os.walk(root):
        for name in files:
            if name.endswith((".json", ".yml", ".yaml")):
                rel = os.path.relpath(os.path.join(dirpath, name), root)
                found.add("usr/share/fabricmon/dashboards/" + rel)
    return found


def check_metadata(deb, package, version, depends_must):
    fields = {}
    for key in ("Package", "Version", "Architecture", "Section", "Maintainer", "Description",
                "Depends"):
        fields[key] = run(["dpkg-deb", "-f", deb, key]).stdout.strip()
    arch = run(["dpkg", "--print-architecture"]).stdout.strip()
    print(f"{package}: Version {fields['Version']}, Depends: {fields['Depends']}")
    if fields["Package"] != package:
        fail(f"{deb}: Package {fields['Package']!r}, expected {package!r}")
    if fields["Version"] != version:
        fail(f"{deb}: Version {fields['Version']!r}, expected {version!r}")
    if fields["Architecture"] != arch:
        fail(f"{deb}: Architecture {fields['Architecture']!r}, expected {arch!r}")
    for key in ("Section", "Maintainer", "Description"):
        if not fields[key]:
            fail(f"{deb}: empty {key}")
    if not fields["Description"].startswith("fabricmon "):
        fail(f"{deb}: Description summary {fields['Description'].splitlines()[0]!r}")
    depends = [d.strip().split()[0] for d in fields["Depends"].split(",") if d.strip()]
    if not depends:
        fail(f"{deb}: empty Depends (dpkg-shlibdeps did not run?)")
    for pattern in depends_must:
        if not any(re.fullmatch(pattern, d) for d in depends):
            fail(f"{deb}: Depends lacks {pattern}: {depends}")


def check_contents(deb, expected_files, source, unit):
    listing = run(["dpkg-deb", "-c", deb]).stdout.splitlines()
    files, dirs = set(), set()
    for line in listing:
        mode, path = line.split()[0], line.split()[-1]
        path = path[2:] if path.startswith("./") else path
        (dirs if mode.startswith("d") else files).add(path.rstrip("/"))
    missing = expected_files - files
    extra = files - expected_files
    if missing:
        fail(f"{deb}: missing {sorted(missing)}")
    if extra:
        fail(f"{deb}: unexpected {sorted(extra)}")
    if "etc/fabricmon" not in dirs:
        fail(f"{deb}: no /etc/fabricmon directory")
    outside = [p for p in files | dirs
               if p and not (p.startswith("usr/") or p in ("usr", "etc", "etc/fabricmon"))]
    if outside:
        fail(f"{deb}: paths outside /usr and /etc/fabricmon: {outside}")
    # Control archive: maintainer scripts executable, no conffiles.
    ctrl = subprocess.run(["dpkg-deb", "--ctrl-tarfile", deb], stdout=subprocess.PIPE).stdout
    with tarfile.open(fileobj=io.BytesIO(ctrl)) as tar:
        members = {m.name.lstrip("./"): m for m in tar.getmembers() if m.isfile()}
        for script in ("postinst", "prerm", "postrm"):
            if script not in members:
                fail(f"{deb}: no {script}")
            elif members[script].mode & 0o111 != 0o111:
                fail(f"{deb}: {script} mode {oct(members[script].mode)}")
        if "conffiles" in members:
            fail(f"{deb}: ships conffiles (none expected)")
    # The packaged unit is deploy/systemd's, unchanged for prefix /usr.
    data = subprocess.run(["dpkg-deb", "--fsys-tarfile", deb], stdout=subprocess.PIPE).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        packaged = tar.extractfile("./usr/lib/systemd/system/" + unit).read().decode()
    with open(os.path.join(source, "deploy", "systemd", unit), encoding="utf-8") as f:
        if packaged != f.read():
            fail(f"{deb}: packaged {unit} differs from deploy/systemd/{unit}")


def host_has_user(name):
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def dpkg_root(root, *args):
    return run(["dpkg", f"--root={root}", "--force-script-chrootless", "--force-depends",
                "--log=/dev/null", *args])


def install(root, debs):
    """Installs into root; returns True if maintainer scripts ran."""
    if os.geteuid() != 0:
        print("note: not root: dpkg --root would fail to chown; extracting with dpkg-deb -x "
              "(maintainer scripts not run)")
        for deb in debs:
            run(["dpkg-deb", "-x", deb, root])
        return False
    for d in ("var/lib/dpkg/info", "var/lib/dpkg/updates", "etc"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    open(os.path.join(root, "var/lib/dpkg/status"), "w").close()
    result = dpkg_root(root, "-i", *debs)
    print(result.stdout.strip().splitlines()[-1] if result.stdout.strip() else "")
    return True


def check_installed_scripts(root):
    passwd = open(os.path.join(root, "etc/passwd"), encoding="utf-8").read() \
        if os.path.exists(os.path.join(root, "etc/passwd")) else ""
    if shutil.which("systemd-sysusers"):
        entry = [l for l in passwd.splitlines() if l.startswith("fabricmon:")]
        if len(entry) != 1 or not entry[0].endswith(":/usr/sbin/nologin"):
            fail(f"postinst did not create user fabricmon in ROOT/etc/passwd: {passwd!r}")
        else:
            print("ok: postinst created " + entry[0])
    status = run(["dpkg", f"--root={root}", "-l", "fabricmon-agent", "fabricmon-aggregator"])
    if len([l for l in status.stdout.splitlines() if l.startswith("ii ")]) != 2:
        fail("packages not in state ii:\n" + status.stdout)


def check_binaries(root, sysfs):
    bindir = os.path.join(root, "usr", "bin")
    agent = os.path.join(bindir, "fabricmon-agent")
    result = run([agent, "--help"], check=False)
    if result.returncode != 0 or "fabricmon-agent --once" not in result.stdout:
        fail(f"installed fabricmon-agent --help: exit {result.returncode}\n{result.stdout}")
    config = os.path.join(root, "usr/share/doc/fabricmon-agent/examples/agent.textproto")
    result = run([agent, "--once", f"--sysfs_root={sysfs}", f"--config={config}"])
    series = [l for l in result.stdout.splitlines()
              if l.startswith("fabricmon_ib_port_xmit_data_bytes_total{")]
    if result.returncode == 0 and not series:
        fail("installed fabricmon-agent --once printed no fabricmon_ib_port_xmit_data_bytes_total:"
             "\n" + result.stdout[-2000:])
    elif result.returncode == 0:
        print(f"ok: installed fabricmon-agent --once: {len(series)} xmit_data series, "
              f"{len(result.stdout.splitlines())} lines")
    for binary, text in (("fabricmon-aggregator", "fabricmon-aggregator --grpc_listen"),
                         ("fabricmon", "fabricmon [--aggregator=HOST:PORT]")):
        result = run([os.path.join(bindir, binary), "--help"], check=False)
        if result.returncode != 0 or text not in result.stdout:
            fail(f"installed {binary} --help: exit {result.returncode}\n{result.stdout}")
    if not failures:
        print("ok: installed binaries run (--help, --once)")


def check_installed_config(root):
    if shutil.which("systemd-analyze"):
        for unit in ("fabricmon-agent.service", "fabricmon-aggregator.service"):
            result = run(["systemd-analyze", "verify", f"--root={root}", "--man=no",
                          "--generators=no", "--recursive-errors=no", unit], check=False)
            if result.returncode != 0 or result.stdout.strip():
                fail(f"systemd-analyze verify --root {unit}: exit {result.returncode}\n"
                     + result.stdout)
        print("ok: installed units verify inside the root")
    if shutil.which("promtool"):
        scrape = os.path.join(root, "usr/share/fabricmon/prometheus/scrape.yml")
        result = run(["promtool", "check", "config", scrape], check=False)
        if result.returncode != 0 or "1 rule files found" not in result.stdout:
            fail("promtool check config on the installed scrape.yml:\n" + result.stdout)
        else:
            print("ok: installed scrape.yml + rules.yml pass promtool check config")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--fixtures", required=True)
    parser.add_argument("--keep", action="store_true", help="keep the temp dir")
    args = parser.parse_args()
    for tool, package in (("cpack", "cmake"), ("dpkg-deb", "dpkg"),
                          ("dpkg-shlibdeps", "dpkg-dev")):
        if shutil.which(tool) is None:
            print(f"SKIP: {tool} not installed (Debian package {package})")
            return SKIP
    fixtures = os.environ.get("FABRICMON_SHARED_FIXTURES", args.fixtures)
    sysfs = os.path.join(fixtures, "sysfs", "gpud-h100", "sys")
    if not os.path.isdir(sysfs):
        print(f"SKIP: fixture {sysfs} not found (set FABRICMON_SHARED_FIXTURES)")
        return SKIP
    version = f"{cpack_value(args.build, 'CPACK_PACKAGE_VERSION')}-1"

    tmp = tempfile.mkdtemp(prefix="fabricmon-packages-")
    try:
        out = os.path.join(tmp, "out")
        result = run(["cpack", "-G", "DEB", "--config",
                      os.path.join(args.build, "CPackConfig.cmake"), "-B", out])
        if result.returncode != 0:
            return 1
        debs = {}
        for package in ("fabricmon-agent", "fabricmon-aggregator"):
            found = glob.glob(os.path.join(out, f"{package}_*.deb"))
            if len(found) != 1:
                fail(f"cpack produced {found} for {package}")
                return 1
            debs[package] = found[0]
            print(f"built {os.path.basename(found[0])} ({os.path.getsize(found[0])} bytes)")

        common = [r"libc6", r"libgrpc\+\+1\.\d+", r"libprotobuf\d+", r"libabsl\d+"]
        check_metadata(debs["fabricmon-agent"], "fabricmon-agent", version,
                       common + [r"libsystemd0"])
        check_metadata(debs["fabricmon-aggregator"], "fabricmon-aggregator", version, common)
        check_contents(debs["fabricmon-agent"], AGENT_FILES, args.source,
                       "fabricmon-agent.service")
        check_contents(debs["fabricmon-aggregator"],
                       AGGREGATOR_FILES | expected_dashboards(args.source), args.source,
                       "fabricmon-aggregator.service")

        root = os.path.join(tmp, "root")
        os.makedirs(root)
        host_user_before = host_has_user("fabricmon")
        scripts_ran = install(root, list(debs.values()))
        if scripts_ran:
            check_installed_scripts(root)
            if host_has_user("fabricmon") != host_user_before:
                fail("the maintainer scripts changed THIS machine's users (DPKG_ROOT ignored)")
        check_binaries(root, sysfs)
        check_installed_config(root)
        if scripts_ran:
            # Upgrade path (postinst configure with a previous version), then remove and purge.
            dpkg_root(root, "-i", *debs.values())
            dpkg_root(root, "-r", "fabricmon-agent", "fabricmon-aggregator")
            left = [p for p in AGENT_FILES | AGGREGATOR_FILES
                    if os.path.exists(os.path.join(root, p))]
            if left:
                fail(f"left after dpkg -r: {left}")
            dpkg_root(root, "-P", "fabricmon-agent", "fabricmon-aggregator")
            if os.path.exists(os.path.join(root, "etc/fabricmon")):
                fail("/etc/fabricmon left after purge (it is empty and ours)")
            if not failures:
                print("ok: reinstall, remove and purge ran their scripts cleanly")
    finally:
        if args.keep:
            print("kept " + tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"\n{len(failures)} failure(s)")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
