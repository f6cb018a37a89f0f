#!/usr/bin/env python3
"""Checks deploy/prometheus/ with the real promtool (Debian package prometheus).

  * `promtool check rules deploy/prometheus/rules.yml`
  * `promtool check config deploy/prometheus/scrape.yml` (a complete prometheus.yml whose relative
    rule_files loads rules.yml)
  * `promtool test rules tests/deploy/rules_test.yml tests/deploy/rules_days_test.yml`: firing
    and non-firing cases with full labels and annotations ("ever connected" gating: a
    never-cabled port never alerts).
  * The metric contract: every metric selected in an expression or in an annotation's query is
    one of the names the exporters and the coming detectors promise (CONTRACT below).
  * Every alert has severity critical|warning|info, a summary and a description, and at least one
    firing and one non-firing test case.
  * Every alert has a runbook_url whose base is overridable (the external label
    fabricmon_runbook_base) and whose anchor is a `## <AlertName>` section of
    deploy/runbooks/README.md; the runbook has no section for an alert that does not exist, and
    README.md's "Alerts" section names every alert.
Prints the alert table (name, severity, for).

Exit 77 (skip) without promtool; the contract checks need python3-yaml.

Usage: prometheus_rules_test.py --source=DIR
"""

import argparse
import os
import re
import shutil
import subprocess
import sys

SKIP = 77
CONTRACT = {
    "up",
    "fabricmon_node_up",
    "fabricmon_node_last_seen_age_seconds",
    "fabricmon_aggregator_rejected_messages_total",
    "fabricmon_aggregator_series_unstored",
    "fabricmon_node_agent_dropped_batches_total",
    "fabricmon_node_sequence_gaps_total",
    "fabricmon_collector_success",
    "fabricmon_collector_hardware_present",
    "fabricmon_series_saturated",
    "fabricmon_ib_link_downed_total",
    "fabricmon_ib_port_state",
    "fabricmon_ib_port_phys_state",
    "fabricmon_ib_symbol_error_total",
    "fabricmon_ib_link_error_recovery_total",
    "fabricmon_ib_device_info",
    "fabricmon_ib_fabric_link_info",
    "fabricmon_finding_active",
    "fabricmon_finding_victims",
    "fabricmon_finding_depth_hops",
    "fabricmon_findings_total",
    "fabricmon_topology_unclaimed_ca",
    "ALERTS",  # Prometheus' own: FabricTcpFallback hands over from warning to critical
}
RUNBOOK_BASE = ("{{ with $externalLabels.fabricmon_runbook_base }}{{ . }}{{ else }}"
                "https://github.com/fabricmon/fabricmon/blob/main{{ end }}")
RUNBOOK_PATH = "/deploy/runbooks/README.md#"
PROMQL_WORDS = {
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
    "offset", "bool", "inf", "nan",
    # aggregation operators (may be followed by by/without before their parenthesis)
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk",
    "topk", "quantile",
}
failures = []


def fail(message):
    failures.append(message)
    print("FAIL: " + message)


def run(cmd, cwd=None):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          cwd=cwd)


