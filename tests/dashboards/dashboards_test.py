#!/usr/bin/env python3
"""Tests fabricmon's Grafana dashboards (dashboards/grafana/*.json) and provisioning files.

(a) Static (--static-only runs only this): every dashboard is valid JSON equal to the output of
    dashboards/generate_dashboards.py, has a uid, title and Grafana 9-11 schemaVersion, unique
    panel ids, every panel a ${datasource} datasource and targets with an expr, gridPos inside 24
    columns without overlaps, range windows from $__rate_interval/$__range, and only variables
    that exist (defined before use in chained variable queries; none unused). The linter is
    checked to catch broken copies. dashboards/provisioning/*.yml are checked too.

(b) Live: a real Prometheus (Debian `prometheus` 2.42) scrapes a live fabricmon-aggregator fed by
    two fabricmon-agents on simulated DGX-H100 nodes (sim_nodes.py: sysfs trees from
    tests/sim/gen_sysfs_tree.py mutated every 0.5 s, netdev statistics, /proc/net, ethtool
    stats_dir, the NVML stand-in), with a link list (RoCE topology) and, when ibsim/opensm/
    umad2sim are installed and the agent has the ib_fabric collector, an ibsim InfiniBand fabric
    swept by one agent (switch ports). Faults make findings: LinkDowned bumped twice
    (link_flapping), a RoCE receiver pausing its switch while another node is paused
    (congestion_spreading with victims and depth), an IB port waiting for credits (congestion).
    Then, for every dashboard, the variables are resolved like Grafana does (label_values through
    the series API, All = allValue) and EVERY target's expr runs as an instant and a range query
    ($__rate_interval=1m, $__interval=15s, $__range=1h): an error fails, and so does an empty
    result unless the panel is in ALLOWLIST (with its reason). A second pass picks the first
    concrete value of every variable and checks that nothing errors. Finally `promtool check
    metrics` must be silent on a scrape of the aggregator. When `victoria-metrics` is installed,
    the aggregator also remote-writes to a VictoriaMetrics (external labels cluster, job and
    instance, as a scrape would add them), and
    every query runs against it too, as a Grafana datasource: the same rules, except that a
    target reading `up` or `scrape_*` may be empty there (nothing scrapes).

Bounded waits, free ports, a temporary directory; every child dies with the test (SIGKILL by
PR_SET_PDEATHSIG, SIGTERM/SIGKILL in `finally`). Exit 77 (ctest SKIP) when prometheus/promtool
are not installed, the build outputs are missing, or the agent was built without the ib_sysfs,
netdev or ethtool collector. Without ibsim (or an agent without ib_fabric) or without the NVML
stand-in, the switch or GPU panels are allowlisted for that run, with a note; an ibsim that runs
but is not swept is a failure.

Usage:
  dashboards_test.py --static-only
  dashboards_test.py --agent=BIN --aggregator=BIN [--nvml-standin=LIB] [--keep] [--verbose]
                     [--no-ibsim] [--hold=S]
"""

import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DASHBOARD_DIR = os.path.join(REPO, "dashboards", "grafana")
PROVISIONING_DIR = os.path.join(REPO, "dashboards", "provisioning")
GENERATOR = os.path.join(REPO, "dashboards", "generate_dashboards.py")
SIM_DIR = os.path.join(REPO, "tests", "sim")
sys.dont_write_bytecode = True  # no __pycache__ in the source tree (tests/sim is shared)
sys.path.insert(0, HERE)
sys.path.insert(0, SIM_DIR)
sys.path.insert(0, os.path.join(REPO, "tests", "testing"))

import dashboard_lint as lint  # noqa: E402
import fabricmon_testing as fmt  # noqa: E402
from fabricmon_testing import Failure, PromApi, SKIP, http_get, wait_for  # noqa: E402

JOB = "fabricmon-aggregator"
CLUSTER = "sim-cluster"
RULES = os.path.join(REPO, "deploy", "prometheus", "rules.yml")
RUNBOOKS = os.path.join(REPO, "deploy", "runbooks", "README.md")
PACKAGING = os.path.join(REPO, "deploy", "packaging", "fabricmon_packaging.cmake")
# Where the aggregator package installs the JSON (deploy/packaging/fabricmon_packaging.cmake) and
# the provisioned datasource's uid, which the dashboards' datasource variable defaults to.
INSTALLED_DASHBOARDS = "/usr/share/fabricmon/dashboards/grafana"
DATASOURCE_UID = "fabricmon-prometheus"
CYCLE_S = 0.5
INTERVAL_MS = 500
DEADLINE_S = 85.0
UMAD2SIM = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so"

