#!/usr/bin/env python3
"""Builds the Debian packages with CPack, lints them, installs them into throwaway roots, and
checks the `cmake --install` tree against the units and the README.

  1. `cpack -G DEB` from the build directory (output in a temp dir, the build tree is untouched
     apart from CPack's staging) → fabricmon-agent_*.deb, fabricmon-aggregator_*.deb,
     fabricmon-cli_*.deb.
  2. `dpkg-deb -f`: package names, version (project version + "-" + the Debian release, equal to
     the first entry of deploy/packaging/debian/changelog), architecture, Section, Maintainer,
     Description; Depends non-empty, from dpkg-shlibdeps (libc6, libgrpc++, libprotobuf; the agent
     also libsystemd0, which its Type=notify unit needs); the daemons Recommend fabricmon-cli,
     which Breaks/Replaces the fabricmon-aggregator that carried /usr/bin/fabricmon.
  3. `dpkg-deb -c` / `--ctrl-tarfile`: the exact file lists, nothing outside /usr and
     /etc/fabricmon, DEBIAN/conffiles = the configuration in /etc/fabricmon, maintainer scripts
     present and executable (none in the CLI package); the packaged units equal deploy/systemd's
     (prefix /usr: no path rewritten); every package has /usr/share/doc/<package>/copyright
     (DEP-5, Apache-2.0, equal to deploy/packaging/debian/copyright) and changelog.Debian.gz
     (gzip -9n: no name, no time stamp; equal to deploy/packaging/debian/changelog); LICENSE is
     the Apache License 2.0.
  4. `lintian` on every .deb: no error (E:); warnings are listed.
  5. `dpkg --root=ROOT --force-script-chrootless --force-depends -i` (root only): a real dpkg
     install into an empty directory, running the maintainer scripts on this machine with
     DPKG_ROOT=ROOT — they must exit 0 without systemd running and create the user fabricmon in
     ROOT/etc/passwd (systemd-sysusers --root), touching nothing outside ROOT (this machine's
     users, /etc/systemd/system and deb-systemd-helper state are compared before and after).
     The postinst's useradd fallback runs too (a PATH without systemd-sysusers, a second root).
     Conffiles: a modified /etc/fabricmon/agent.textproto survives a reinstall and an upgrade to
     a repacked 0.1.0-2+test1 whose conffiles changed (--force-confold), while the unmodified
     aggregator.textproto takes the new version. Then remove (conffiles stay) and purge (gone,
     with /etc/fabricmon). Without root privileges (dpkg chowns files) the test falls back to
     `dpkg-deb -x`.
  6. Runs the INSTALLED binaries: `fabricmon-agent --help`, `fabricmon-agent --once
     --sysfs_root=<gpud-h100 capture> --config=<installed conffile>` (must print the HCA
     counters), `fabricmon-aggregator --help`, `fabricmon --help`.
  7. `systemd-analyze verify --root=ROOT` on the installed units (ExecStart resolved inside ROOT),
     `promtool check config` on the installed scrape.yml (its relative rule_files finds the
     installed rules.yml), when those tools are installed; the Grafana provisioning file points at
     the installed dashboards; the paths README.md's package sections name exist in ROOT.
  8. `cmake --install` with DESTDIR (prefix /usr/local, the README's command; then /usr and
     /opt/fabricmon): units whose ExecStart, --config and AssertPathExists= name the files this
     install put there (<prefix>/bin, GNUInstallDirs' sysconfdir: /usr/local/etc, /etc,
     /etc/opt/fabricmon), the configuration, sysusers entry and udev rule installed; a modified
     configuration is not overwritten by a second install; every /usr/local path README.md names
     exists in the tree; `systemd-analyze verify --root` on the /usr/local units.

Exit 77 (skip) when cpack, dpkg-deb, dpkg-shlibdeps (package dpkg-dev) or lintian is missing.

Usage: packages_test.py --build=DIR --source=DIR --fixtures=DIR
"""

import argparse
import glob
import gzip
import hashlib
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