def metric_names(expr):
    """Metric names selected by a PromQL expression (rough lexer, enough for our rules)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)  # strings
    expr = re.sub(r"\{[^}]*\}", " ", expr)                                # label matchers
    expr = re.sub(r"\[[^\]]*\]", " ", expr)                               # ranges
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r"\1",
                  expr)                                                   # label lists
    names = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr):
        word = m.group(0)
        rest = expr[m.end():].lstrip()
        if rest.startswith("(") or word.lower() in PROMQL_WORDS:
            continue  # a function or an operator
        if m.start() > 0 and (expr[m.start() - 1].isdigit() or expr[m.start() - 1] == "."):
            continue  # a unit of a duration or an exponent
        names.add(word)
    return names


def markdown_anchor(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^a-z0-9 _-]", "", heading.strip().lower()).replace(" ", "-")


def check_runbooks(alerts, runbook_path, readme_path):
    if not os.path.exists(runbook_path):
        fail(f"no runbook: {runbook_path}")
        return
    with open(runbook_path, encoding="utf-8") as f:
        sections = re.findall(r"^## (.+?)\s*$", f.read(), re.MULTILINE)
    anchors = {markdown_anchor(s): s for s in sections}
    for name, url in alerts.items():
        if not url:
            fail(f"{name}: no runbook_url annotation")
            continue
        if url != RUNBOOK_BASE + RUNBOOK_PATH + name.lower():
            fail(f"{name}: runbook_url {url!r} is not {RUNBOOK_BASE + RUNBOOK_PATH + name.lower()!r}")
        if name.lower() not in anchors or anchors[name.lower()] != name:
            fail(f"{name}: no '## {name}' section in deploy/runbooks/README.md")
    for section in sections:
        if section not in alerts:
            fail(f"deploy/runbooks/README.md: section '{section}' names no alert")
    with open(readme_path, encoding="utf-8") as f:
        readme = f.read()
    match = re.search(r"^### Alerts\n(.*?)(?=^##? )", readme, re.MULTILINE | re.DOTALL)
    if not match:
        fail("README.md: no '### Alerts' section")
        return
    for name in alerts:
        if not re.search(r"\b" + name + r"\b", match.group(1)):
            fail(f"README.md's Alerts section does not name {name}")


def check_contract(rules_path, tests):
    import yaml
    with open(rules_path, encoding="utf-8") as f:
        rules = yaml.safe_load(f)
    alerts = {}
    runbook_urls = {}
    print(f"{'alert':32} {'severity':9} for")
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "alert" not in rule:
                continue
            name = rule["alert"]
            used = metric_names(rule["expr"])
            for text in rule.get("annotations", {}).values():
                for query in re.findall(r'printf\s+"((?:[^"\\]|\\.)*)"', text):
                    used |= metric_names(query.replace("%s", "x"))
            unknown = used - CONTRACT
            if unknown:
                fail(f"{name}: metrics outside the contract: {sorted(unknown)}")
            severity = rule.get("labels", {}).get("severity")
            if severity not in ("critical", "warning", "info"):
                fail(f"{name}: severity {severity!r}")
            for key in ("summary", "description"):
                if not rule.get("annotations", {}).get(key):
                    fail(f"{name}: no {key} annotation")
            alerts.setdefault(name, []).append(severity)
            url = rule.get("annotations", {}).get("runbook_url")
            if runbook_urls.setdefault(name, url) != url:
                fail(f"{name}: its rules point at different runbooks")
            print(f"{name:32} {severity:9} {rule.get('for', '0s')}")
    firing, quiet = set(), set()
    for path in tests:
        with open(path, encoding="utf-8") as f:
            for test in yaml.safe_load(f)["tests"]:
                for case in test.get("alert_rule_test", []):
                    (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
    for name in alerts:
        if name not in firing:
            fail(f"{name}: no test case where it fires")
        if name not in quiet:
            fail(f"{name}: no test case where it stays quiet")
    for name in (firing | quiet) - set(alerts):
        fail(f"tests name an alert that does not exist: {name}")
    print(f"{len(alerts)} alerts, {sum(len(v) for v in alerts.values())} rules")
    return runbook_urls


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    args = parser.parse_args()
    if shutil.which("promtool") is None:
        print("SKIP: promtool not installed (Debian package prometheus)")
        return SKIP
    print(run(["promtool", "--version"]).stdout.splitlines()[0])
    rules = os.path.join(args.source, "deploy", "prometheus", "rules.yml")
    scrape = os.path.join(args.source, "deploy", "prometheus", "scrape.yml")
    test_dir = os.path.join(args.source, "tests", "deploy")
    tests = [os.path.join(test_dir, n) for n in ("rules_test.yml", "rules_days_test.yml")]

    result = run(["promtool", "check", "rules", rules])
    print(result.stdout.strip())
    if result.returncode != 0:
        fail("promtool check rules")
    result = run(["promtool", "check", "config", scrape])
    print(result.stdout.strip())
    if result.returncode != 0 or "1 rule files found" not in result.stdout:
        fail("promtool check config scrape.yml (must load rules.yml)")
    result = run(["promtool", "test", "rules", *tests], cwd=test_dir)
    print(result.stdout.strip() if result.returncode == 0 else result.stdout)
    if result.returncode != 0:
        fail("promtool test rules")
    try:
        import yaml  # noqa: F401
        runbook_urls = check_contract(rules, tests)
        check_runbooks(runbook_urls, os.path.join(args.source, "deploy", "runbooks", "README.md"),
                       os.path.join(args.source, "README.md"))
    except ImportError:
        print("note: python3-yaml not installed: metric contract and coverage not checked")
    if failures:
        print(f"\n{len(failures)} failure(s)")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