# Panels whose data legitimately needs something the simulation cannot produce here: an empty
# result is accepted (still no error). (dashboard uid, panel title) → reason. Keep it short.
ALLOWLIST = {}
# Needed only when no InfiniBand switch ports could be simulated (no ibsim/opensm/umad2sim, or
# an agent built without the ib_fabric collector): these panels show nothing but switch ports.
ALLOWLIST_WITHOUT_IBSIM = {
    ("fabricmon-overview", "IB congestion by switch tier (XmitWait share)"):
        "switch ports come only from the ib_fabric collector (MADs to switch PMAs); no ibsim",
    ("fabricmon-overview", "Most congested switches (XmitWait share, top $topk)"):
        "switch ports come only from the ib_fabric collector; no ibsim",
    ("fabricmon-self", "ib_fabric sweeps"):
        "the ib_fabric collector sweeps only a real or ibsim-simulated subnet; no ibsim",
}
VARIABLES_WITHOUT_IBSIM = {("fabricmon-overview", "switch")}
# Needed only when the NVML stand-in library was not built (nvml collector skipped).
ALLOWLIST_WITHOUT_NVML = {
    ("fabricmon-node", title): "no NVML stand-in library in this build"
    for title in ("GPU utilization", "Active NVLinks per GPU", "NVLink errors by GPU and type",
                  "NVLinks with errors in the time range", "Inactive NVLinks",
                  "NVLink5 recoveries", "GPU memory bandwidth utilization",
                  "NVLink error rate, top 10 links")}
ALLOWLIST_WITHOUT_NVML.update({
    ("fabricmon-job", title): "no NVML stand-in library in this build"
    for title in ("NVLink errors per node", "GPU utilization per node")})
VARIABLES_WITHOUT_NVML = {("fabricmon-node", "gpu")}

VERBOSE = False
START = time.monotonic()


def log(*parts):
    print("[dashboards_test %5.1fs]" % (time.monotonic() - START), *parts, file=sys.stderr,
          flush=True)


# ------------------------------------------------------------------------------------------
# (a) Static checks.


def load_dashboards():
    dashboards = {}
    for path in sorted(glob.glob(os.path.join(DASHBOARD_DIR, "*.json"))):
        try:
            dashboards[os.path.basename(path)] = lint.load(path)
        except (OSError, ValueError) as e:
            raise Failure("%s is not valid JSON: %s" % (path, e))
    if len(dashboards) < 4:
        raise Failure("expected the 4 dashboards in %s, found %s" % (DASHBOARD_DIR,
                                                                     sorted(dashboards)))
    return dashboards


def check_linter_catches_mistakes(dashboards):
    """The linter must fail broken copies (so a silent linter cannot pass the dashboards)."""
    name, good = next(iter(sorted(dashboards.items())))
    breakages = {
        "overlap": lambda d: lint.query_panels(d)[1]["gridPos"].update(
            lint.query_panels(d)[0]["gridPos"]),
        "too wide": lambda d: lint.query_panels(d)[0]["gridPos"].update(x=20, w=8),
        "duplicate id": lambda d: lint.query_panels(d)[1].update(id=lint.query_panels(d)[0]["id"]),
        "unknown variable": lambda d: lint.query_panels(d)[0]["targets"][0].update(
            expr="up{node=~\"$no_such_variable\"}"),
        "fixed window": lambda d: lint.query_panels(d)[0]["targets"][0].update(
            expr="rate(up[5m])"),
        "no expr": lambda d: lint.query_panels(d)[0]["targets"][0].update(expr=""),
        "no datasource": lambda d: lint.query_panels(d)[0].pop("datasource"),
        "no uid": lambda d: d.pop("uid"),
        "no cluster filter": lambda d: lint.query_panels(d)[0]["targets"][0].update(
            expr='sum(fabricmon_node_up{job=~"$job"})'),
        "bare metric": lambda d: lint.query_panels(d)[0]["targets"][0].update(
            expr="sum(fabricmon_node_up)"),
        "bad runbook link": lambda d: next(p for p in lint.query_panels(d) if p.get("links"))[
            "links"][0].update(url="https://example.org/runbook"),
        "cluster All not .*": lambda d: next(v for v in d["templating"]["list"]
                                             if v["name"] == "cluster").update(allValue=".+"),
    }
    for what, breakage in breakages.items():
        broken = json.loads(json.dumps(good))
        breakage(broken)
        if not lint.lint(name, broken):
            raise Failure("the linter does not notice a broken dashboard (%s)" % what)


