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
  * Aggregator StatefulSet + headless Service (the shards): ports 7470 (grpc) and 9470 (metrics)
    on both, readiness and liveness probes on declared ports, prometheus.io annotations on the
    pods, the Service selects the pods, is headless (clusterIP None) and is the StatefulSet's
    serviceName, each pod's shard name is its own (--shard=$(POD_NAME) from metadata.name), and
    the aggregator certificate names the pods' own DNS names (the CLI asks each shard).
  * No plaintext, no wildcard listener without TLS: no config sets insecure_plaintext and no
    container passes --insecure_plaintext; a gRPC listener on 0.0.0.0 / [::] comes with all
    three TLS files; an HTTP listener (metrics_listen, listen_metrics) is never on 0.0.0.0 /
    [::]; every TLS file a config names lies in a Secret or hostPath volume the container mounts
    read-only (never a ConfigMap), the aggregator's Secret is a cert-manager Certificate's whose
    dnsNames hold the Service name the agents dial, and no workload mounts a CA's key.
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


WILDCARD_HOSTS = ("0.0.0.0", "[::]", "::", "")
GRPC_LISTENERS = ("grpc_listen", "diagnostics_listen")
HTTP_LISTENERS = ("metrics_listen", "listen_metrics")


def config_fields(text):
    """Top-level and nested `name: "value"` pairs of a text-format config (comments dropped)."""
    fields = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0]
        for name, value in re.findall(r'(\w+)\s*:\s*"([^"]*)"', line):
            fields.setdefault(name, value)
    return fields


def listen_host(address):
    return address.rsplit(":", 1)[0] if ":" in address else ""


def check_no_plaintext(where, text, container, volumes, docs):
    """No plaintext anywhere; wildcard listeners only with TLS; TLS files from Secrets/hostPath."""
    args = container.get("args", []) + container.get("command", [])
    failures_before = len(failures)
    if re.search(r"insecure_plaintext\s*:\s*true", "\n".join(
            line.split("#", 1)[0] for line in text.splitlines())):
        fail(f"{where}: config sets insecure_plaintext")
    if any(a.startswith("--insecure_plaintext") for a in args):
        fail(f"{where}: --insecure_plaintext in the container's arguments")
    fields = config_fields(text)
    tls_files = [fields.get(k) for k in ("ca_file", "cert_file", "key_file")]
    listeners = {k: fields[k] for k in GRPC_LISTENERS + HTTP_LISTENERS if k in fields}
    for k in GRPC_LISTENERS + HTTP_LISTENERS:
        value = flag_value(args, k)
        if value is not None:
            listeners[k] = value
    for name, address in listeners.items():
        wildcard = listen_host(address) in WILDCARD_HOSTS
        if name in HTTP_LISTENERS and wildcard:
            fail(f"{where}: {name} {address} serves plain HTTP on every address")
        if name in GRPC_LISTENERS and wildcard and not all(tls_files):
            fail(f"{where}: {name} {address} on every address without TLS files")
    if "aggregator" in fields and not all(tls_files):
        fail(f"{where}: streams to {fields['aggregator']} without TLS files")
    mounts = container.get("volumeMounts", [])
    for path in filter(None, tls_files):
        mount = next((m for m in mounts
                      if path.startswith(m["mountPath"].rstrip("/") + "/")), None)
        if mount is None:
            fail(f"{where}: TLS file {path} is in no mounted volume")
            continue
        volume = volumes.get(mount["name"], {})
        if not mount.get("readOnly"):
            fail(f"{where}: TLS volume {mount['name']} is not mounted readOnly")
        if "secret" not in volume and "hostPath" not in volume:
            fail(f"{where}: TLS file {path} comes from neither a Secret nor a hostPath")
    certificates = {get(d, "spec.secretName"): d for d in docs
                    if d.get("kind") == "Certificate"}
    for volume in volumes.values():
        secret = get(volume, "secret.secretName")
        if secret is None:
            continue
        cert = certificates.get(secret)
        if cert is None:
            fail(f"{where}: Secret {secret} is issued by no cert-manager Certificate here")
        elif get(cert, "spec.isCA") and [i.get("key") for i in
                                         get(volume, "secret.items", [])] != ["ca.crt"]:
            fail(f"{where}: mounts the CA Secret {secret} with more than ca.crt (its key)")
    if len(failures) == failures_before:
        print(f"ok: {where}: no plaintext, listeners {listeners or 'none'}")


