#!/usr/bin/env python3
"""fabricmon and a real Slurm (Debian slurmctld 22.05 + slurmd + munge) on this one machine.

The test configures everything in a temporary directory and starts it as plain processes: munged
with its own key and socket, slurmctld, and four slurmd (-N fmgpu01..03, fmlogin1, one port
each: several slurmd on one host is how Slurm's own test suite runs multi-node jobs) with the
repository's deploy/slurm/prolog-slurmctld.sh and epilog-slurmctld.sh; a fabricmon-aggregator and
one fabricmon-agent reporting as fmgpu02 on a generated sysfs tree. Nothing under /etc is read or
written (SLURM_CONF, AuthInfo=socket=...).

What it checks:
  1. a 4-node batch job (NodeList fmgpu[01-03],fmlogin1): the PrologSlurmctld registered it as a
     job with its four nodes (`fabricmon jobs`), `--slurm_job` resolves the same nodes, and
     `fabricmon gate --slurm_job` exits 0 while the fabric is healthy;
  2. fmgpu02's link flaps (link_downed rises twice): gate --slurm_job / --job / --nodes=fmgpu02
     exit 1 naming link_flapping on fmgpu02; --nodes=fmgpu01 still 0;
  3. exit 2: an unknown Slurm job, no target, an unreachable aggregator;
  4. the EpilogSlurmctld ends the registration when the job is cancelled;
  5. an enforcing prolog (FABRICMON_GATE=enforce) keeps a job asking for fmgpu02 from running.
Exits 77 (skipped) when Slurm or munge is not installed.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

sys.dont_write_bytecode = True
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests", "testing"))
sys.path.insert(0, os.path.join(REPO, "tests", "sim"))
import fabricmon_testing as fmt  # noqa: E402
import gen_sysfs_tree  # noqa: E402

NODES = ["fmgpu01", "fmgpu02", "fmgpu03", "fmlogin1"]
SICK = "fmgpu02"


def log(*parts):
    print("[slurm_test]", *parts, file=sys.stderr, flush=True)


def write(path, text, mode=0o644):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


def slurm_conf(work, ports, prolog, epilog):
    lines = [
        "ClusterName=fmtest", "SlurmctldHost=localhost",
        "SlurmctldPort=%d" % ports[0], "SlurmdPort=%d" % ports[1],
        "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", "CredType=cred/munge",
        "AuthInfo=socket=%s/munge/munge.sock" % work,
        "StateSaveLocation=%s/state" % work, "SlurmdSpoolDir=%s/spool-%%n" % work,
        "SlurmctldPidFile=%s/slurmctld.pid" % work, "SlurmdPidFile=%s/slurmd-%%n.pid" % work,
        "SlurmctldLogFile=%s/logs/slurmctld-file.log" % work,
        "SlurmdLogFile=%s/logs/slurmd-%%n-file.log" % work,
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none", "SchedulerType=sched/builtin",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU", "MpiDefault=none",
        "MailProg=/bin/true", "ReturnToService=2", "PlugStackConfig=%s/plugstack.conf" % work,
        "PrologSlurmctld=%s" % prolog, "EpilogSlurmctld=%s" % epilog,
    ]
    for i, node in enumerate(NODES):
        lines.append("NodeName=%s NodeHostname=localhost NodeAddr=127.0.0.1 Port=%d CPUs=1 "
                     "RealMemory=100 State=UNKNOWN" % (node, ports[2 + i]))
    lines.append("PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


class Cli:
    def __init__(self, binary, grpc_port, env):
        self.binary = binary
        self.grpc_port = grpc_port
        self.env = env

    def __call__(self, *args, port=None):
        argv = [self.binary, "--aggregator=127.0.0.1:%d" % (port or self.grpc_port),
                "--timeout_s=5"] + list(args)
        result = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=self.env)
        return result.returncode, result.stdout + result.stderr


def expect(condition, what, output=""):
    if not condition:
        raise fmt.Failure("%s\n%s" % (what, output))
    log("ok:", what)


def run(args, work):
    for tool in ("munged", "slurmctld", "slurmd", "scontrol", "sbatch", "scancel"):
        if shutil.which(tool) is None and not os.path.exists("/usr/sbin/" + tool):
            log("SKIP: %s is not installed (Debian packages slurmctld, slurmd, slurm-client, munge)"
                % tool)
            return fmt.SKIP
    sbin = lambda tool: shutil.which(tool) or "/usr/sbin/" + tool  # noqa: E731
    procs = fmt.Processes(work, log=log)
    try:
        # fabricmon: aggregator (plaintext) and an agent for the node that will go bad.
        port_file = os.path.join(work, "grpc.port")
        aggregator_config = write(os.path.join(work, "aggregator.textproto"),
                                  "tls { insecure_plaintext: true }\n")
        procs.start_server(
            "aggregator",
            lambda port: [args.aggregator, "--config=" + aggregator_config,
                          "--grpc_listen=127.0.0.1:0", "--port_file=" + port_file,
                          "--metrics_listen=127.0.0.1:%d" % port],
            lambda port: "fabricmon_aggregator_streams" in fmt.http_get(
                "http://127.0.0.1:%d/metrics" % port), attempts=5)
        grpc_port = int(fmt.wait_for("the aggregator's port file",
                                     lambda: open(port_file).read().strip(), 10, procs=procs))
        sysfs = os.path.join(work, "sys-" + SICK)
        gen_sysfs_tree.generate(sysfs, "minimal", seed=2)
        agent_config = write(os.path.join(work, "agent.textproto"), fmt.HERMETIC_AGENT_CONFIG)
        procs.start("agent", [args.agent, "--config=" + agent_config,
                              "--aggregator=127.0.0.1:%d" % grpc_port, "--node_name=" + SICK,
                              "--sysfs_root=" + sysfs])

        # Slurm and munge.
        os.makedirs(os.path.join(work, "munge"), mode=0o700)
        os.makedirs(os.path.join(work, "state"))
        write(os.path.join(work, "munge", "munge.key"), os.urandom(512).hex(), 0o600)
        write(os.path.join(work, "plugstack.conf"), "")
        conf = os.path.join(work, "slurm.conf")
        env_file = os.path.join(work, "fabricmon-slurm.env")
        write(env_file, 'FABRICMON=%s\nFABRICMON_ARGS="--aggregator=127.0.0.1:%d --timeout_s=5"\n'
              "FABRICMON_GATE=warn\n" % (args.cli, grpc_port))
        # Slurm runs its prolog with an environment of its own: the wrappers point the
        # repository's scripts at this test's env file and slurm.conf.
        wrappers = {}
        for script in ("prolog-slurmctld.sh", "epilog-slurmctld.sh"):
            wrappers[script] = write(
                os.path.join(work, "wrap-" + script),
                "#!/bin/sh\nexport FABRICMON_SLURM_ENV=%s SLURM_CONF=%s PATH=%s\n"
                "echo \"$(date +%%T) $0 job $SLURM_JOB_ID\" >> %s/logs/prologs.log\n"
                "exec %s \"$@\" 2>> %s/logs/prologs.log\n"
                % (env_file, conf, os.environ.get("PATH", "/usr/bin:/bin"), work,
                   os.path.join(REPO, "deploy", "slurm", script), work), 0o755)
        ports = [fmt.free_port() for _ in range(2 + len(NODES))]
        write(conf, slurm_conf(work, ports, wrappers["prolog-slurmctld.sh"],
                              wrappers["epilog-slurmctld.sh"]))
        env = dict(os.environ, SLURM_CONF=conf)
        procs.start("munged", [sbin("munged"), "--foreground", "--force",
                               "--socket=%s/munge/munge.sock" % work,
                               "--key-file=%s/munge/munge.key" % work,
                               "--pid-file=%s/munge/munged.pid" % work,
                               "--seed-file=%s/munge/seed" % work,
                               "--log-file=%s/logs/munged-file.log" % work])
        fmt.wait_for("munged's socket", lambda: os.path.exists(work + "/munge/munge.sock"), 10,
                     procs=procs)
        procs.start("slurmctld", [sbin("slurmctld"), "-D", "-c", "-f", conf], env=env)
        for node in NODES:
            procs.start("slurmd-" + node, [sbin("slurmd"), "-D", "-N", node, "-f", conf], env=env)

        def scontrol(*words):
            return subprocess.run(["scontrol"] + list(words), capture_output=True, text=True,
                                  timeout=30, env=env)

        fmt.wait_for("four idle Slurm nodes", lambda: scontrol("show", "nodes").stdout.count(
            "State=IDLE") == len(NODES), 60, procs=procs)
        cli = Cli(args.cli, grpc_port, env)

        # 1. A 4-node job: registered by the prolog, resolved by --slurm_job, healthy.
        submitted = subprocess.run(["sbatch", "--parsable", "-N", str(len(NODES)), "-o",
                                    os.devnull, "--wrap", "sleep 300"],
                                   capture_output=True, text=True, timeout=30, env=env)
        expect(submitted.returncode == 0, "sbatch -N4", submitted.stderr)
        job = submitted.stdout.strip().split(";")[0]
        fmt.wait_for("job %s running" % job,
                     lambda: "JobState=RUNNING" in scontrol("show", "job", job).stdout, 60,
                     procs=procs)
        node_list = [line.strip() for line in scontrol("show", "job", job).stdout.splitlines()
                     if line.strip().startswith("NodeList=")]
        expect(node_list == ["NodeList=fmgpu[01-03],fmlogin1"],
               "Slurm names the nodes with a hostlist expression", node_list)
        def registered():
            status, out = cli("--json", "jobs")
            if status != 0:
                raise fmt.Failure("fabricmon jobs: exit %d\n%s" % (status, out))
            return {j["name"]: j for j in json.loads(out).get("jobs", [])}

        jobs = registered()
        expect(job in jobs and jobs[job].get("nodes") == sorted(NODES) and
               jobs[job].get("source") == "slurm",
               "the prolog registered job %s with its 4 nodes" % job, jobs)
        status, out = cli("--json", "diagnose", "--slurm_job=" + job)
        expect(status == 0 and all(n in out for n in NODES),
               "diagnose --slurm_job asks about the job's nodes", out)
        status, out = cli("gate", "--slurm_job=" + job)
        expect(status == 0 and "healthy" in out, "gate --slurm_job: healthy fabric, exit 0", out)

        # 2. fmgpu02's link flaps: the gate fails for every way of naming it.
        counter = os.path.join(sysfs, "class", "infiniband", "mlx5_0", "ports", "1", "counters",
                               "link_downed")
        for _ in range(2):
            value = int(open(counter).read().strip())
            write(counter, "%d\n" % (value + 1))
            time.sleep(2.5)  # a sample of each value (1 s interval)
        fmt.wait_for("link_flapping on " + SICK,
                     lambda: "link_flapping" in cli("findings")[1], 30, procs=procs)
        for target in ("--slurm_job=" + job, "--job=" + job, "--nodes=" + SICK):
            status, out = cli("gate", target)
            expect(status == 1 and "link_flapping" in out and SICK in out,
                   "gate %s: exit 1, the finding named" % target, out)
        status, out = cli("gate", "--nodes=fmgpu01")
        expect(status == 0, "gate --nodes=fmgpu01: the other nodes are still healthy", out)

        # 3. No answer is exit 2, never "healthy".
        status, out = cli("gate", "--slurm_job=999999")
        expect(status == 2 and "999999" in out, "gate on an unknown Slurm job: exit 2", out)
        status, out = cli("gate")
        expect(status == 2, "gate without a target: exit 2", out)
        status, out = cli("gate", "--nodes=fmgpu01", port=fmt.free_port())
        expect(status == 2, "gate with the aggregator unreachable: exit 2", out)

        # 4. Cancelling the job runs the EpilogSlurmctld: the registration ends.
        subprocess.run(["scancel", job], env=env, timeout=30, check=True)
        fmt.wait_for("the epilog to end job " + job,
                     lambda: job not in registered(), 60, procs=procs)
        # 5. An enforcing PrologSlurmctld keeps a job off the flapping node.
        write(env_file, open(env_file).read().replace("FABRICMON_GATE=warn",
                                                      "FABRICMON_GATE=enforce"))
        held = subprocess.run(["sbatch", "--parsable", "-N1", "-w", SICK, "-o", os.devnull,
                               "--wrap", "sleep 1"], capture_output=True, text=True,
                              timeout=30, env=env)
        expect(held.returncode == 0, "sbatch -w " + SICK, held.stderr)
        held_job = held.stdout.strip().split(";")[0]
        fmt.wait_for("the prolog of job %s to run" % held_job,
                     lambda: ("job %s: " % held_job) in open(work + "/logs/prologs.log").read(),
                     60, procs=procs)
        time.sleep(2)
        shown = scontrol("show", "job", held_job).stdout
        expect("JobState=RUNNING" not in shown and "JobState=COMPLETED" not in shown,
               "job %s never ran on the unhealthy node (%s)" % (held_job, " ".join(
                   w for w in shown.split() if w.startswith(("JobState=", "Reason=")))), shown)
        subprocess.run(["scancel", held_job], env=env, timeout=30)

        log("PASS")
        return 0
    except fmt.Failure:
        procs.dump_logs()
        prologs = os.path.join(work, "logs", "prologs.log")
        if os.path.exists(prologs):
            log("---- prologs ----\n" + fmt.tail(prologs, 40))
        raise
    finally:
        procs.stop_all()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aggregator", required=True)
    parser.add_argument("--agent", required=True)
    parser.add_argument("--cli", required=True)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    args.aggregator, args.agent, args.cli = (os.path.abspath(path) for path in
                                             (args.aggregator, args.agent, args.cli))
    with fmt.workdir("fabricmon-slurm-", keep=args.keep, log=log) as work:
        try:
            return run(args, work)
        except fmt.Failure as failure:
            log("FAIL:", failure)
            return 1


if __name__ == "__main__":
    sys.exit(main())