def check_provisioning():
    try:
        import yaml
    except ImportError:
        yaml = None
        log("python3-yaml not available: provisioning files checked as text only")
    files = {}
    for name in ("dashboards.yml", "datasources.yml"):
        path = os.path.join(PROVISIONING_DIR, name)
        try:
            with open(path) as f:
                files[name] = f.read()
        except OSError as e:
            raise Failure("provisioning file missing: %s" % e)
    if yaml is None:
        for name, needle in (("dashboards.yml", "type: file"),
                             ("datasources.yml", "type: prometheus")):
            if needle not in files[name]:
                raise Failure("%s lacks %r" % (name, needle))
        return
    dash = yaml.safe_load(files["dashboards.yml"])
    if dash.get("apiVersion") != 1 or not dash.get("providers"):
        raise Failure("dashboards.yml: want apiVersion 1 and a providers list")
    for provider in dash["providers"]:
        if provider.get("type") != "file" or not provider.get("options", {}).get("path"):
            raise Failure("dashboards.yml: provider %r is not a file provider with options.path"
                          % provider.get("name"))
    ds = yaml.safe_load(files["datasources.yml"])
    if ds.get("apiVersion") != 1 or not ds.get("datasources"):
        raise Failure("datasources.yml: want apiVersion 1 and a datasources list")
    proms = [d for d in ds["datasources"] if d.get("type") == "prometheus"]
    if not proms or not all(d.get("url") and d.get("uid") and d.get("access") == "proxy"
                            for d in proms):
        raise Failure("datasources.yml: want a prometheus datasource with uid, url, access proxy")
    # Provisioning must not take over a site's default datasource; the dashboards find ours by
    # its uid.
    if any(d.get("isDefault") is not False for d in proms):
        raise Failure("datasources.yml: isDefault must be false (it would replace the site's "
                      "default datasource)")
    if [d["uid"] for d in proms] != [DATASOURCE_UID]:
        raise Failure("datasources.yml: want one prometheus datasource of uid %s" % DATASOURCE_UID)
    paths = [p.get("options", {}).get("path") for p in dash["providers"]]
    if paths != [INSTALLED_DASHBOARDS]:
        raise Failure("dashboards.yml: path %s, but the package installs the dashboards in %s"
                      % (paths, INSTALLED_DASHBOARDS))


def check_runbook_links(dashboards):
    """Runbook links name alerts of deploy/prometheus/rules.yml, and every alert has a panel
    that links to its runbook. When deploy/runbooks/README.md exists, every anchor is one of its
    `## <AlertName>` sections."""
    with open(RULES) as f:
        alerts = set(re.findall(r"^\s*- alert:\s*(\w+)\s*$", f.read(), re.M))
    by_anchor = {a.lower(): a for a in alerts}
    linked = set()
    for name, dashboard in dashboards.items():
        for panel in lint.query_panels(dashboard):
            for link in panel.get("links", []):
                anchor = link["url"].rsplit("#", 1)[-1]
                if anchor not in by_anchor:
                    raise Failure("%s / %r links to runbook #%s: no such alert in %s" %
                                  (name, panel["title"], anchor, RULES))
                linked.add(by_anchor[anchor])
    if alerts - linked:
        raise Failure("alerts with no dashboard panel linking to their runbook: %s" %
                      sorted(alerts - linked))
    if os.path.exists(RUNBOOKS):
        with open(RUNBOOKS) as f:
            sections = {h.strip().lower() for h in re.findall(r"^## (.+)$", f.read(), re.M)}
        missing = sorted(a for a in linked if a.lower() not in sections)
        if missing:
            raise Failure("%s has no section for %s" % (RUNBOOKS, missing))
    else:
        log("note: %s not found: runbook anchors checked against rules.yml only" % RUNBOOKS)


def static_checks():
    dashboards = load_dashboards()
    problems = []
    uids, titles = {}, {}
    for name, dashboard in dashboards.items():
        problems += lint.lint(name, dashboard)
        for key, seen in (("uid", uids), ("title", titles)):
            value = dashboard.get(key)
            if value in seen:
                problems.append("%s: %s %r also used by %s" % (name, key, value, seen[value]))
            seen[value] = name
    if problems:
        raise Failure("dashboard problems:\n  " + "\n  ".join(problems))
    check_linter_catches_mistakes(dashboards)
    check_runbook_links(dashboards)
    with open(PACKAGING) as f:
        if "fabricmon/dashboards/grafana" not in f.read():
            raise Failure("%s does not install dashboards in %s" % (PACKAGING,
                                                                   INSTALLED_DASHBOARDS))
    for name, dashboard in dashboards.items():
        ds = next(v for v in dashboard["templating"]["list"] if v["name"] == "datasource")
        if ds.get("current", {}).get("value") != DATASOURCE_UID:
            raise Failure("%s: the datasource variable defaults to %r, not the provisioned "
                          "datasource %s" % (name, ds.get("current"), DATASOURCE_UID))
    result = subprocess.run([sys.executable, GENERATOR, "--check"], capture_output=True,
                            timeout=60)
    if result.returncode != 0:
        raise Failure("dashboards/grafana/*.json differ from dashboards/generate_dashboards.py's "
                      "output (edit the generator and rerun it): %s" %
                      result.stderr.decode(errors="replace").strip())
    check_provisioning()
    panels = sum(len(lint.query_panels(d)) for d in dashboards.values())
    exprs = sum(len(p["targets"]) for d in dashboards.values() for p in lint.query_panels(d))
    log("static: %d dashboards, %d panels, %d queries: structure ok, generator in sync, "
        "provisioning ok" % (len(dashboards), panels, exprs))
    return dashboards