def make_test_pki(tmp):
    """A CA and an aggregator certificate (openssl), to start the aggregator on its config."""
    def run(*argv):
        subprocess.run(["openssl", *argv], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, cwd=tmp)
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=test CA")
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", "tls.key", "-out", "tls.csr", "-subj", "/CN=fabricmon-aggregator")
    run("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "tls.crt", "-days", "2")
    os.chmod(os.path.join(tmp, "tls.key"), 0o600)


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
    # The Secret's files, made here by openssl, where the config expects them.
    pki = os.path.join(tmp, "pki")
    os.makedirs(pki, exist_ok=True)
    try:
        make_test_pki(pki)
    except (OSError, subprocess.CalledProcessError) as e:
        fail(f"aggregator ConfigMap config: cannot make a test CA with openssl: {e}")
        return
    text = text.replace("/etc/fabricmon/tls/", pki + "/")
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
            if spec.get("hostPID") is not True:
                fail(f"{where}: hostPID must be true (the kernel hides other PID namespaces' "
                     "RDMA QPs: tcp_fallback needs the job's QPs)")
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
                check_no_plaintext(where, text, agent, volumes, docs)
                if os.path.isdir(sysfs):
                    run_agent_config(args.agent, text, sysfs, tmp)
                else:
                    print(f"note: {sysfs} missing, agent config not loaded")

        dep = get(by_kind, "StatefulSet", {}).get("fabricmon-aggregator")
        svc = get(by_kind, "Service", {}).get("fabricmon-aggregator")
        if dep is None or svc is None:
            fail("no StatefulSet and Service fabricmon-aggregator")
        else:
            where = "StatefulSet fabricmon-aggregator"
            if get(svc, "spec.clusterIP") != "None":
                fail("Service fabricmon-aggregator is not headless (clusterIP: None): the agents "
                     "need every shard's address")
            if get(dep, "spec.serviceName") != "fabricmon-aggregator":
                fail(f"{where}: serviceName is not the headless Service")
            shard_container = get(dep, "spec.template.spec.containers", [{}])[0]
            if flag_value(shard_container.get("args", []), "shard") != "$(POD_NAME)" or not any(
                    e.get("name") == "POD_NAME"
                    and get(e, "valueFrom.fieldRef.fieldPath") == "metadata.name"
                    for e in shard_container.get("env", [])):
                fail(f"{where}: --shard must be the pod's name (metadata.name)")
            cert = next((d for d in docs if d.get("kind") == "Certificate"
                         and get(d, "spec.secretName") == "fabricmon-aggregator-tls"), {})
            if "*.fabricmon-aggregator.fabricmon.svc" not in get(cert, "spec.dnsNames", []):
                fail("the aggregator certificate does not name the shards' own DNS names "
                     "(*.fabricmon-aggregator.fabricmon.svc)")
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
                check_no_plaintext(where, text, c, volumes, docs)
                # Reachable through the Service: gRPC on every address (with TLS, checked
                # above), /metrics on the pod IP.
                if 'grpc_listen: "0.0.0.0:7470"' not in text:
                    fail(f"{where}: aggregator config lacks grpc_listen: \"0.0.0.0:7470\"")
                if flag_value(c.get("args", []), "metrics_listen") != "$(POD_IP):9470" or not any(
                        e.get("name") == "POD_IP"
                        and get(e, "valueFrom.fieldRef.fieldPath") == "status.podIP"
                        for e in c.get("env", [])):
                    fail(f"{where}: /metrics must listen on the pod IP "
                         "(--metrics_listen=$(POD_IP):9470, POD_IP from status.podIP)")
                agg_cert = next((d for d in docs if d.get("kind") == "Certificate" and
                                 get(d, "spec.secretName") == get(volumes.get("tls", {}),
                                                                  "secret.secretName")), None)
                if agg_cert is None or "fabricmon-aggregator.fabricmon.svc" not in get(
                        agg_cert, "spec.dnsNames", []):
                    fail(f"{where}: the aggregator's certificate does not name "
                         "fabricmon-aggregator.fabricmon.svc (what the agents dial)")
                run_aggregator_config(args.aggregator, text, tmp)

    if failures:
        print(f"\n{len(failures)} failure(s)")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
