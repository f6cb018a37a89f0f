#!/usr/bin/env python3
"""Checks deploy/kubernetes/ offline (no cluster, no network).

  * Every YAML document parses (python3-yaml) and has apiVersion, kind, metadata.name and
    metadata.namespace fabricmon (except the Namespace and the Kustomization); the
    Kustomization lists every manifest file.
  * Workloads: every container has an image, a command or args, resources (memory limit), and
    the restricted security settings: runAsNonRoot, allowPrivilegeEscalation false,
    readOnlyRootFilesystem, capabilities drop ALL, not privileged, seccomp RuntimeDefault; every
    volumeMount names a declared volume.
  * Agent DaemonSet: hostNetwork with dnsPolicy ClusterFirstWithHostNet, host /sys mounted
    read-only at /host/sys and --sysfs_root=/host/sys, --node_name from spec.nodeName, a GPU
    toleration, no /dev/infiniband by default, --config pointing into the mounted ConfigMap.
  * Aggregator Deployment + Service: ports 7470 (grpc) and 9470 (metrics) on both, readiness and
    liveness probes on declared ports, prometheus.io annotations on the pods, the Service selects
    the pods.
  * The ConfigMaps' configs load in the real daemons: the agent's with `fabricmon-agent --once`
    (on a captured sysfs tree, so it must print HCA counters), the aggregator's by starting
    `fabricmon-aggregator` on it (listen addresses overridden to 127.0.0.1:0), waiting for its
    port file and stopping it with SIGTERM (exit 0). Every flag the manifests pass exists
    (`--helpfull`).

Exit 77 (skip) without python3-yaml.

Usage: kubernetes_test.py --source=DIR --agent=BIN --aggregator=BIN --fixtures=DIR
"""

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77
failures = []


def fail(message):
    failures.append(message)
    print("FAIL: " + message)


def get(obj, path, default=None):
    for key in path.split("."):
        if not isinstance(obj, dict) or key not in obj:
            return default
        obj = obj[key]
    return obj


def load_documents(directory, yaml):
    docs = {}
    for name in sorted(os.listdir(directory)):
        if not name.endswith((".yaml", ".yml")):
            continue
        with open(os.path.join(directory, name), encoding="utf-8") as f:
            try:
                loaded = [d for d in yaml.safe_load_all(f) if d is not None]
            except yaml.YAMLError as e:
                fail(f"{name}: YAML error: {e}")
                continue
        docs[name] = loaded
        print(f"parsed {name}: " + ", ".join(f"{d.get('kind')}/{get(d, 'metadata.name')}"
                                             for d in loaded))
    return docs


def check_common(name, doc):
    where = f"{name}: {doc.get('kind')}/{get(doc, 'metadata.name')}"
    for key in ("apiVersion", "kind"):
        if not doc.get(key):
            fail(f"{where}: no {key}")
    if doc.get("kind") == "Kustomization":
        return
    if not get(doc, "metadata.name"):
        fail(f"{where}: no metadata.name")
    if doc.get("kind") != "Namespace" and get(doc, "metadata.namespace") != "fabricmon":
        fail(f"{where}: metadata.namespace is not fabricmon")


def check_pod(where, pod_template, selector):
    labels = get(pod_template, "metadata.labels", {})
    for key, value in (selector or {}).items():
        if labels.get(key) != value:
            fail(f"{where}: selector {key}={value} does not match the pod labels {labels}")
    spec = pod_template.get("spec", {})
    pod_sc = spec.get("securityContext", {})
    if pod_sc.get("runAsNonRoot") is not True:
        fail(f"{where}: pod securityContext.runAsNonRoot is not true")
    if get(pod_sc, "seccompProfile.type") != "RuntimeDefault":
        fail(f"{where}: pod seccompProfile is not RuntimeDefault")
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    containers = spec.get("containers", [])
    if not containers:
        fail(f"{where}: no containers")
    for c in containers:
        cw = f"{where} container {c.get('name')}"
        if not c.get("image"):
            fail(f"{cw}: no image")
        if not (c.get("command") or c.get("args")):
            fail(f"{cw}: no command/args")
        if not get(c, "resources.limits.memory") or not get(c, "resources.requests.cpu"):
            fail(f"{cw}: resources need requests.cpu and limits.memory")
        sc = c.get("securityContext", {})
        if sc.get("allowPrivilegeEscalation") is not False:
            fail(f"{cw}: allowPrivilegeEscalation must be false")
        if sc.get("readOnlyRootFilesystem") is not True:
            fail(f"{cw}: readOnlyRootFilesystem must be true")
        if sc.get("privileged"):
            fail(f"{cw}: privileged")
        if get(sc, "capabilities.drop") != ["ALL"] or get(sc, "capabilities.add"):
            fail(f"{cw}: capabilities must drop ALL and add none")
        for m in c.get("volumeMounts", []):
            if m.get("name") not in volumes:
                fail(f"{cw}: volumeMount {m.get('name')} has no volume")
    return spec, volumes, containers