# ------------------------------------------------------------------------------------------
# ibsim (InfiniBand subnet simulator) for switch ports.


class Ibsim:
    """ibsim serving a topology, opensm run once (ports Active with LIDs), and a console for
    PerformanceSet. Clients attach through LD_PRELOAD=libumad2sim.so."""

    def __init__(self, procs, net_file, directory, close_fix=""):
        # umad2sim's close() of a umad fd frees only one of its agents; the fix, preloaded in
        # front, frees all (as the kernel does), so a rediscovering sweeper keeps its slots.
        self.preload = " ".join(p for p in (close_fix, UMAD2SIM) if p)
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        self.socket = "fmdash%d" % os.getpid()
        self.proc = procs.start("ibsim", ["ibsim", "-s", net_file], cwd=directory,
                                env={"IBSIM_SOCKNAME": self.socket}, stdin=subprocess.PIPE)
        self.log_path = procs.children[-1][2]
        self.lock = threading.Lock()
        wait_for("ibsim's prompt", lambda: "sim> " in open(self.log_path, errors="replace").read(),
                 timeout_s=15, interval_s=0.05, procs=procs)

    def client_env(self, sim_host=None):
        env = {"LD_PRELOAD": self.preload, "IBSIM_SOCKNAME": self.socket, "OSM_TMP_DIR": self.dir,
               "OSM_CACHE_DIR": self.dir}
        if sim_host:
            env["SIM_HOST"] = sim_host
        return env

    def run_opensm(self):
        result = subprocess.run(["opensm", "-o", "-f", os.path.join(self.dir, "opensm.log")],
                                cwd=self.dir, env=dict(os.environ, **self.client_env()),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                timeout=30, preexec_fn=fmt.die_with_parent)
        if result.returncode != 0:
            raise Failure("opensm exited %d (log %s/opensm.log)" % (result.returncode, self.dir))

    def console(self, command):
        with self.lock:
            self.proc.stdin.write((command + "\n").encode())
            self.proc.stdin.flush()

    def perf_set(self, switch, port, field, value):
        self.console('PerformanceSet "%s"[%d] %s=%d' % (switch, port, field, value))


def ibsim_unavailable_reason(agent):
    for tool in ("ibsim", "opensm"):
        if shutil.which(tool) is None:
            return "%s not installed" % tool
    if not os.access(UMAD2SIM, os.R_OK):
        return "%s missing (ibsim-utils)" % UMAD2SIM
    with open(agent, "rb") as f:
        if b"fabricmon_ib_fabric_sweep_duration_seconds" not in f.read():
            return "the agent was built without the ib_fabric collector"
    return None


# ------------------------------------------------------------------------------------------
# (b) Live queries.


def resolve_variables(prom, uid, dashboard, mode, missing_ok):
    """Values of the dashboard's variables as Grafana would interpolate them into PromQL.
    mode "default": the saved default (All → allValue); "first": the first option."""
    values = {}
    notes = []
    for v in dashboard["templating"]["list"]:
        name, kind = v["name"], v["type"]
        if kind == "datasource":
            values[name] = "prometheus"
            continue
        if kind in ("custom", "textbox", "constant"):
            current = v.get("current", {}).get("value")
            if mode == "first" and kind == "custom":
                current = v["query"].split(",")[0]
            values[name] = current if current is not None else v.get("query", "")
            continue
        selector, label = lint.parse_label_values(
            lint.interpolate(lint.variable_query(v), values))
        try:
            options = prom.label_values(selector, label)
        except Failure as e:
            raise Failure("%s: variable %s: %s" % (uid, name, e))
        if not options and (uid, name) not in missing_ok:
            raise Failure("%s: variable %s: label_values returned nothing (%s)" %
                          (uid, name, lint.variable_query(v)))
        multi = v.get("multi") or v.get("includeAll")
        if v.get("includeAll") and (mode == "default" or not options):
            values[name] = v.get("allValue") or "(%s)" % "|".join(
                lint.regex_escape(o) for o in options)
        elif options:
            values[name] = lint.regex_escape(options[0]) if multi else options[0]
        else:
            values[name] = ""
        notes.append("%s=%s" % (name, values[name]))
    return values, notes