PACKAGES = ("fabricmon-agent", "fabricmon-aggregator", "fabricmon-cli")
CONFFILES = {"fabricmon-agent": ["/etc/fabricmon/agent.textproto"],
             "fabricmon-aggregator": ["/etc/fabricmon/aggregator.textproto"],
             "fabricmon-cli": []}


def doc_files(package):
    return {f"usr/share/doc/{package}/{name}"
            for name in ("README.md", "copyright", "changelog.Debian.gz")}


FILES = {
    "fabricmon-agent": {
        "usr/bin/fabricmon-agent",
        "usr/lib/systemd/system/fabricmon-agent.service",
        "usr/lib/sysusers.d/fabricmon-agent.conf",
        "etc/fabricmon/agent.textproto",
        "usr/share/fabricmon/agent/90-fabricmon-umad.rules",
        "usr/share/fabricmon/agent/fabric-collector.conf",
        "usr/share/man/man1/fabricmon-agent.1.gz",
    } | doc_files("fabricmon-agent"),
    "fabricmon-aggregator": {
        "usr/bin/fabricmon-aggregator",
        "usr/lib/systemd/system/fabricmon-aggregator.service",
        "usr/lib/sysusers.d/fabricmon-aggregator.conf",
        "etc/fabricmon/aggregator.textproto",
        "usr/share/fabricmon/prometheus/rules.yml",
        "usr/share/fabricmon/prometheus/scrape.yml",
        "usr/share/fabricmon/dashboards/provisioning/dashboards.yml",
        "usr/share/fabricmon/dashboards/provisioning/datasources.yml",
        "usr/share/man/man1/fabricmon-aggregator.1.gz",
    } | doc_files("fabricmon-aggregator"),
    "fabricmon-cli": {"usr/bin/fabricmon", "usr/share/man/man1/fabricmon.1.gz"}
    | {"usr/share/fabricmon/slurm/" + name for name in (
        "prolog-slurmctld.sh", "epilog-slurmctld.sh", "prolog.sh", "fabricmon-slurm.env.example",
        "alertmanager-drain-webhook.py")}
    | doc_files("fabricmon-cli"),
}
UNITS = {"fabricmon-agent": "fabricmon-agent.service",
         "fabricmon-aggregator": "fabricmon-aggregator.service"}


def fail(message):
    failures.append(message)
    print("FAIL: " + message)


def run(cmd, check=True, **kwargs):
    result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            **kwargs)
    if check and result.returncode != 0:
        fail(f"{' '.join(cmd)}: exit {result.returncode}\n{result.stdout[-4000:]}")
    return result


def read(path, mode="r"):
    with open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
        return f.read()


def cpack_value(build, name):
    match = re.search(r'set\(%s "([^"]*)"\)' % re.escape(name),
                      read(os.path.join(build, "CPackConfig.cmake")))
    return match.group(1) if match else None


def expected_dashboards(source):
    return {"usr/share/fabricmon/dashboards/grafana/" + os.path.basename(p)
            for p in glob.glob(os.path.join(source, "dashboards", "grafana", "*.json"))}


def check_metadata(deb, package, version, depends_must):
    fields = {}
    for key in ("Package", "Version", "Architecture", "Section", "Maintainer", "Description",
                "Depends", "Recommends", "Breaks", "Replaces"):
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
    if package == "fabricmon-cli":
        for key in ("Breaks", "Replaces"):
            if fields[key] != "fabricmon-aggregator (<< 0.1.0-2)":
                fail(f"{deb}: {key} {fields[key]!r}: the CLI moved out of fabricmon-aggregator "
                     "0.1.0-1")
    elif fields["Recommends"] != "fabricmon-cli":
        fail(f"{deb}: Recommends {fields['Recommends']!r}, expected 'fabricmon-cli'")


