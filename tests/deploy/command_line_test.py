#!/usr/bin/env python3
"""The operator's command line of the three built binaries (fabricmon-agent, fabricmon-aggregator,
fabricmon), run as an operator would:

  * --help: exit 0, the usage lines and the binary's own flags (not Abseil's, not another
    module's), the CLI's commands; --version: "<binary> <project version> (git <rev>)", exit 0,
    and the revision is a commit of this repository (or "unknown" outside a git checkout:
    cmake/git_revision.cmake on a copy of the tree without .git, and inside another repository);
  * an unknown flag, a flag without its value, a value that does not parse: exit 2 and exactly
    one line on stderr ending "; see --help";
  * --check_config: "config OK" and exit 0 without binding anything (the listen ports given are
    held by this test), 1 and the error for a bad config, with the flags overriding the config
    as at a start;
  * journald: with JOURNAL_STREAM naming stderr every stderr line starts with its sd-daemon
    priority (<4> warning, <3> error); without it, or naming another file, lines are unchanged;
  * the manual pages: built from --help, installed by `cmake --install` under share/man/man1 in
    the package components that ship the binaries.

Usage: command_line_test.py --agent=BIN --aggregator=BIN --cli=BIN --source=DIR --build=DIR
                            --version=X.Y.Z
"""

import argparse
import gzip
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree

failures = []


def fail(message):
    failures.append(message)
    print("FAIL: " + message)


def run(argv, env=None, stderr_fd=None, timeout=20):
    """(exit status, stdout, stderr) of argv; stderr read from a pipe we own when stderr_fd."""
    print("running: " + " ".join(argv))
    result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env if env is not None else dict(os.environ), timeout=timeout,
                            text=True)
    return result.returncode, result.stdout, result.stderr


OWN_FLAGS = {
    "fabricmon-agent": ["once", "config", "sysfs_root", "procfs_root", "aggregator", "node_name",
                        "listen_metrics", "metrics_port_file", "log_level", "insecure_plaintext",
                        "check_config", "enable_collectors", "doctor"],
    "fabricmon-aggregator": ["config", "grpc_listen", "metrics_listen", "log_level", "link_list",
                             "topology_file", "port_file", "metrics_port_file", "insecure_plaintext",
                             "check_config", "shard"],
    "fabricmon": ["aggregator", "nodes", "timeout_s", "json", "all", "tls_ca", "tls_cert",
                  "tls_key", "tls_server_name", "name", "job", "slurm_job", "scontrol", "source",
                  "dir", "from", "to", "config", "link_list", "topology_file", "fast", "speed",
                  "listen_metrics"],
}
CLI_COMMANDS = ["nodes", "node NAME", "findings", "diagnose", "topology", "job start", "job end",
                "jobs", "gate", "record export", "replay"]


def check_help(name, binary):
    code, out, err = run([binary, "--help"])
    if code != 0:
        fail(f"{name} --help: exit {code}, expected 0 ({err.strip()})")
    if "No flags matched" in out + err:
        fail(f"{name} --help: Abseil's 'No flags matched'")
    if not out.startswith(f"{name} - "):
        fail(f"{name} --help: does not start with '{name} - <summary>': {out[:80]!r}")
    if f"Usage:\n  {name} " not in out:
        fail(f"{name} --help: no usage line")
    flags = re.findall(r"^  --([a-z_]+)", out, re.M)
    for flag in OWN_FLAGS[name] + ["help", "helpfull", "version"]:
        if flag not in flags:
            fail(f"{name} --help: --{flag} not listed")
    extra = set(flags) - set(OWN_FLAGS[name]) - {"help", "helpfull", "version"}
    if extra:
        fail(f"{name} --help: lists flags that are not its own: {sorted(extra)}")
    for line in out.splitlines():
        if line.startswith("  --") and len(line.split(None, 1)) < 2 and "=" not in line:
            fail(f"{name} --help: flag without help: {line!r}")
    if name == "fabricmon":
        for command in CLI_COMMANDS:
            if not re.search(rf"^  {re.escape(command)}\b", out, re.M):
                fail(f"fabricmon --help: command {command!r} not listed")
    if "Exit status:\n" not in out:
        fail(f"{name} --help: no exit statuses")
    # --helpfull keeps Abseil's list: every flag, ours among them.
    code, out, err = run([binary, "--helpfull"])
    if "--log_level" not in out + err and "--aggregator" not in out + err:
        fail(f"{name} --helpfull: exit {code}, our flags not listed: {(out + err)[:300]!r}")
    print(f"ok: {name} --help lists {len(flags)} flags")