METRIC_RE = re.compile(r"\b((?:fabricmon|scrape)_[a-z0-9_]+|up)\s*(?=[{\[)])")


# VictoriaMetrics fed by the aggregator's remote_write holds no scrape series: an empty result is
# accepted for a target that reads `up` or `scrape_*` (they exist only where something scrapes).
SCRAPE_ONLY_RE = re.compile(r"\b(?:up|scrape_[a-z0-9_]+)\s*(?=[{\[)])")


def run_queries(prom, dashboards, ibsim_ok, nvml_ok, remote_write_only=False):
    allow = dict(ALLOWLIST)
    missing_ok = set()
    if not ibsim_ok:
        allow.update(ALLOWLIST_WITHOUT_IBSIM)
        missing_ok |= VARIABLES_WITHOUT_IBSIM
    if not nvml_ok:
        allow.update(ALLOWLIST_WITHOUT_NVML)
        missing_ok |= VARIABLES_WITHOUT_NVML
    failures, allowed_empty, allowed_with_data = [], [], []
    counts = {"queries": 0, "targets": 0}
    series_cache = {}

    def metric_present(name):
        if name not in series_cache:
            series_cache[name] = bool(prom.query("count(%s)" % name))
        return series_cache[name]

    for mode in ("default", "first"):
        for _, dashboard in sorted(dashboards.items()):
            uid = dashboard["uid"]
            values, notes = resolve_variables(prom, uid, dashboard, mode, missing_ok)
            if VERBOSE:
                log("%s (%s): %s" % (uid, mode, ", ".join(notes)))
            for panel in lint.query_panels(dashboard):
                title = panel["title"]
                key = (uid, title)
                for t in panel["targets"]:
                    expr = lint.interpolate(t["expr"], values)
                    where = "%s / %r / %s" % (uid, title, t["refId"])
                    counts["targets"] += mode == "default"
                    try:
                        instant = prom.query(expr)
                        ranged = prom.query_range(expr, 40, 2)
                        counts["queries"] += 2
                    except Failure as e:
                        failures.append("%s [%s]: query failed: %s\n      %s" %
                                        (where, mode, e, expr))
                        continue
                    if mode != "default":
                        continue  # concrete values: only "no error" is required
                    has_data = bool(instant if t.get("instant") else ranged)
                    if has_data:
                        if key in allow:
                            allowed_with_data.append(where)
                        continue
                    if key in allow:
                        allowed_empty.append("%s: %s" % (where, allow[key]))
                        continue
                    if remote_write_only and SCRAPE_ONLY_RE.search(t["expr"]):
                        allowed_empty.append("%s: reads scrape series (up, scrape_*), which "
                                             "remote write does not carry" % where)
                        continue
                    absent = sorted({m for m in METRIC_RE.findall(t["expr"])
                                     if not metric_present(m)})
                    failures.append("%s: %s result is empty%s\n      %s" % (
                        where, "instant" if t.get("instant") else "range",
                        " (no series at all of: %s)" % ", ".join(absent) if absent else
                        " although its metrics exist", expr))
    return failures, allowed_empty, allowed_with_data, counts