def check_doc(deb, package, tar, source, version):
    """copyright (DEP-5, Apache-2.0) and changelog.Debian.gz (gzip -9n) in /usr/share/doc."""
    doc = f"./usr/share/doc/{package}/"
    copyright_text = tar.extractfile(doc + "copyright").read().decode()
    if copyright_text != read(os.path.join(source, "deploy/packaging/debian/copyright")):
        fail(f"{deb}: copyright differs from deploy/packaging/debian/copyright")
    if not copyright_text.startswith(
            "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n") \
            or not re.search(r"^License: Apache-2\.0$", copyright_text, re.M) \
            or "/usr/share/common-licenses/Apache-2.0" not in copyright_text:
        fail(f"{deb}: copyright is not a DEP-5 file with License: Apache-2.0 pointing at "
             "/usr/share/common-licenses/Apache-2.0")
    raw = tar.extractfile(doc + "changelog.Debian.gz").read()
    # gzip header: FLG (byte 3) without FNAME (0x08), MTIME (bytes 4-7) zero, XFL (byte 8) 2 = -9.
    if raw[3] & 0x08 or raw[4:8] != b"\0\0\0\0" or raw[8] != 2:
        fail(f"{deb}: changelog.Debian.gz is not gzip -9n (name or time stamp stored, or not -9)")
    changelog = gzip.decompress(raw).decode()
    if changelog != read(os.path.join(source, "deploy/packaging/debian/changelog")):
        fail(f"{deb}: changelog.Debian.gz differs from deploy/packaging/debian/changelog")
    head = changelog.splitlines()[0]
    if not head.startswith(f"fabricmon ({version}) "):
        fail(f"{deb}: latest changelog entry {head!r} is not version {version}")


def check_contents(deb, package, expected_files, source, version):
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
    outside = [p for p in files | dirs
               if p and not (p.startswith("usr/") or p in ("usr", "etc", "etc/fabricmon")
                             or p.startswith("etc/fabricmon/"))]
    if outside:
        fail(f"{deb}: paths outside /usr and /etc/fabricmon: {outside}")
    # Control archive: maintainer scripts executable, conffiles = the files in /etc.
    ctrl = subprocess.run(["dpkg-deb", "--ctrl-tarfile", deb], stdout=subprocess.PIPE).stdout
    with tarfile.open(fileobj=io.BytesIO(ctrl)) as tar:
        members = {m.name.lstrip("./"): m for m in tar.getmembers() if m.isfile()}
        for script in ("postinst", "prerm", "postrm"):
            if package == "fabricmon-cli":
                if script in members:
                    fail(f"{deb}: has a {script} (the CLI needs none)")
            elif script not in members:
                fail(f"{deb}: no {script}")
            elif members[script].mode & 0o111 != 0o111:
                fail(f"{deb}: {script} mode {oct(members[script].mode)}")
        conffiles = tar.extractfile(members["conffiles"]).read().decode().split() \
            if "conffiles" in members else []
        etc_files = sorted("/" + f for f in files if f.startswith("etc/"))
        if conffiles != CONFFILES[package] or etc_files != CONFFILES[package]:
            fail(f"{deb}: conffiles {conffiles}, files in /etc {etc_files}, expected "
                 f"{CONFFILES[package]}")
    data = subprocess.run(["dpkg-deb", "--fsys-tarfile", deb], stdout=subprocess.PIPE).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        check_doc(deb, package, tar, source, version)
        # The packaged unit and configuration are deploy/'s, unchanged for prefix /usr.
        unchanged = {}
        if package in UNITS:
            unit = UNITS[package]
            unchanged["./usr/lib/systemd/system/" + unit] = os.path.join("deploy/systemd", unit)
        for conffile in CONFFILES[package]:
            unchanged["." + conffile] = os.path.join("deploy/config",
                                                      os.path.basename(conffile))
        for packaged, src in unchanged.items():
            if tar.extractfile(packaged).read().decode() != read(os.path.join(source, src)):
                fail(f"{deb}: packaged {packaged[1:]} differs from {src}")


def check_license(source):
    text = read(os.path.join(source, "LICENSE"))
    if not re.match(r"\s*Apache License\s+Version 2\.0, January 2004\s", text) or \
            "END OF TERMS AND CONDITIONS" not in text:
        fail("LICENSE is not the Apache License 2.0")
    common = "/usr/share/common-licenses/Apache-2.0"
    if os.path.exists(common) and read(common) != text:
        fail(f"LICENSE differs from {common} (the standard text)")