def check_version(name, binary, version, source):
    code, out, err = run([binary, "--version"])
    match = re.fullmatch(rf"{re.escape(name)} (\S+) \(git ([0-9a-f]{{7,}}(-dirty)?|unknown)\)\n",
                         out)
    if code != 0 or match is None:
        fail(f"{name} --version: exit {code}, output {out!r} (stderr {err.strip()!r})")
        return
    if match.group(1) != version:
        fail(f"{name} --version says {match.group(1)}, CMakeLists.txt project() says {version}")
    revision = match.group(2)
    git = shutil.which("git")
    in_git = git and subprocess.run([git, "-C", source, "rev-parse", "--show-toplevel"],
                                    capture_output=True).returncode == 0
    if revision == "unknown":
        if in_git:
            fail(f"{name} --version: revision unknown, but {source} is a git checkout")
    elif in_git:
        commit = revision.removesuffix("-dirty")
        if subprocess.run([git, "-C", source, "cat-file", "-e", commit + "^{commit}"],
                          capture_output=True).returncode != 0:
            fail(f"{name} --version: {commit} is not a commit of {source}")
    print(f"ok: {out.strip()}")


def check_revision_without_git(source):
    """cmake/git_revision.cmake says "unknown" for a tree that is not its own git checkout."""
    git = shutil.which("git") or ""
    with tempfile.TemporaryDirectory(prefix="fabricmon-rev-") as tmp:
        tree = os.path.join(tmp, "outer", "fabricmon-0.1.0")
        os.makedirs(tree)
        shutil.copy(os.path.join(source, "CMakeLists.txt"), tree)
        cases = [("a tarball (no .git)", tree)]
        if git:
            subprocess.run([git, "init", "-q", os.path.join(tmp, "outer")], check=True)
            cases.append(("a tarball unpacked inside another repository", tree))
        for what, directory in cases:
            header = os.path.join(tmp, "rev.h")
            subprocess.run(["cmake", f"-DFM_SOURCE_DIR={directory}", f"-DFM_OUTPUT={header}",
                            f"-DFM_GIT={git}", "-P",
                            os.path.join(source, "cmake", "git_revision.cmake")], check=True)
            with open(header) as f:
                text = f.read()
            if '#define FABRICMON_GIT_REVISION "unknown"' not in text:
                fail(f"git_revision.cmake for {what}: {text!r}")
            else:
                print(f"ok: revision 'unknown' for {what}")
            if what.startswith("a tarball (no"):
                # The real tree, for contrast: a revision.
                subprocess.run(["cmake", f"-DFM_SOURCE_DIR={source}", f"-DFM_OUTPUT={header}",
                                f"-DFM_GIT={git}", "-P",
                                os.path.join(source, "cmake", "git_revision.cmake")], check=True)
                with open(header) as f:
                    text = f.read()
                if git and "unknown" in text and subprocess.run(
                        [git, "-C", source, "rev-parse"], capture_output=True).returncode == 0:
                    fail(f"git_revision.cmake for the source tree: {text!r}")


def check_usage_error(name, binary, args, expect):
    code, out, err = run([binary] + args)
    lines = err.splitlines()
    if code != 2:
        fail(f"{name} {' '.join(args)}: exit {code}, expected 2")
    if len(lines) != 1 or not lines[0].endswith("; see --help") or expect not in lines[0]:
        fail(f"{name} {' '.join(args)}: stderr {err!r}, expected one line with {expect!r} "
             "ending '; see --help'")
    else:
        print(f"ok: {name} {' '.join(args)} -> 2: {lines[0]}")