def live_test(args, dashboards, workdir):
    prometheus = shutil.which("prometheus")
    promtool = shutil.which("promtool")
    if prometheus is None or promtool is None:
        log("SKIP: prometheus/promtool (Debian package prometheus) not installed")
        return SKIP
    for path in (args.agent, args.aggregator, args.cli):
        if not path or not os.access(path, os.X_OK):
            log("SKIP: build output missing: %s" % path)
            return SKIP
    with open(args.agent, "rb") as f:
        binary = f.read()
    for collector, family in (("ib_sysfs", b"fabricmon_ib_port_xmit_wait_total"),
                              ("netdev", b"fabricmon_netdev_info"),
                              ("ethtool", b"fabricmon_roce_pfc_pause_duration_seconds_total")):
        if family not in binary:
            log("SKIP: the agent was built without the %s collector (FABRICMON_SKIP_COLLECTORS)"
                % collector)
            return SKIP
    nvml = args.nvml_standin if args.nvml_standin and os.path.exists(args.nvml_standin) else None
    if nvml is None:
        log("note: NVML stand-in library not found (%s): GPU panels allowlisted" %
            args.nvml_standin)
    import gen_sysfs_tree as gst
    import sim_nodes

    procs = fmt.Processes(workdir, log=log, verbose=VERBOSE, stop_grace_s=3)
    stop = threading.Event()
    cycler = None
    try:
        # Simulated nodes and fabric files.
        nodes = [sim_nodes.Node(gst, workdir, "gpu-node-%02d" % i, i) for i in (1, 2)]
        for i, node in enumerate(nodes):
            node.generate(seed=i + 1)
        link_list = os.path.join(workdir, "links.txt")
        with open(link_list, "w") as f:
            f.write(sim_nodes.link_list_text(nodes))
        log("generated %d nodes (dgx-h100 sysfs trees, ethtool stats, /proc/net, NVML state)"
            % len(nodes))

        # Aggregator: gRPC on port 0 (port file), /metrics on a free port (another if taken).
        port_file = os.path.join(workdir, "grpc.port")
        # VictoriaMetrics as a second datasource, fed only by the aggregator's remote_write, with
        # the cluster, job and instance labels the Prometheus path gets from its scrape.
        vm_port = None
        vm_binary = shutil.which("victoria-metrics")
        remote_write = ""
        if vm_binary is not None:
            _, vm_port = procs.start_server(
                "victoria-metrics",
                lambda port: [vm_binary, "-storageDataPath=" + os.path.join(workdir, "vm"),
                              "-httpListenAddr=127.0.0.1:%d" % port, "-retentionPeriod=1d",
                              "-loggerLevel=ERROR", "-search.latencyOffset=0s"],
                lambda port: http_get("http://127.0.0.1:%d/health" % port).strip() == "OK")
            remote_write = (
                'remote_write { url: "http://127.0.0.1:%d/api/v1/write" '
                'external_labels { key: "cluster" value: "%s" } '
                'external_labels { key: "job" value: "%s" } '
                'external_labels { key: "instance" value: "aggregator-1" } '
                'queue { batch_send_deadline_ms: 200 } }\n' % (vm_port, CLUSTER, JOB))
        else:
            log("note: victoria-metrics not installed: the dashboards are not run against it")
        with open(os.path.join(workdir, "aggregator.textproto"), "w") as f:
            f.write('tls { insecure_plaintext: true }\nnode_stale_after_ms: 10000\n'
                    'detectors { tick_ms: 500 flap_window_s: 120 }\n' + remote_write)

        def aggregator_argv(port):
            if os.path.exists(port_file):
                os.unlink(port_file)
            return [args.aggregator, "--config=" + os.path.join(workdir, "aggregator.textproto"),
                    "--grpc_listen=127.0.0.1:0", "--port_file=" + port_file,
                    "--metrics_listen=127.0.0.1:%d" % port, "--link_list=" + link_list,
                    "--log_level=warning"]

        _, metrics_port = procs.start_server(
            "aggregator", aggregator_argv, lambda port: os.path.exists(port_file) and
            "fabricmon_aggregator_streams" in http_get("http://127.0.0.1:%d/metrics" % port))
        grpc_port = int(open(port_file).read().strip())
        metrics_url = "http://127.0.0.1:%d/metrics" % metrics_port

        # Prometheus (slowest to start: started now, waited for after the agents).
        # The `cluster` label as a multi-cluster site's Thanos/Mimir shows it (there an external
        # label; a target label here): the cluster variable resolves to a value.
        prometheus_server = fmt.Prometheus(procs, prometheus, os.path.join(workdir, "prometheus"),
                                           JOB, metrics_port,
                                           labels={"cluster": CLUSTER}).launch()

        # ibsim (switch ports), when it can work here.
        ibsim = None
        why = "--no-ibsim" if args.no_ibsim else ibsim_unavailable_reason(args.agent)
        if why is None:
            try:
                net = os.path.join(workdir, "fabric.net")
                with open(net, "w") as f:
                    f.write(sim_nodes.ibsim_net_text(nodes))
                ibsim = Ibsim(procs, net, os.path.join(workdir, "ibsim"), args.umad2sim_close_fix)
                ibsim.run_opensm()
                log("ibsim fabric up (opensm done): leaf01, leaf02, spine01")
            except (Failure, OSError, subprocess.SubprocessError) as e:
                why = "ibsim did not start: %s" % e
                if ibsim is not None:
                    procs.forget(ibsim.proc)
                ibsim = None
        if ibsim is None:
            log("note: no InfiniBand switch ports (%s); switch panels allowlisted" % why)

        # Agents. The first node sweeps the ibsim subnet (ib_fabric over umad2sim).
        for node in nodes:
            sweeper = ibsim is not None and node is nodes[0]
            config = os.path.join(node.dir, "agent.textproto")
            with open(config, "w") as f:
                f.write(node.agent_config("127.0.0.1:%d" % grpc_port, nvml, INTERVAL_MS,
                                          ib_fabric=sweeper))
            env = {"FABRICMON_NVML_STANDIN_STATE": node.nvml_state}
            cwd = node.dir
            if sweeper:
                env.update(ibsim.client_env(sim_nodes.ibsim_id(node, "mlx5_0")))
                cwd = os.path.join(workdir, "ibsim", "sweeper")  # umad2sim's fake sysfs
                os.makedirs(cwd, exist_ok=True)
            procs.start("agent-" + node.name, [args.agent, "--config=" + config,
                                               "--log_level=warning"], env=env, cwd=cwd)

        # A registered job of both nodes, for the job dashboard (fabricmon_job_node_info).
        registered = subprocess.run(
            [args.cli, "--aggregator=127.0.0.1:%d" % grpc_port, "job", "start",
             "--name=sim-job", "--nodes=" + ",".join(node.name for node in nodes)],
            capture_output=True, text=True, timeout=30)
        if registered.returncode != 0:
            raise Failure("fabricmon job start: %s" % (registered.stdout + registered.stderr))

        # Traffic and faults, every CYCLE_S until the end. Link-down events start once
        # Prometheus scrapes both nodes (increase() needs a sample before the event).
        faults_on = threading.Event()
        cycle_errors = []

        def cycle_loop():
            try:
                run_cycles()
            except Exception as e:  # reported by the main thread
                cycle_errors.append("%s: %s" % (type(e).__name__, e))

        def run_cycles():
            fault_cycle = 0
            # IB incast toward gpu-node-01 mlx5_1 through the spine: leaf01's uplink, spine01's
            # port to leaf02 and leaf02's port to the host wait for credits: a congestion tree
            # rooted at leaf02 port 1, two hops deep (a switch-port root).
            switch_counters = {("leaf01", sim_nodes.IB_UPLINK_PORT): [10**9, 0],
                               ("spine01", 2): [10**9, 0], ("leaf02", 1): [10**9, 0]}
            # RoCE: gpu-node-01 pauses its switch all the time (slow receiver, root);
            # gpu-node-02 is paused 30 % of the time (victim behind the spine).
            nodes[0].pause_fraction["tx"]["3"] = 1.0
            nodes[1].pause_fraction["rx"]["3"] = 0.3
            # IB: gpu-node-02 mlx5_4 waits for credits (~9 % XmitWait share: congestion).
            nodes[1].wait_for_credits("mlx5_4", 6 * 10**7)
            # A bad cable: symbol and receive errors on gpu-node-02 mlx5_7 (link_degraded), CRC
            # errors on its RoCE port.
            nodes[1].port_errors("mlx5_7", "symbol_error", 2)
            nodes[1].port_errors("mlx5_7", "port_rcv_errors", 1)
            nodes[1].phy_crc_errors_per_cycle = 3
            last = time.monotonic()
            while not stop.is_set():
                if faults_on.is_set():
                    fault_cycle += 1
                    if fault_cycle % 20 in (1, 4):
                        nodes[1].link_down("mlx5_2")  # twice within flap_window_s: flapping
                        nodes[0].carrier_flap("ib5")
                        nodes[1].roce_link_down()
                now = time.monotonic()
                for node in nodes:
                    node.advance(now - last)
                last = now
                if ibsim is not None:
                    for (switch, port), c in switch_counters.items():
                        c[0] += 2 * 10**7  # data words: ~160 MB/s
                        c[1] = min(sim_nodes.MAX32, c[1] + 5 * 10**6)  # ~20 % XmitWait share
                        try:
                            ibsim.perf_set(switch, port, "PortCountersExtended.PortXmitData",
                                           c[0])
                            ibsim.perf_set(switch, port, "PortCounters.PortXmitWait", c[1])
                        except OSError:
                            pass
                stop.wait(CYCLE_S)

        cycler = threading.Thread(target=cycle_loop, daemon=True)
        cycler.start()

        base = prometheus_server.wait_ready().url
        prom = PromApi(base)
        wants = ['up{job="%s"} == 1' % JOB,
                 "count(fabricmon_node_up == 1) == 2",
                 'fabricmon_finding_active{kind="link_flapping"}',
                 'fabricmon_finding_victims{kind="congestion_spreading"}',
                 "fabricmon_gpu_utilization_ratio" if nvml else "up",
                 'fabricmon_roce_pfc_pause_duration_seconds_total',
                 'fabricmon_job_node_info{job_name="sim-job"}']
        for want in wants:
            if "link_flapping" in want:
                faults_on.set()
            if cycle_errors:
                raise Failure("the simulation stopped: %s" % cycle_errors[0])
            wait_for(want, lambda: prom.query(want), max(1.0, DEADLINE_S - 40 -
                                                         (time.monotonic() - START)),
                     0.25, procs)
            if VERBOSE:
                log("present:", want)
        if ibsim is not None:
            # ibsim runs: the switch panels must have data. An agent that cannot sweep it is a
            # failure of the product, not a reason to skip those panels.
            try:
                wait_for("switch ports", lambda: prom.query(
                    'fabricmon_ib_port_xmit_wait_total{switch!=""}'), 15, 0.25, procs)
            except Failure:
                procs.dump_logs(only="agent-gpu-node-01")
                raise Failure("ibsim is up but gpu-node-01's ib_fabric collector produced no "
                              "switch ports (agent log above)")
        log("data in Prometheus: nodes up, findings (link_flapping, congestion_spreading), RoCE"
            + (", NVML" if nvml else "") + (", switch ports" if ibsim else ""))
        # Let a few more scrapes land so rate() windows hold several samples everywhere.
        time.sleep(4)

        failures, allowed_empty, allowed_with_data, counts = run_queries(
            prom, dashboards, ibsim is not None, nvml is not None)
        log("ran %d queries for %d targets (instant + range, two variable passes)" %
            (counts["queries"], counts["targets"]))
        for line in allowed_empty:
            log("allowlisted empty:", line)
        for line in allowed_with_data:
            log("note: allowlisted panel has data now (the allowlist entry may go):", line)
        if vm_port is not None:
            http_get("http://127.0.0.1:%d/internal/force_flush" % vm_port)
            vm_failures, vm_empty, _, vm_counts = run_queries(
                PromApi("http://127.0.0.1:%d" % vm_port), dashboards, ibsim is not None,
                nvml is not None, remote_write_only=True)
            log("VictoriaMetrics (remote_write only): ran %d queries for %d targets" %
                (vm_counts["queries"], vm_counts["targets"]))
            for line in vm_empty:
                if VERBOSE or "scrape series" not in line:
                    log("VictoriaMetrics: allowlisted empty:", line)
            failures += ["VictoriaMetrics: " + f for f in vm_failures]

        text = http_get(metrics_url)
        result = subprocess.run([promtool, "check", "metrics"], input=text.encode(),
                                capture_output=True, timeout=30)
        output = (result.stdout + result.stderr).decode(errors="replace").strip()
        if result.returncode != 0 or output:
            failures.append("promtool check metrics on the aggregator's /metrics: exit %d\n%s"
                            % (result.returncode, output))
        else:
            log("promtool check metrics: clean (%d lines)" % len(text.splitlines()))
        if procs.dead():
            failures.append("process(es) exited during the test: %s" % procs.dead())
        if cycle_errors:
            failures.append("the simulation stopped: %s" % cycle_errors[0])
        if args.hold:
            log("holding for %d s: Prometheus %s, aggregator %s" % (args.hold, base, metrics_url))
            time.sleep(args.hold)
        if failures:
            raise Failure("%d problem(s):\n  %s" % (len(failures), "\n  ".join(failures)))
        log("PASS (%.1f s)" % (time.monotonic() - START))
        return 0
    except (Failure, OSError, subprocess.SubprocessError) as e:
        log("FAIL:", e)
        procs.dump_logs()
        return 1
    finally:
        stop.set()
        if cycler is not None:
            cycler.join(timeout=5)
        procs.stop_all()