def check_lintian(debs):
    result = run(["lintian", "--fail-on", "error", "--no-tag-display-limit", *debs],
                 check=False)
    lines = [l for l in result.stdout.splitlines() if re.match(r"[EWIPX]: ", l)]
    errors = [l for l in lines if l.startswith("E: ")]
    warnings = [l for l in lines if l.startswith("W: ")]
    for line in warnings:
        print("lintian " + line)
    if errors or result.returncode != 0:
        fail(f"lintian: exit {result.returncode}, {len(errors)} error(s):\n" +
             "\n".join(errors or result.stdout.splitlines()[-20:]))
    else:
        print(f"ok: lintian: no errors, {len(warnings)} warning(s) (listed above)")


def host_state():
    """What the maintainer scripts must never change on THIS machine."""
    state = {"user": None}
    try:
        state["user"] = pwd.getpwnam("fabricmon").pw_uid
    except KeyError:
        pass
    for d in ("/etc/systemd/system", "/var/lib/systemd/deb-systemd-helper-enabled"):
        listing = []
        for dirpath, dirnames, filenames in os.walk(d):
            listing += [os.path.join(dirpath, n) for n in dirnames + filenames]
        state[d] = sorted(listing)
    return state


def dpkg_root(root, *args, check=True):
    return run(["dpkg", f"--root={root}", "--force-script-chrootless", "--force-depends",
                "--log=/dev/null", *args], check=check)