def flag_value(args, flag):
    for a in args:
        if a.startswith(f"--{flag}="):
            return a.split("=", 1)[1]
    return None


def check_flags(where, binary, args):
    helpfull = subprocess.run([binary, "--helpfull"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True).stdout
    for a in args:
        flag = re.match(r"--([a-z_]+)", a)
        if flag and f"--{flag.group(1)} (" not in helpfull:
            fail(f"{where}: flag --{flag.group(1)} unknown to {os.path.basename(binary)}")


def config_from(where, docs, spec, volumes, container, key_name):
    """The config text the container reads via --config, following the volume to the ConfigMap."""
    path = flag_value(container.get("args", []), "config")
    for m in container.get("volumeMounts", []):
        if path and path.startswith(m["mountPath"].rstrip("/") + "/"):
            key = path[len(m["mountPath"].rstrip("/")) + 1:]
            cm_name = get(volumes[m["name"]], "configMap.name")
            for d in docs:
                if d.get("kind") == "ConfigMap" and get(d, "metadata.name") == cm_name:
                    if key != key_name or key not in d.get("data", {}):
                        fail(f"{where}: --config={path}: ConfigMap {cm_name} has no key {key}")
                        return None
                    if not m.get("readOnly"):
                        fail(f"{where}: config mount is not readOnly")
                    return d["data"][key]
    fail(f"{where}: --config={path} is not inside a mounted ConfigMap")
    return None


def run_agent_config(agent, text, sysfs, tmp):
    path = os.path.join(tmp, "agent.textproto")
    with open(path, "w") as f:
        f.write(text)
    result = subprocess.run([agent, "--once", f"--config={path}", f"--sysfs_root={sysfs}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    if result.returncode != 0 or "fabricmon_ib_port_xmit_data_bytes_total{" not in result.stdout:
        fail(f"agent ConfigMap config: fabricmon-agent --once exit {result.returncode}\n"
             + result.stderr[-2000:])
    else:
        print("ok: the agent ConfigMap's agent.textproto loads (fabricmon-agent --once)")


def run_aggregator_config(aggregator, text, tmp):
    path = os.path.join(tmp, "aggregator.textproto")
    port_file = os.path.join(tmp, "port")
    with open(path, "w") as f:
        f.write(text)
    proc = subprocess.Popen([aggregator, f"--config={path}", "--grpc_listen=127.0.0.1:0",
                             "--metrics_listen=127.0.0.1:0", f"--port_file={port_file}",
                             "--log_level=warning"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and proc.poll() is None:
            if os.path.exists(port_file) and open(port_file).read().strip():
                break
            time.sleep(0.05)
        if proc.poll() is not None:
            fail(f"aggregator ConfigMap config: fabricmon-aggregator exited {proc.returncode}\n"
                 + proc.stdout.read()[-2000:])
            return
        if not os.path.exists(port_file):
            fail("aggregator ConfigMap config: no port file within 20 s")
            return
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=20)
        output = proc.stdout.read()
        if code != 0:
            fail(f"fabricmon-aggregator exit {code} after SIGTERM\n{output[-2000:]}")
        elif "PLAINTEXT" in output:
            fail("aggregator ConfigMap config: TLS warning although insecure_plaintext is set")
        else:
            print("ok: the aggregator ConfigMap's aggregator.textproto loads (started, stopped)")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    parser.add_argument("--agent", required=True)
    parser.add_argument("--aggregator", required=True)
    parser.add_argument("--fixtures", required=True)
    args = parser.parse_args()
    try:
        import yaml
    except ImportError:
        print("SKIP: python3-yaml not installed")
        return SKIP
    fixtures = os.environ.get("FABRICMON_SHARED_FIXTURES", args.fixtures)
    sysfs = os.path.join(fixtures, "sysfs", "gpud-h100", "sys")
    directory = os.path.join(args.source, "deploy", "kubernetes")
    per_file = load_documents(directory, yaml)
    docs = [d for ds in per_file.values() for d in ds]
    for name, ds in per_file.items():
        for d in ds:
            check_common(name, d)
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d.get("kind"), {})[get(d, "metadata.name")] = d

    kustomization = next(iter(by_kind.get("Kustomization", {}).values()), None)
    if kustomization is None:
        fail("no kustomization.yaml")
    else:
        listed = set(kustomization.get("resources", []))
        manifests = {n for n in per_file if n != "kustomization.yaml"}
        if listed != manifests:
            fail(f"kustomization resources {sorted(listed)} != manifests {sorted(manifests)}")

    with tempfile.TemporaryDirectory(prefix="fabricmon-k8s-") as tmp:
        ds = get(by_kind, "DaemonSet", {}).get("fabricmon-agent")
        if ds is None:
            fail("no DaemonSet fabricmon-agent")
        else:
            where = "DaemonSet fabricmon-agent"
            spec, volumes, containers = check_pod(where, get(ds, "spec.template"),
                                                  get(ds, "spec.selector.matchLabels"))
            if spec.get("hostNetwork") is not True:
                fail(f"{where}: hostNetwork must be true (RoCE/netdev counters are per netns)")
            if spec.get("dnsPolicy") != "ClusterFirstWithHostNet":
                fail(f"{where}: dnsPolicy must be ClusterFirstWithHostNet with hostNetwork")
            if not any(t.get("key") == "nvidia.com/gpu" for t in spec.get("tolerations", [])):
                fail(f"{where}: no toleration for nvidia.com/gpu")
            agent = containers[0]
            a = agent.get("args", [])
            if flag_value(a, "sysfs_root") != "/host/sys":
                fail(f"{where}: args lack --sysfs_root=/host/sys")
            if flag_value(a, "node_name") != "$(NODE_NAME)" or not any(
                    e.get("name") == "NODE_NAME"
                    and get(e, "valueFrom.fieldRef.fieldPath") == "spec.nodeName"
                    for e in agent.get("env", [])):
                fail(f"{where}: --node_name must come from spec.nodeName")
            sys_mounts = [m for m in agent.get("volumeMounts", []) if m["mountPath"] == "/host/sys"]
            if len(sys_mounts) != 1 or not sys_mounts[0].get("readOnly") or get(
                    volumes.get(sys_mounts[0]["name"], {}), "hostPath.path") != "/sys":
                fail(f"{where}: host /sys must be mounted read-only at /host/sys")
            if any(get(v, "hostPath.path", "").startswith("/dev") for v in volumes.values()):
                fail(f"{where}: mounts a host /dev path by default")
            check_flags(where, args.agent, a)
            text = config_from(where, docs, spec, volumes, agent, "agent.textproto")
            if text is not None:
                if "fabricmon-aggregator.fabricmon.svc:7470" not in text:
                    fail(f"{where}: agent config does not stream to the aggregator Service")
                if os.path.isdir(sysfs):
                    run_agent_config(args.agent, text, sysfs, tmp)
                else:
                    print(f"note: {sysfs} missing, agent config not loaded")

        dep = get(by_kind, "Deployment", {}).get("fabricmon-aggregator")
        svc = get(by_kind, "Service", {}).get("fabricmon-aggregator")
        if dep is None or svc is None:
            fail("no Deployment and Service fabricmon-aggregator")
        else:
            where = "Deployment fabricmon-aggregator"
            spec, volumes, containers = check_pod(where, get(dep, "spec.template"),
                                                  get(dep, "spec.selector.matchLabels"))
            c = containers[0]
            ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
            if ports != {"grpc": 7470, "metrics": 9470}:
                fail(f"{where}: container ports {ports}")
            for probe in ("readinessProbe", "livenessProbe"):
                p = c.get(probe, {})
                port = get(p, "tcpSocket.port") or get(p, "httpGet.port")
                if port not in ports and port not in ports.values():
                    fail(f"{where}: {probe} on undeclared port {port!r}")
            annotations = get(dep, "spec.template.metadata.annotations", {})
            if annotations.get("prometheus.io/scrape") != "true" or \
                    annotations.get("prometheus.io/port") != "9470":
                fail(f"{where}: pod annotations {annotations}")
            check_flags(where, args.aggregator, c.get("args", []))
            sports = {p.get("name"): (p.get("port"), p.get("targetPort"))
                      for p in get(svc, "spec.ports", [])}
            if sports != {"grpc": (7470, "grpc"), "metrics": (9470, "metrics")}:
                fail(f"Service fabricmon-aggregator: ports {sports}")
            labels = get(dep, "spec.template.metadata.labels", {})
            selector = get(svc, "spec.selector", {})
            if not selector or any(labels.get(k) != v for k, v in selector.items()):
                fail(f"Service selector {selector} does not select the pods {labels}")
            text = config_from(where, docs, spec, volumes, c, "aggregator.textproto")
            if text is not None:
                for listen in ('grpc_listen: "0.0.0.0:7470"', 'metrics_listen: "0.0.0.0:9470"'):
                    if listen not in text:
                        fail(f"{where}: aggregator config lacks {listen} (pods must listen on "
                             "all addresses)")
                run_aggregator_config(args.aggregator, text, tmp)

    if failures:
        print(f"\n{len(failures)} failure(s)")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