def main():
    global VERBOSE
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--static-only", action="store_true")
    parser.add_argument("--agent")
    parser.add_argument("--aggregator")
    parser.add_argument("--cli", help="the fabricmon CLI (registers a job for the job dashboard)")
    parser.add_argument("--nvml-standin")
    parser.add_argument("--umad2sim-close-fix", default="",
                        help="preloaded in front of umad2sim for ibsim clients (tests/sim/ibsim)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--no-ibsim", action="store_true",
                        help="run without the ibsim fabric (as on hosts without ibsim)")
    parser.add_argument("--hold", type=int, default=0, metavar="S",
                        help="keep everything running S seconds after the checks (debugging)")
    args = parser.parse_args()
    VERBOSE = args.verbose
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        dashboards = static_checks()
    except Failure as e:
        log("FAIL:", e)
        return 1
    if args.static_only:
        log("PASS (static)")
        return 0
    args.agent = args.agent and os.path.abspath(args.agent)
    args.aggregator = args.aggregator and os.path.abspath(args.aggregator)
    args.cli = args.cli and os.path.abspath(args.cli)
    args.nvml_standin = args.nvml_standin and os.path.abspath(args.nvml_standin)
    with fmt.workdir("fabricmon-dash-", keep=args.keep, tmpfs=True, log=log) as workdir:
        return live_test(args, dashboards, workdir)


if __name__ == "__main__":
    sys.exit(main())