def make_root(root):
    for d in ("var/lib/dpkg/info", "var/lib/dpkg/updates", "etc"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    open(os.path.join(root, "var/lib/dpkg/status"), "w").close()


def install(root, debs):
    """Installs into root; returns True if maintainer scripts ran."""
    if os.geteuid() != 0:
        print("note: not root: dpkg --root would fail to chown; extracting with dpkg-deb -x "
              "(maintainer scripts not run)")
        for deb in debs:
            run(["dpkg-deb", "-x", deb, root])
        return False
    make_root(root)
    result = dpkg_root(root, "-i", *debs)
    print(result.stdout.strip().splitlines()[-1] if result.stdout.strip() else "")
    return True


def passwd_entry(root):
    path = os.path.join(root, "etc/passwd")
    text = read(path) if os.path.exists(path) else ""
    return [l for l in text.splitlines() if l.startswith("fabricmon:")]


def check_installed_scripts(root):
    if shutil.which("systemd-sysusers"):
        entry = passwd_entry(root)
        if len(entry) != 1 or not entry[0].endswith(":/usr/sbin/nologin"):
            fail(f"postinst did not create user fabricmon in ROOT/etc/passwd: {entry}")
        else:
            print("ok: postinst created " + entry[0])
    status = run(["dpkg", f"--root={root}", "-l", *PACKAGES])
    if len([l for l in status.stdout.splitlines() if l.startswith("ii ")]) != len(PACKAGES):
        fail("packages not in state ii:\n" + status.stdout)
    # Installed disabled: no enablement link, deb-systemd-helper state recorded in ROOT.
    wants = os.path.join(root, "etc/systemd/system/multi-user.target.wants")
    if os.path.isdir(wants) and any(n.startswith("fabricmon") for n in os.listdir(wants)):
        fail(f"a unit was enabled on install: {os.listdir(wants)}")
    state = os.path.join(root, "var/lib/systemd/deb-systemd-helper-enabled")
    if shutil.which("deb-systemd-helper") and not (
            os.path.isdir(state) and
            any("fabricmon-agent.service" in n for n in os.listdir(state))):
        fail("postinst did not record fabricmon-agent.service with deb-systemd-helper in ROOT")


def check_useradd_fallback(tmp, agent_deb):
    """The postinst's useradd path, as on a system without systemd-sysusers."""
    if not shutil.which("useradd"):
        print("note: useradd not installed: fallback not run")
        return
    scripts = os.path.join(tmp, "agent-control")
    run(["dpkg-deb", "-e", agent_deb, scripts])
    root = os.path.join(tmp, "root-useradd")
    os.makedirs(os.path.join(root, "etc"))
    for name, line in (("passwd", "root:x:0:0:root:/root:/bin/bash\n"),
                       ("group", "root:x:0:\n"), ("shadow", "root:*:19000:0:99999:7:::\n"),
                       ("gshadow", "root:*::\n")):
        with open(os.path.join(root, "etc", name), "w") as f:
            f.write(line)
    fakebin = os.path.join(tmp, "bin-without-sysusers")
    os.makedirs(fakebin)
    for tool in ("grep", "getent", "useradd", "deb-systemd-helper", "rm"):
        if shutil.which(tool):
            os.symlink(shutil.which(tool), os.path.join(fakebin, tool))
    env = {"PATH": fakebin, "DPKG_ROOT": root, "DPKG_MAINTSCRIPT_NAME": "postinst"}
    for attempt in ("first", "second"):  # the second finds the user and does nothing
        result = run([os.path.join(scripts, "postinst"), "configure", ""], check=False, env=env)
        if result.returncode != 0:
            fail(f"postinst (useradd fallback, {attempt} run): exit {result.returncode}\n"
                 + result.stdout)
            return
    entry = passwd_entry(root)
    groups = [l for l in read(os.path.join(root, "etc/group")).splitlines()
              if l.startswith("fabricmon:")]
    if len(entry) != 1 or not entry[0].endswith(":/:/usr/sbin/nologin") or len(groups) != 1:
        fail(f"useradd fallback: passwd {entry}, group {groups}")
    elif int(entry[0].split(":")[2]) >= 1000 or entry[0].split(":")[3] != groups[0].split(":")[2]:
        fail(f"useradd fallback: not a system user in its own group: {entry[0]} {groups[0]}")
    else:
        print("ok: postinst without systemd-sysusers created " + entry[0])


def repack_upgrade(tmp, deb, new_version):
    """The same package as version new_version, each conffile with a line appended."""
    tree = os.path.join(tmp, "repack-" + os.path.basename(deb))
    run(["dpkg-deb", "-R", deb, tree])
    control = os.path.join(tree, "DEBIAN", "control")
    text = re.sub(r"^Version: .*$", "Version: " + new_version, read(control), flags=re.M)
    with open(control, "w", encoding="utf-8") as f:
        f.write(text)
    conffiles = os.path.join(tree, "DEBIAN", "conffiles")
    sums = []
    for conffile in (read(conffiles).split() if os.path.exists(conffiles) else []):
        with open(tree + conffile, "a", encoding="utf-8") as f:
            f.write("# changed in %s\n" % new_version)
    for dirpath, dirnames, filenames in os.walk(tree):
        dirnames[:] = [d for d in dirnames if d != "DEBIAN"]
        for name in filenames:
            path = os.path.join(dirpath, name)
            sums.append("%s  %s\n" % (hashlib.md5(read(path, "rb")).hexdigest(),
                                      os.path.relpath(path, tree)))
    with open(os.path.join(tree, "DEBIAN", "md5sums"), "w", encoding="utf-8") as f:
        f.writelines(sorted(sums, key=lambda l: l.split("  ", 1)[1]))
    out = os.path.join(tmp, "upgrade-" + os.path.basename(deb))
    run(["dpkg-deb", "--root-owner-group", "-b", tree, out])
    return out


def check_conffiles_kept(tmp, root, debs, source):
    """install → modify → reinstall → upgrade: the administrator's edit is never overwritten."""
    agent_conf = os.path.join(root, "etc/fabricmon/agent.textproto")
    aggregator_conf = os.path.join(root, "etc/fabricmon/aggregator.textproto")
    local = read(agent_conf) + "# local edit\n"
    with open(agent_conf, "w", encoding="utf-8") as f:
        f.write(local)
    dpkg_root(root, "-i", *debs.values())  # reinstall, same version
    if read(agent_conf) != local:
        fail("reinstall overwrote the modified /etc/fabricmon/agent.textproto")
    new_version = run(["dpkg-deb", "-f", debs["fabricmon-agent"], "Version"]).stdout.strip() \
        + "+test1"
    upgrades = [repack_upgrade(tmp, deb, new_version) for deb in debs.values()]
    dpkg_root(root, "--force-confold", "-i", *upgrades)
    status = run(["dpkg", f"--root={root}", "-s", "fabricmon-agent"]).stdout
    if "Version: " + new_version not in status:
        fail(f"upgrade to {new_version} did not happen:\n{status}")
    if read(agent_conf) != local:
        fail("upgrade overwrote the modified /etc/fabricmon/agent.textproto")
    new_aggregator = read(os.path.join(source, "deploy/config/aggregator.textproto")) + \
        "# changed in %s\n" % new_version
    if read(aggregator_conf) != new_aggregator:
        fail("upgrade did not update the unmodified /etc/fabricmon/aggregator.textproto")
    if not failures:
        print(f"ok: conffiles: local edit kept on reinstall and upgrade to {new_version}, "
              "unmodified conffile updated")


def check_binaries(root, sysfs):
    bindir = os.path.join(root, "usr", "bin")
    agent = os.path.join(bindir, "fabricmon-agent")
    result = run([agent, "--help"], check=False)
    if result.returncode != 0 or "fabricmon-agent --once" not in result.stdout:
        fail(f"installed fabricmon-agent --help: exit {result.returncode}\n{result.stdout}")
    config = os.path.join(root, "etc/fabricmon/agent.textproto")
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


def verify_units(root, units, label):
    if not shutil.which("systemd-analyze"):
        return
    for unit in units:
        result = run(["systemd-analyze", "verify", f"--root={root}", "--man=no",
                      "--generators=no", "--recursive-errors=no", unit], check=False)
        if result.returncode != 0 or result.stdout.strip():
            fail(f"systemd-analyze verify --root {unit} ({label}): exit {result.returncode}\n"
                 + result.stdout)
    print(f"ok: {label} units verify inside the root")


def provisioning_path(root, prefix):
    """options.path of the installed Grafana dashboards provider."""
    text = read(os.path.join(root, prefix.lstrip("/"),
                             "share/fabricmon/dashboards/provisioning/dashboards.yml"))
    match = re.search(r"^\s*path:\s*(\S+)\s*$", text, re.M)
    return match.group(1) if match else None


def check_installed_config(root):
    verify_units(root, UNITS.values(), "installed")
    if shutil.which("promtool"):
        scrape = os.path.join(root, "usr/share/fabricmon/prometheus/scrape.yml")
        result = run(["promtool", "check", "config", scrape], check=False)
        if result.returncode != 0 or "1 rule files found" not in result.stdout:
            fail("promtool check config on the installed scrape.yml:\n" + result.stdout)
        else:
            print("ok: installed scrape.yml + rules.yml pass promtool check config")
    path = provisioning_path(root, "/usr")
    dashboards = glob.glob(os.path.join(root, (path or "/nonexistent").lstrip("/"), "*.json"))
    if len(dashboards) < 4:
        fail(f"Grafana provisioning path {path} holds {len(dashboards)} dashboards in the package")


def readme_section(source, title):
    text = read(os.path.join(source, "README.md"))
    start = text.index("\n" + title + "\n")
    end = re.search(r"\n#{2,3} ", text[start + len(title) + 2:])
    return text[start:start + len(title) + 2 + (end.start() if end else len(text))]


def readme_paths(text, pattern):
    # Paths end at whitespace, quotes, brackets, commas; `{a,b}` expands; trailing `.:)` drop.
    found = set()
    for raw in re.findall(pattern + r"[^\s`'\"<>(),|{]*(?:\{[^}]*\}[^\s`'\"<>(),|]*)?", text):
        raw = raw.rstrip(".:;)")
        brace = re.search(r"\{([^}]*)\}", raw)
        if brace:
            for alt in brace.group(1).split(","):
                found.add(raw[:brace.start()] + alt + raw[brace.end():])
        else:
            found.add(raw)
    return found


def check_readme_paths(source, root, sections, pattern, label, ignore=()):
    paths = set()
    for title in sections:
        paths |= readme_paths(readme_section(source, title), pattern)
    paths = {p for p in paths if not any(p.startswith(i) for i in ignore)}
    missing = sorted(p for p in paths if not glob.glob(glob.escape(root) + p.rstrip("/")))
    if not paths:
        fail(f"README.md ({', '.join(sections)}) names no {pattern} path")
    elif missing:
        fail(f"README.md names paths that the {label} does not install: {missing}")
    else:
        print(f"ok: the {len(paths)} {pattern}... paths README.md names exist in the {label}")


def unit_line(text, key):
    return [l.split("=", 1)[1] for l in text.splitlines() if l.startswith(key + "=")]


def cmake_install(build, destdir, prefix, component=None):
    cmd = ["cmake", "--install", build, "--prefix", prefix]
    if component:
        cmd += ["--component", component]
    return run(cmd, env=dict(os.environ, DESTDIR=destdir))


def check_cmake_install(build, source, tmp):
    """`cmake --install` into DESTDIR trees: units name the paths the install used."""
    cases = (("/usr/local", "/usr/local/etc"), ("/usr", "/etc"),
             ("/opt/fabricmon", "/etc/opt/fabricmon"))
    for prefix, sysconfdir in cases:
        destdir = os.path.join(tmp, "destdir" + prefix.replace("/", "-"))
        # The README's command installs everything; the other prefixes need only the agent.
        if cmake_install(build, destdir, prefix,
                         None if prefix == "/usr/local" else "agent").returncode != 0:
            continue
        tree = os.path.join(destdir, prefix.lstrip("/"))
        unit = read(os.path.join(tree, "lib/systemd/system/fabricmon-agent.service"))
        config = f"{sysconfdir}/fabricmon/agent.textproto"
        want = {"ExecStart": [f"{prefix}/bin/fabricmon-agent --config={config}"],
                "AssertPathExists": [config], "ConditionPathExists": [],
                "Documentation": [f"file:{prefix}/share/doc/fabricmon-agent/README.md"]}
        for key, value in want.items():
            if unit_line(unit, key) != value:
                fail(f"cmake --install --prefix {prefix}: fabricmon-agent.service {key}="
                     f"{unit_line(unit, key)}, expected {value}")
        for path in (config, f"{prefix}/bin/fabricmon-agent",
                     f"{prefix}/lib/sysusers.d/fabricmon-agent.conf",
                     f"{prefix}/share/fabricmon/agent/90-fabricmon-umad.rules",
                     f"{prefix}/share/fabricmon/agent/fabric-collector.conf",
                     f"{prefix}/share/doc/fabricmon-agent/README.md"):
            if not os.path.exists(destdir + path):
                fail(f"cmake --install --prefix {prefix}: {path} not installed")
        installed_config = destdir + config
        if os.path.exists(installed_config) and \
                f'"{sysconfdir}/fabricmon/tls/ca.pem"' not in read(installed_config):
            fail(f"cmake --install --prefix {prefix}: {config} does not name "
                 f"{sysconfdir}/fabricmon/tls/ca.pem")
        if prefix != "/usr/local" or failures:
            continue
        # The README's path: everything installed, nothing overwritten, the README agrees.
        for path in ("/usr/local/bin/fabricmon-aggregator", "/usr/local/bin/fabricmon",
                     "/usr/local/etc/fabricmon/aggregator.textproto",
                     "/usr/local/lib/systemd/system/fabricmon-aggregator.service"):
            if not os.path.exists(destdir + path):
                fail(f"cmake --install: {path} not installed")
        path = provisioning_path(destdir, prefix)
        if path != "/usr/local/share/fabricmon/dashboards/grafana" or \
                len(glob.glob(destdir + path + "/*.json")) < 4:
            fail(f"cmake --install: Grafana provisioning path {path} holds no dashboards")
        local = read(installed_config) + "# local edit\n"
        with open(installed_config, "w", encoding="utf-8") as f:
            f.write(local)
        cmake_install(build, destdir, prefix)
        if read(installed_config) != local:
            fail("a second cmake --install overwrote the modified "
                 "/usr/local/etc/fabricmon/agent.textproto")
        verify_units(destdir, UNITS.values(), "cmake --install (/usr/local)")
        check_readme_paths(source, destdir, ["## Build and install"], "/usr/local/",
                           "cmake --install tree")
    if not failures:
        print("ok: cmake --install: units, configuration, sysusers and udev files follow the "
              "prefix (/usr/local → /usr/local/etc, /usr → /etc, /opt/X → /etc/opt/X); a "
              "modified configuration survives a second install")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--fixtures", required=True)
    parser.add_argument("--keep", action="store_true", help="keep the temp dir")
    args = parser.parse_args()
    for tool, package in (("cpack", "cmake"), ("dpkg-deb", "dpkg"),
                          ("dpkg-shlibdeps", "dpkg-dev"), ("lintian", "lintian")):
        if shutil.which(tool) is None:
            print(f"SKIP: {tool} not installed (Debian package {package})")
            return SKIP
    fixtures = os.environ.get("FABRICMON_SHARED_FIXTURES", args.fixtures)
    sysfs = os.path.join(fixtures, "sysfs", "gpud-h100", "sys")
    if not os.path.isdir(sysfs):
        print(f"SKIP: fixture {sysfs} not found (set FABRICMON_SHARED_FIXTURES)")
        return SKIP
    version = "%s-%s" % (cpack_value(args.build, "CPACK_PACKAGE_VERSION"),
                         cpack_value(args.build, "CPACK_DEBIAN_PACKAGE_RELEASE"))

    tmp = tempfile.mkdtemp(prefix="fabricmon-packages-")
    try:
        check_license(args.source)
        out = os.path.join(tmp, "out")
        result = run(["cpack", "-G", "DEB", "--config",
                      os.path.join(args.build, "CPackConfig.cmake"), "-B", out])
        if result.returncode != 0:
            return 1
        debs = {}
        for package in PACKAGES:
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
        check_metadata(debs["fabricmon-cli"], "fabricmon-cli", version, common)
        expected = dict(FILES)
        expected["fabricmon-aggregator"] = FILES["fabricmon-aggregator"] | \
            expected_dashboards(args.source)
        for package, deb in debs.items():
            check_contents(deb, package, expected[package], args.source, version)
        check_lintian(list(debs.values()))

        root = os.path.join(tmp, "root")
        os.makedirs(root)
        host_before = host_state()
        scripts_ran = install(root, list(debs.values()))
        if scripts_ran:
            check_installed_scripts(root)
            check_useradd_fallback(tmp, debs["fabricmon-agent"])
        check_binaries(root, sysfs)
        check_installed_config(root)
        check_readme_paths(args.source, root,
                           ["### Running under systemd", "### Packages", "## Dashboards"],
                           "/(?:usr|etc)/", "packages", ignore=("/etc/fabricmon/tls",
                                                                 "/usr/local/",
                                                                 "/etc/systemd/", "/etc/udev/",
                                                                 "/etc/grafana/"))
        if scripts_ran:
            check_conffiles_kept(tmp, root, debs, args.source)
            dpkg_root(root, "-r", *PACKAGES)
            left = [p for files in FILES.values() for p in files
                    if os.path.exists(os.path.join(root, p)) and not p.startswith("etc/")]
            if left:
                fail(f"left after dpkg -r: {left}")
            if not os.path.exists(os.path.join(root, "etc/fabricmon/agent.textproto")):
                fail("dpkg -r removed the conffile /etc/fabricmon/agent.textproto (purge does)")
            dpkg_root(root, "-P", *PACKAGES)
            if os.path.exists(os.path.join(root, "etc/fabricmon")):
                fail("/etc/fabricmon left after purge (only our conffiles were in it)")
            state = os.path.join(root, "var/lib/systemd/deb-systemd-helper-enabled")
            if os.path.isdir(state) and any("fabricmon" in n for n in os.listdir(state)):
                fail(f"deb-systemd-helper state left after purge: {os.listdir(state)}")
            if host_state() != host_before:
                fail("the maintainer scripts changed THIS machine (users, /etc/systemd/system or "
                     "deb-systemd-helper state): DPKG_ROOT ignored")
            if not failures:
                print("ok: reinstall, upgrade, remove and purge ran their scripts cleanly")
        check_cmake_install(args.build, args.source, tmp)
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