def held_port():
    """A listening socket on a free loopback port: a daemon that tried to bind it would fail."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    return sock, sock.getsockname()[1]


def check_config(agent, aggregator, tmp):
    sock, port = held_port()
    with sock:
        agent_conf = os.path.join(tmp, "agent.textproto")
        with open(agent_conf, "w") as f:
            f.write("collectors { ethtool { enabled: false } nvml { enabled: false }\n"
                    "  ib_fabric { enabled: false } }\n")
        port_file = os.path.join(tmp, "port")
        aggregator_conf = os.path.join(tmp, "aggregator.textproto")
        with open(aggregator_conf, "w") as f:
            f.write("tls { insecure_plaintext: true }\n")
        bad = os.path.join(tmp, "bad.textproto")
        with open(bad, "w") as f:
            f.write("no_such_field: 1\n")
        shard_conf = os.path.join(tmp, "shard.textproto")
        with open(shard_conf, "w") as f:
            f.write("tls { insecure_plaintext: true }\n"
                    'remote_write { url: "http://127.0.0.1:1/api/v1/write" '
                    'external_labels { key: "shard" value: "x" } }\n')
        failover_conf = os.path.join(tmp, "failover.textproto")
        with open(failover_conf, "w") as f:
            f.write('aggregator: "a.example:7470" aggregator: "b.example:7470"\n'
                    "failover_after_ms: 50\n")
        cases = [
            # (name, argv, exit status, text expected on stdout (0) or stderr (1))
            ("agent", [agent, "--check_config", f"--config={agent_conf}", "--insecure_plaintext",
                       "--aggregator=127.0.0.1:1", f"--listen_metrics=127.0.0.1:{port}"],
             0, "config OK"),
            # The flag overrides the config: without --insecure_plaintext and without TLS files
            # the same config cannot stream.
            ("agent", [agent, "--check_config", f"--config={agent_conf}",
                       "--aggregator=127.0.0.1:1"], 1, "TLS"),
            ("agent", [agent, "--check_config", f"--config={agent_conf}"], 1, "nothing to do"),
            # Several aggregators: a list is checked whole, the failover delays by their ranges.
            ("agent", [agent, "--check_config", f"--config={agent_conf}", "--insecure_plaintext",
                       "--aggregator=a.example:7470,b.example:7470,[fd00::1]:7470"], 0,
             "config OK"),
            ("agent", [agent, "--check_config", f"--config={agent_conf}", "--insecure_plaintext",
                       "--aggregator=a.example:7470,a.example:7470"], 1, "listed twice"),
            ("agent", [agent, "--check_config", f"--config={agent_conf}", "--insecure_plaintext",
                       "--aggregator=a.example:7470,b.example"], 1, "no :PORT"),
            ("agent", [agent, "--check_config", f"--config={failover_conf}",
                       "--insecure_plaintext"], 1, "failover_after_ms must be within 100..600000"),
            ("agent", [agent, "--check_config", "--once", f"--config={agent_conf}"], 0,
             "config OK"),
            ("agent", [agent, "--check_config", f"--config={bad}", "--listen_metrics=:1"], 1,
             "no_such_field"),
            ("aggregator", [aggregator, "--check_config", f"--config={aggregator_conf}",
                            f"--grpc_listen=127.0.0.1:{port}", f"--metrics_listen=127.0.0.1:{port}",
                            f"--port_file={port_file}"], 0, "config OK"),
            ("aggregator", [aggregator, "--check_config", f"--config={aggregator_conf}",
                            f"--link_list={os.path.join(tmp, 'missing-links.txt')}"], 1,
             "missing-links.txt"),
            ("aggregator", [aggregator, "--check_config", f"--config={bad}"], 1, "no_such_field"),
            ("aggregator", [aggregator, "--check_config", f"--config={shard_conf}"], 1,
             "set `shard` instead"),
            ("aggregator", [aggregator, "--check_config", "--config=" + os.path.join(tmp, "none")],
             1, "none"),
        ]
        for name, argv, want, text in cases:
            code, out, err = run(argv)
            where = out if want == 0 else err
            if code != want or text not in where:
                fail(f"{name} {' '.join(argv[1:])}: exit {code} (expected {want}), "
                     f"stdout {out!r}, stderr {err[-400:]!r}; expected {text!r}")
            else:
                print(f"ok: {name} --check_config -> {code}")
        if os.path.exists(port_file):
            fail("aggregator --check_config wrote --port_file: it must start nothing")
        # Without --check_config the same aggregator line must fail to bind the held port:
        # proof that the port really was held while --check_config said OK.
        code, _, err = run([aggregator, f"--config={aggregator_conf}",
                            f"--grpc_listen=127.0.0.1:{port}", "--metrics_listen=127.0.0.1:0"])
        if code != 2:
            fail(f"aggregator on a held port exited {code}, expected 2 (test premise)")


def check_journal(aggregator, tmp):
    conf = os.path.join(tmp, "journal.textproto")
    with open(conf, "w") as f:
        f.write("tls { insecure_plaintext: true }\n")
    bad = os.path.join(tmp, "journal-bad.textproto")
    with open(bad, "w") as f:
        f.write("no_such_field: 1\n")

    def stderr_lines(argv, journal):
        read_fd, write_fd = os.pipe()
        st = os.fstat(write_fd)
        env = dict(os.environ)
        env.pop("JOURNAL_STREAM", None)
        if journal == "match":
            env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
        elif journal == "other":
            env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino + 1}"
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=write_fd, env=env)
        os.close(write_fd)
        with os.fdopen(read_fd) as r:
            text = r.read()
        proc.wait(timeout=20)
        return text.splitlines()

    # --check_config logs the plaintext warnings (W) and, with the bad file, an error line.
    good = [aggregator, "--check_config", f"--config={conf}"]
    bad_argv = [aggregator, "--check_config", f"--config={bad}"]
    lines = stderr_lines(good, "match") + stderr_lines(bad_argv, "match")
    if not lines:
        fail("journal: no stderr lines to check")
    for line in lines:
        if not re.match(r"<[0-7]>", line):
            fail(f"journal: line without a priority prefix: {line!r}")
    if not any(line.startswith("<4>W ") for line in lines):
        fail(f"journal: no warning line with <4>: {lines}")
    if not any(line.startswith("<3>fabricmon-aggregator: ") for line in lines):
        fail(f"journal: the configuration error is not <3>: {lines}")
    print(f"ok: {len(lines)} stderr lines under the journal, each with its priority")
    for journal in ("unset", "other"):
        lines = stderr_lines(good, journal) + stderr_lines(bad_argv, journal)
        prefixed = [line for line in lines if re.match(r"<[0-7]>", line)]
        if prefixed or not any(line.startswith("W ") for line in lines):
            fail(f"journal {journal}: lines changed: {lines}")
        else:
            print(f"ok: JOURNAL_STREAM {journal}: lines unchanged")


def check_man_pages(build, tmp):
    for component, pages in (("agent", ["fabricmon-agent.1"]),
                             ("aggregator", ["fabricmon-aggregator.1"]), ("cli", ["fabricmon.1"])):
        prefix = os.path.join(tmp, f"install-{component}")
        result = subprocess.run(["cmake", "--install", build, "--prefix", prefix,
                                 "--component", component], capture_output=True, text=True)
        if result.returncode != 0:
            fail(f"cmake --install --component {component}: {result.stderr[-400:]}")
            continue
        for page in pages:
            path = os.path.join(prefix, "share", "man", "man1", page + ".gz")
            if not os.path.isfile(path):
                fail(f"component {component}: {path} not installed")
                continue
            with gzip.open(path, "rt") as f:
                text = f.read()
            program = page[:-2]
            flag = OWN_FLAGS[program][0].replace("_", "_")
            if (not text.startswith(".\\\"") or f".TH {program.upper().replace('-', chr(92) + '-')} 1"
                    not in text or ".SH OPTIONS" not in text or ".SH \"EXIT STATUS\"" not in text
                    or f".B \\-\\-{flag}" not in text):
                fail(f"{path}: not the manual page expected: {text[:300]!r}")
                continue
            man = shutil.which("man")
            if man:
                rendered = subprocess.run([man, "-l", path], capture_output=True, text=True,
                                          env=dict(os.environ, MANPAGER="cat", MANWIDTH="100"))
                if rendered.returncode != 0 or f"--{flag}" not in rendered.stdout:
                    fail(f"man -l {path}: exit {rendered.returncode} {rendered.stderr[-200:]}")
            print(f"ok: {page} installed with component {component}")


def main():
    parser = argparse.ArgumentParser()
    for name in ("agent", "aggregator", "cli", "source", "build", "version"):
        parser.add_argument(f"--{name}", required=True)
    args = parser.parse_args()
    binaries = {"fabricmon-agent": args.agent, "fabricmon-aggregator": args.aggregator,
                "fabricmon": args.cli}
    for name, binary in binaries.items():
        check_help(name, binary)
        check_version(name, binary, args.version, args.source)
        check_usage_error(name, binary, ["--no_such_flag"], "unknown flag --no_such_flag")
        check_usage_error(name, binary, ["--no_such_flag=3", "--log_level=info"]
                          if name != "fabricmon" else ["--no_such_flag=3", "nodes"],
                          "unknown flag --no_such_flag")
        check_usage_error(name, binary, ["--config"] if name != "fabricmon" else ["--aggregator"],
                          "missing value for --")
        check_usage_error(name, binary, ["--insecure_plaintext=perhaps"]
                          if name != "fabricmon" else ["--timeout_s=soon", "nodes"],
                          "bad value for --")
    check_usage_error("fabricmon-agent", args.agent, ["--log_level=loud", "--once"],
                      "unknown --log_level 'loud'")
    check_usage_error("fabricmon", args.cli, ["frobnicate"], "unknown command 'frobnicate'")
    check_revision_without_git(args.source)
    with tempfile.TemporaryDirectory(prefix="fabricmon-cmdline-") as tmp:
        check_config(args.agent, args.aggregator, tmp)
        check_journal(args.aggregator, tmp)
        check_man_pages(args.build, tmp)
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
