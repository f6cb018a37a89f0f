#!/usr/bin/env python3
"""Generates fabricmon's Grafana dashboards (dashboards/grafana/*.json).

The JSON files are the deliverable (Grafana loads them through dashboards/provisioning/ or the
import dialog); this script is their source, so that the PromQL, the variables and the layout stay
consistent across the dashboards and every panel is placed by the same layout code (no
overlaps, 24 columns). tests/dashboards/dashboards_test.py checks that the committed JSON equals
this script's output, validates the structure and runs every query against a live Prometheus.

  python3 dashboards/generate_dashboards.py            rewrite dashboards/grafana/*.json
  python3 dashboards/generate_dashboards.py --check    exit 1 if a file differs from the output

Edited a dashboard in Grafana? Port the change here (the exported JSON is not round-tripped).

Grafana 10 style (schemaVersion 38): one `datasource` variable of type prometheus that every
panel and target uses as ${datasource}; label_values() query variables; rows are expanded.

Python 3 standard library only.
"""

import argparse
import json
import os
import sys

SCHEMA_VERSION = 38
OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grafana")
DS = {"type": "prometheus", "uid": "${datasource}"}
TAGS = ["fabricmon"]

# Selector fragments. Every series the aggregator exports carries job/instance (from Prometheus)
# and node (from the aggregator); switch ports swept by ib_fabric carry switch/switch_guid/port
# and the node label of the agent that swept them. `cluster` is an external label a site sets
# on each Prometheus (global.external_labels) and sees through Thanos, Mimir or federation; its
# "All" value `.*` also matches series without the label, so single-cluster sites need nothing.
# Every query starts from J, so every query filters on both.
C = 'cluster=~"$cluster"'
J = 'job=~"$job", %s' % C
RI = "$__rate_interval"

# Runbooks: panels with an alert behind them link to the alert's section of
# deploy/runbooks/README.md (one `## <AlertName>` per alert of deploy/prometheus/rules.yml;
# GitHub-style anchors are the lowercased name). The base is the `runbook_base` variable, whose
# default comes from --runbook-base: where your copy of this repository is browsable.
RUNBOOK_BASE = "https://git.example.internal/fabricmon/blob/main"
RUNBOOK_PATH = "deploy/runbooks/README.md"
FINDING_ALERTS = ["FabricLinkFlapping", "FabricLinkDegraded", "FabricCongestionSpreading",
                  "FabricPauseStorm", "FabricTcpFallback", "FabricEcnMisconfigured",
                  "FabricNvlinkDegraded", "FabricNvlinkDown"]
# (dashboard uid, panel title) → the alerts whose condition the panel shows.
RUNBOOK_PANELS = {
    ("fabricmon-overview", "Nodes down"): ["FabricmonAgentDown"],
    ("fabricmon-overview", "Saturated counters"): ["FabricmonCounterSaturated"],
    ("fabricmon-overview", "Aggregator targets up"): ["FabricmonAggregatorDown",
                                                      "FabricmonAggregatorAbsent"],
    ("fabricmon-overview", "Active findings"): FINDING_ALERTS,
    ("fabricmon-overview", "Node up / down"): ["FabricmonAgentDown"],
    ("fabricmon-overview", "Nodes"): ["FabricmonAgentDown", "FabricmonAgentStale"],
    ("fabricmon-overview", "Top XmitWait ports"): ["FabricCongestionSpreading"],
    ("fabricmon-overview", "Top paused ports (RoCE PFC)"): ["FabricPauseStorm",
                                                            "FabricCongestionSpreading"],
    ("fabricmon-overview", "Link down events"): ["FabricLinkFlapping", "FabricPortDown",
                                                 "FabricSwitchPortDown"],
    ("fabricmon-overview", "Links that went down in the time range"): ["FabricLinkFlapping",
                                                                       "FabricPortDown",
                                                                       "FabricSwitchPortDown"],
    ("fabricmon-overview", "Physical / link errors, top $topk ports"): ["FabricPortErrors",
                                                                        "FabricLinkDegraded"],
    ("fabricmon-node", "Agent"): ["FabricmonAgentDown"],
    ("fabricmon-node", "Last seen"): ["FabricmonAgentStale"],
    ("fabricmon-node", "Saturated counters"): ["FabricmonCounterSaturated"],
    ("fabricmon-node", "Findings touching $node"): FINDING_ALERTS,
    ("fabricmon-job", "Findings touching $job_name"): FINDING_ALERTS,
    ("fabricmon-job", "Nodes down"): ["FabricmonAgentDown"],
    ("fabricmon-job", "Stragglers"): ["FabricStraggler"],
    ("fabricmon-node", "Port state"): ["FabricPortDown", "FabricLinkFlapping"],
    ("fabricmon-node", "Port errors"): ["FabricPortErrors", "FabricLinkDegraded"],
    ("fabricmon-node", "Drops, ECN marks and pause storms"): ["FabricPauseStorm",
                                                              "FabricEcnMisconfigured"],
    ("fabricmon-node", "Bytes by path (rx + tx)"): ["FabricTcpFallback"],
    ("fabricmon-node", "Active NVLinks per GPU"): ["FabricNvlinkDown", "FabricNvlinkDegraded"],
    ("fabricmon-node", "Inactive NVLinks"): ["FabricNvlinkDown", "FabricNvlinkDegraded"],
    ("fabricmon-node", "NVLink errors by GPU and type"): ["FabricNvlinkDegraded"],
    ("fabricmon-node", "Collector health"): ["FabricmonCollectorFailing"],
    ("fabricmon-congestion", "Spreading trees"): ["FabricCongestionSpreading"],
    ("fabricmon-congestion", "Congestion trees"): ["FabricCongestionSpreading"],
    ("fabricmon-congestion", "Congestion, pause storm and ECN findings"): [
        "FabricCongestionSpreading", "FabricPauseStorm", "FabricEcnMisconfigured"],
    ("fabricmon-self", "Aggregators up"): ["FabricmonAggregatorDown", "FabricmonAggregatorAbsent"],
    ("fabricmon-self", "HCAs no agent claims"): ["FabricmonAgentMissing"],
    ("fabricmon-self", "Nodes down"): ["FabricmonAgentDown"],
    ("fabricmon-self", "Rejected messages by reason"): ["FabricmonAggregatorRejecting"],
    ("fabricmon-self", "Series kept out by a series cap"): ["FabricmonSeriesUnstored"],
    ("fabricmon-self", "Dropped from replay buffers"): ["FabricmonAgentDroppingData"],
    ("fabricmon-self", "Data loss per node (aggregator view)"): ["FabricmonAgentDroppingData"],
    ("fabricmon-self", "Nodes"): ["FabricmonAgentDown", "FabricmonAgentStale",
                                  "FabricmonAgentDroppingData"],
    ("fabricmon-self", "Collectors by node"): ["FabricmonCollectorFailing"],
}

IB_PORT_STATES = {1: ("DOWN", "red"), 2: ("INIT", "orange"), 3: ("ARMED", "yellow"),
                  4: ("ACTIVE", "green"), 5: ("ACTIVE_DEFER", "green")}
IB_PHYS_STATES = {1: ("Sleep", "red"), 2: ("Polling", "red"), 3: ("Disabled", "purple"),
                  4: ("Training", "orange"), 5: ("LinkUp", "green"),
                  6: ("ErrorRecovery", "orange"), 7: ("PhyTest", "blue")}
NETDEV_OPER_STATES = {0: ("unknown", "text"), 1: ("notpresent", "red"), 2: ("down", "red"),
                      3: ("lowerlayerdown", "red"), 4: ("testing", "orange"),
                      5: ("dormant", "orange"), 6: ("up", "green")}
UP_DOWN = {0: ("down", "red"), 1: ("up", "green")}
OK_FAIL = {0: ("failing", "red"), 1: ("ok", "green")}
PRESENT = {0: ("absent", "text"), 1: ("present", "green")}
NVLINK_STATES = {0: ("inactive", "red"), 1: ("active", "green")}
SEVERITY_TEXT = {"critical": "red", "warning": "orange", "info": "blue"}

# IBA PortCounters error counters shown as "physical/link errors" (link_downed is a flap counter
# and shown with the flaps).
IB_ERROR_COUNTERS = [
    ("symbol_error", "symbol errors"),
    ("link_error_recovery", "link error recoveries"),
    ("port_rcv_errors", "receive errors"),
    ("port_rcv_remote_physical_errors", "remote physical errors"),
    ("local_link_integrity_errors", "link integrity errors"),
    ("excessive_buffer_overrun_errors", "buffer overruns"),
    ("port_xmit_discards", "transmit discards"),
]
IB_ERROR_METRICS = ["fabricmon_ib_%s_total" % name for name, _ in IB_ERROR_COUNTERS]
ROCE_PHY_ERROR_METRICS = ["fabricmon_roce_phy_rx_%s_total" % name
                          for name in ("crc_errors", "pcs_symbol_errors", "symbol_errors")]


# ------------------------------------------------------------------------------------------
# Building blocks.


def target(expr, legend="", ref="A", instant=False, table=False, hide=False):
    t = {"datasource": DS, "editorMode": "code", "expr": expr, "refId": ref,
         "legendFormat": legend or "__auto", "range": not instant, "instant": instant}
    if table:
        t["format"] = "table"
    if hide:
        t["hide"] = True
    return t


def targets(*specs, **common):
    """targets((expr, legend), (expr, legend), ...) with refIds A, B, C..."""
    out = []
    for i, spec in enumerate(specs):
        expr, legend = spec if isinstance(spec, tuple) else (spec, "")
        out.append(target(expr, legend, ref=chr(ord("A") + i), **common))
    return out


def value_mappings(codes):
    return [{"type": "value", "options": {
        str(code): {"text": text, "color": color, "index": i}
        for i, (code, (text, color)) in enumerate(sorted(codes.items()))}}]


def text_mappings(colors):
    return [{"type": "value", "options": {
        text: {"color": color, "index": i} for i, (text, color) in enumerate(colors.items())}}]


def thresholds(*steps):
    """thresholds("green", (1, "red")) → base colour then (value, colour) steps."""
    out = [{"color": steps[0], "value": None}]
    for value, color in steps[1:]:
        out.append({"color": color, "value": value})
    return {"mode": "absolute", "steps": out}


def override_name(name, **props):
    return {"matcher": {"id": "byName", "options": name},
            "properties": [{"id": k.replace("__", "."), "value": v} for k, v in props.items()]}


def override_regex(regex, **props):
    return {"matcher": {"id": "byRegexp", "options": regex},
            "properties": [{"id": k.replace("__", "."), "value": v} for k, v in props.items()]}


def panel(kind, title, description, tgts, unit=None, mappings=None, thresholds_=None,
          options=None, custom=None, overrides=None, transformations=None, decimals=None,
          min_=None, max_=None):
    defaults = {"custom": custom or {}}
    if unit:
        defaults["unit"] = unit
    if mappings:
        defaults["mappings"] = mappings
    if thresholds_:
        defaults["thresholds"] = thresholds_
    if decimals is not None:
        defaults["decimals"] = decimals
    if min_ is not None:
        defaults["min"] = min_
    if max_ is not None:
        defaults["max"] = max_
    p = {"type": kind, "title": title, "description": description, "datasource": DS,
         "targets": tgts, "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
         "options": options or {}}
    if transformations:
        p["transformations"] = transformations
    return p


def timeseries(title, description, tgts, unit="short", stack=False, bars=False, overrides=None,
               legend_calcs=("lastNotNull", "max"), min_=None, max_=None, decimals=None):
    custom = {"drawStyle": "bars" if bars else "line", "lineWidth": 1,
              "fillOpacity": 60 if bars else 10, "showPoints": "never",
              "spanNulls": False, "axisSoftMin": 0,
              "stacking": {"mode": "normal" if stack else "none", "group": "A"}}
    options = {"legend": {"displayMode": "table", "placement": "bottom", "showLegend": True,
                          "calcs": list(legend_calcs)},
               "tooltip": {"mode": "multi", "sort": "desc"}}
    return panel("timeseries", title, description, tgts, unit=unit, custom=custom,
                 options=options, overrides=overrides, min_=min_, max_=max_, decimals=decimals)


def stat(title, description, expr, unit="short", mappings=None, thresholds_=None,
         color_mode="value", graph=True, decimals=None):
    options = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
               "colorMode": color_mode, "graphMode": "area" if graph else "none",
               "justifyMode": "auto", "orientation": "auto", "textMode": "auto"}
    return panel("stat", title, description, [target(expr)], unit=unit, mappings=mappings,
                 thresholds_=thresholds_ or thresholds("green"), options=options,
                 decimals=decimals)


def table(title, description, tgts, rename=None, hide=(), order=None, overrides=None,
          sort_by=None, unit=None, merge=None):
    """An instant table. Targets are instant, format=table; several are merged on their common
    label columns. `rename` maps column names (labels, or "Value #A".. for several targets,
    "Value" for one) to headers; `order`, `sort_by` and overrides use the headers."""
    for t in tgts:
        t["instant"] = True
        t["range"] = False
        t["format"] = "table"
    exclude = {"Time": True, "__name__": True, "job": True, "instance": True}
    for name in hide:
        exclude[name] = True
    transformations = []
    if merge if merge is not None else len(tgts) > 1:
        transformations.append({"id": "merge", "options": {}})
    organize = {"excludeByName": exclude, "renameByName": rename or {}, "indexByName": {}}
    if order:
        # indexByName takes the frame's field names (before renameByName): map headers back.
        original = {header: name for name, header in (rename or {}).items()}
        organize["indexByName"] = {original.get(name, name): i for i, name in enumerate(order)}
    transformations.append({"id": "organize", "options": organize})
    options = {"showHeader": True, "cellHeight": "sm",
               "footer": {"show": False, "reducer": ["sum"], "countRows": False, "fields": ""}}
    if sort_by:
        options["sortBy"] = [{"displayName": name, "desc": desc} for name, desc in sort_by]
    custom = {"align": "auto", "cellOptions": {"type": "auto"}, "inspect": False,
              "filterable": True}
    return panel("table", title, description, tgts, unit=unit, custom=custom, options=options,
                 overrides=overrides, transformations=transformations)


def share_table(title, description, expr, column, order, hide=(), node_links=True):
    """An instant table of `expr`, one share (0..1) per row, highest first. Its value column is
    headed `column` and shaded green, orange from 1 %, red from 5 % (where the congestion detector
    raises a finding); `node_links` makes the node column open the node drill-down."""
    overrides = [override_name(column, unit="percentunit",
                               custom__cellOptions={"type": "color-background",
                                                    "mode": "gradient"},
                               thresholds=thresholds("green", (0.01, "orange"), (0.05, "red")))]
    if node_links:
        overrides.append(node_link())
    return table(title, description, [target(expr)], rename={"Value": column}, order=order,
                 hide=hide, overrides=overrides, sort_by=[(column, True)])


def state_timeline(title, description, expr, legend, mappings):
    options = {"mergeValues": True, "showValue": "auto", "alignValue": "left", "rowHeight": 0.9,
               "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
               "tooltip": {"mode": "single", "sort": "none"}}
    return panel("state-timeline", title, description, [target(expr, legend)],
                 mappings=mappings, thresholds_=thresholds("green"),
                 custom={"fillOpacity": 80, "lineWidth": 0}, options=options)


def bargauge(title, description, tgts, unit="short", thresholds_=None, instant=True):
    for t in tgts:
        t["instant"] = instant
        t["range"] = not instant
    options = {"displayMode": "gradient", "orientation": "horizontal", "showUnfilled": True,
               "valueMode": "color", "namePlacement": "auto", "minVizHeight": 10,
               "minVizWidth": 0, "sizing": "auto",
               "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}}
    return panel("bargauge", title, description, tgts, unit=unit,
                 thresholds_=thresholds_ or thresholds("green"), options=options)


def custom_variable(name, label, values, default, description=""):
    return {"name": name, "label": label, "type": "custom", "description": description,
            "query": ",".join(values), "hide": 0, "includeAll": False, "multi": False,
            "skipUrlSync": False,
            "current": {"selected": True, "text": default, "value": default},
            "options": [{"selected": v == default, "text": v, "value": v} for v in values]}


def textbox_variable(name, label, default, description="", hide=0):
    return {"name": name, "label": label, "type": "textbox", "description": description,
            "query": default, "hide": hide, "skipUrlSync": False,
            "current": {"selected": False, "text": default, "value": default},
            "options": [{"selected": True, "text": default, "value": default}]}


def query_variable(name, label, query, multi=False, include_all=False, all_value=None,
                   description="", hide=0):
    v = {"name": name, "label": label, "type": "query", "description": description,
         "datasource": DS, "definition": query,
         "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
         "refresh": 2, "regex": "", "sort": 1, "hide": hide, "multi": multi,
         "includeAll": include_all, "skipUrlSync": False, "options": []}
    if include_all:
        v["current"] = {"selected": True, "text": ["All"] if multi else "All",
                        "value": ["$__all"] if multi else "$__all"}
        if all_value is not None:
            v["allValue"] = all_value
    else:
        v["current"] = {}
    return v


# The uid of the datasource dashboards/provisioning/datasources.yml provisions (not as the
# default datasource): the datasource variable starts on it; Grafana falls back to the default
# Prometheus datasource where no datasource has this uid.
DATASOURCE_UID = "fabricmon-prometheus"


def datasource_variable():
    return {"name": "datasource", "label": "Data source", "type": "datasource",
            "query": "prometheus", "regex": "", "hide": 0, "includeAll": False, "multi": False,
            "refresh": 1, "skipUrlSync": False,
            "current": {"selected": True, "text": "fabricmon Prometheus",
                        "value": DATASOURCE_UID},
            "options": []}


def cluster_variable():
    return query_variable(
        "cluster", "Cluster", "label_values(fabricmon_node_up, cluster)", multi=True,
        include_all=True, all_value=".*",
        description="The `cluster` external label of the Prometheus servers behind the data "
                    "source (Thanos, Mimir, federation). All (.*) also matches series without "
                    "it: a single Prometheus without the label needs no setting.")


def runbook_variable():
    return textbox_variable(
        "runbook_base", "Runbook base URL", RUNBOOK_BASE, hide=2,
        description="Where this repository is browsable: panels link to "
                    "<base>/%s#<alert name, lowercased>. Set it with "
                    "generate_dashboards.py --runbook-base." % RUNBOOK_PATH)


def runbook_links(alerts):
    return [{"title": "Runbook: %s" % alert, "targetBlank": True,
             "url": "${runbook_base}/%s#%s" % (RUNBOOK_PATH, alert.lower())} for alert in alerts]


def job_variable():
    return query_variable(
        "job", "Job", "label_values(fabricmon_node_up{%s}, job)" % C, multi=True,
        include_all=True,
        all_value=".+",
        description="Prometheus job(s) scraping fabricmon-aggregator (deploy/prometheus/"
                    "scrape.yml names it fabricmon-aggregator).")


class Dashboard:
    """Places panels left to right in 24 columns, wrapping to a new line; row() starts a row."""

    def __init__(self, uid, title, description, variables, links=True, refresh="30s",
                 time_from="now-1h"):
        self.uid = uid
        self.title = title
        self.description = description
        self.variables = variables + [runbook_variable()]
        self._runbooks_used = set()
        self.refresh = refresh
        self.time_from = time_from
        self.panels = []
        self.links = links
        self._id = 0
        self._x = 0
        self._y = 0
        self._line_h = 0

    def _next_id(self):
        self._id += 1
        return self._id

    def _newline(self):
        self._y += self._line_h
        self._x = 0
        self._line_h = 0

    def row(self, title):
        if self._x:
            self._newline()
        self.panels.append({"type": "row", "title": title, "collapsed": False,
                            "id": self._next_id(), "panels": [],
                            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self._y}})
        self._y += 1

    def add(self, p, w, h):
        if self._x + w > 24:
            self._newline()
        p = dict(p)
        p["id"] = self._next_id()
        alerts = RUNBOOK_PANELS.get((self.uid, p.get("title")))
        if alerts:
            p["links"] = runbook_links(alerts)
            self._runbooks_used.add(p["title"])
        p["gridPos"] = {"h": h, "w": w, "x": self._x, "y": self._y}
        # Stable key order: identity and placement first.
        ordered = {k: p[k] for k in ("id", "type", "title", "description", "gridPos",
                                     "datasource") if k in p}
        ordered.update({k: v for k, v in p.items() if k not in ordered})
        self.panels.append(ordered)
        self._x += w
        self._line_h = max(self._line_h, h)

    def to_json(self):
        unused = [title for uid, title in RUNBOOK_PANELS
                  if uid == self.uid and title not in self._runbooks_used]
        if unused:
            raise ValueError("RUNBOOK_PANELS names panels %s has not: %s" % (self.uid, unused))
        return {
            "uid": self.uid,
            "title": self.title,
            "description": self.description,
            "tags": TAGS,
            "editable": True,
            "graphTooltip": 1,
            "schemaVersion": SCHEMA_VERSION,
            "version": 1,
            "timezone": "browser",
            "fiscalYearStartMonth": 0,
            "liveNow": False,
            "refresh": self.refresh,
            "time": {"from": self.time_from, "to": "now"},
            "timepicker": {},
            "weekStart": "",
            "annotations": {"list": [{
                "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
                "name": "Annotations & Alerts", "type": "dashboard"}]},
            "links": [{"asDropdown": True, "icon": "external link", "includeVars": False,
                       "keepTime": True, "tags": TAGS, "targetBlank": False,
                       "title": "fabricmon dashboards", "tooltip": "", "type": "dashboards",
                       "url": ""}] if self.links else [],
            "templating": {"list": self.variables},
            "panels": self.panels,
        }


def sum_rates(metrics, sel, by):
    """Sum of the rates of several counter families. Not rate({__name__=~"a|b"}): rate() drops
    the metric name, so two families of one port collide ("vector cannot contain metrics with
    the same labelset"). Each family gets its own `counter` label, then they are summed."""
    parts = ['label_replace(rate(%s{%s}[%s]), "counter", "%s", "__name__", ".*")'
             % (m, sel, RI, m) for m in metrics]
    return "sum by (%s) (%s)" % (by, " or ".join(parts))


def wait_share(sel, by=None):
    """XmitWait / (XmitWait + XmitData words): the congestion detector's "fraction of time
    waiting for credits" (daemon/detectors/congestion.cc). Data bytes / 4 = PMA data words."""
    wait = "rate(fabricmon_ib_port_xmit_wait_total{%s}[%s])" % (sel, RI)
    data = "rate(fabricmon_ib_port_xmit_data_bytes_total{%s}[%s])" % (sel, RI)
    if by:
        wait = "sum by (%s) (%s)" % (by, wait)
        data = "sum by (%s) (%s)" % (by, data)
    return "%s / (%s + %s / 4)" % (wait, wait, data)


def with_tier(expr):
    """Adds a `tier` label from the switch name ($tier_regex's first group; "other" if none)."""
    return ('label_replace(label_replace(%s, "tier", "other", "switch", ".*"), '
            '"tier", "$1", "switch", "$tier_regex")' % expr)


def tier_share(sel):
    """wait_share() summed per switch tier."""
    wait = "sum by (tier) (%s)" % with_tier(
        "rate(fabricmon_ib_port_xmit_wait_total{%s}[%s])" % (sel, RI))
    data = "sum by (tier) (%s)" % with_tier(
        "rate(fabricmon_ib_port_xmit_data_bytes_total{%s}[%s])" % (sel, RI))
    return "%s / (%s + %s / 4)" % (wait, wait, data)


def node_link(column="node"):
    """Makes a table's node column open the node drill-down for that node (keeping the time
    range). For a switch-port subject the column holds the switch name: that link shows nothing."""
    return {"matcher": {"id": "byName", "options": column},
            "properties": [{"id": "links", "value": [{
                "title": "Node drill-down: ${__value.raw}",
                "url": "/d/fabricmon-node?${__url_time_range}&var-node=${__value.raw}"}]}]}


def wait_share_table(title, description, sel, node_links=True):
    """Top $topk IB ports by XmitWait share: HCA ports (node, device) and switch ports (switch)."""
    return share_table(title, description, "topk($topk, %s)" % wait_share(sel), "XmitWait share",
                       ["node", "device", "switch", "port", "XmitWait share"],
                       hide=("switch_guid",), node_links=node_links)


def severity_override():
    return override_name("severity", mappings=text_mappings(SEVERITY_TEXT),
                         custom__cellOptions={"type": "color-text"})


# ------------------------------------------------------------------------------------------
# (1) Fabric overview.


def overview():
    N = 'node=~"$node"'
    JN = "%s, %s" % (J, N)
    SW = '%s, switch=~"$switch"' % J
    d = Dashboard(
        "fabricmon-overview", "fabricmon / Fabric overview",
        "The whole fabric at a glance: fabricmon's findings, which nodes report, congestion "
        "(IB credit waits by switch tier, RoCE PFC pauses), link flaps, errors and saturated "
        "counters.",
        [datasource_variable(), cluster_variable(), job_variable(),
         query_variable("node", "Node", 'label_values(fabricmon_node_up{%s}, node)' % J,
                        multi=True, include_all=True, all_value=".+",
                        description="Hosts (fabricmon agents). Filters host panels; switch "
                                    "panels use the switch variable."),
         query_variable("switch", "Switch",
                        'label_values(fabricmon_ib_port_xmit_wait_total{%s, switch!=""}, switch)'
                        % J, multi=True, include_all=True, all_value=".+",
                        description="InfiniBand switches swept by an agent's ib_fabric "
                                    "collector (names are the switches' node descriptions)."),
         textbox_variable(
             "tier_regex", "Tier regex", "(?i).*?(superspine|spine|leaf|core|tor|edge|agg).*",
             description="RE2 over the switch name (fully anchored); its first group is the "
                         "tier. Switches that do not match are tier \"other\"."),
         custom_variable("topk", "Top N", ["5", "10", "20", "50"], "10")])

    d.row("Status")
    d.add(stat("Nodes up", "Nodes whose agent is connected and sent data within "
               "node_stale_after_ms (fabricmon_node_up).",
               "sum(fabricmon_node_up{%s})" % JN, thresholds_=thresholds("green")), 4, 4)
    d.add(stat("Nodes down", "Known nodes whose agent is not streaming: their fabric is not "
               "monitored and their series are not exported.",
               "sum(fabricmon_node_up{%s} == bool 0)" % JN,
               thresholds_=thresholds("green", (1, "red"))), 4, 4)
    d.add(stat("Critical findings", "Active findings of severity critical (link flapping, "
               "congestion spreading, pause storm, NVLink down).",
               'sum(fabricmon_finding_active{%s, severity="critical"}) or vector(0)' % J,
               thresholds_=thresholds("green", (1, "red"))), 4, 4)
    d.add(stat("Warning findings", "Active findings of severity warning.",
               'sum(fabricmon_finding_active{%s, severity="warning"}) or vector(0)' % J,
               thresholds_=thresholds("green", (1, "orange"))), 4, 4)
    d.add(stat("Saturated counters", "Counters pinned at their maximum "
               "(fabricmon_series_saturated): rate() reads 0 on them although events continue. "
               "Clear them (perfquery -R).",
               "count(fabricmon_series_saturated{%s} == 1) or vector(0)" % JN,
               thresholds_=thresholds("green", (1, "orange"))), 4, 4)
    d.add(stat("Aggregator targets up", "Prometheus scrape targets of the job(s) that answer "
               "(up == 1).", "sum(up{%s})" % J, thresholds_=thresholds("red", (1, "green"))),
          4, 4)

    d.row("Findings")
    d.add(table("Active findings", "What the aggregator's detectors see now "
                "(fabricmon_finding_active). node/device/port is a host subject (gpuN and the link "
                "for NVLink), switch/port a switch port, peer the other end of the cable. "
                "`fabricmon findings` and `fabricmon diagnose` give the evidence.",
                [target("max by (kind, severity, node, device, switch, port, peer) "
                        "(fabricmon_finding_active{%s})" % J)],
                hide=("Value",),
                order=["severity", "kind", "node", "device", "switch", "port", "peer"],
                overrides=[severity_override(), node_link()], sort_by=[("severity", False)]),
          14, 9)
    d.add(bargauge("Active findings by kind and severity", "Count of active findings.",
                   [target("sum by (kind, severity) (fabricmon_finding_active{%s})" % J,
                           "{{kind}} ({{severity}})")],
                   thresholds_=thresholds("orange", (1, "red"))), 10, 9)
    d.add(timeseries("Findings raised", "Incidents raised per interval "
                     "(increase of fabricmon_findings_total, which restarts at 0 with the "
                     "aggregator).",
                     [target("sum by (kind, severity) (increase(fabricmon_findings_total{%s}[%s]))"
                             % (J, RI), "{{kind}} ({{severity}})")], bars=True, stack=True,
                     legend_calcs=("sum",)), 12, 8)
    d.add(timeseries("Active findings over time", "Active findings by kind.",
                     [target("sum by (kind) (fabricmon_finding_active{%s})" % J, "{{kind}}")],
                     stack=True, decimals=0), 12, 8)

    d.row("Nodes")
    d.add(state_timeline("Node up / down", "fabricmon_node_up per node.",
                         "max by (node) (fabricmon_node_up{%s})" % JN, "{{node}}",
                         value_mappings(UP_DOWN)), 12, 8)
    d.add(table("Nodes", "Per node: connected, seconds since the agent last sent, series "
                "declared, active findings whose subject is on the node.",
                targets("max by (node) (fabricmon_node_up{%s})" % JN,
                        "max by (node) (fabricmon_node_last_seen_age_seconds{%s})" % JN,
                        "max by (node) (fabricmon_node_series{%s})" % JN,
                        "count by (node) (fabricmon_finding_active{%s})" % JN),
                rename={"Value #A": "up", "Value #B": "last seen (s ago)",
                        "Value #C": "series", "Value #D": "active findings"},
                overrides=[override_name("up", mappings=value_mappings(UP_DOWN),
                                         custom__cellOptions={"type": "color-text"}),
                           override_name("last seen (s ago)", unit="s", decimals=1),
                           node_link()],
                sort_by=[("up", False)]), 12, 8)

    d.row("Congestion")
    d.add(timeseries("IB congestion by switch tier (XmitWait share)",
                     "Credit waits of switch ports, summed per tier: XmitWait / (XmitWait + "
                     "XmitData words), the congestion detector's measure (5 % raises a finding). "
                     "Tier comes from the switch name ($tier_regex). Needs switch ports swept "
                     "by an agent's ib_fabric collector.",
                     [target(tier_share(SW), "{{tier}}")],
                     unit="percentunit", min_=0), 12, 8)
    d.add(timeseries("Most congested switches (XmitWait share, top $topk)",
                     "Per switch, over all its swept ports.",
                     [target("topk($topk, %s)" % wait_share(SW, by="switch"), "{{switch}}")],
                     unit="percentunit", min_=0), 12, 8)
    d.add(wait_share_table("Top XmitWait ports", "HCA ports (node, device) and switch ports "
                           "(switch) waiting for credits the longest share of the time (XmitWait "
                           "share over $__rate_interval). PortXmitWait is 32-bit and saturates: "
                           "see Saturated counters.", JN), 12, 9)
    d.add(share_table("Top paused ports (RoCE PFC)", "Fraction of time paused per RoCE netdev, "
                      "direction and priority (rate of "
                      "fabricmon_roce_pfc_pause_duration_seconds_total). tx: this port pauses its "
                      "peer (slow receiver, likely root); rx: its peer pauses it (victim).",
                      "topk($topk, rate(fabricmon_roce_pfc_pause_duration_seconds_total{%s}[%s]))"
                      % (JN, RI), "time paused",
                      ["node", "netdev", "direction", "priority", "time paused"]), 12, 9)
    d.add(timeseries("PFC pause time, top $topk ports",
                     "Fraction of time paused (1 = paused all the time).",
                     [target("topk($topk, rate(fabricmon_roce_pfc_pause_duration_seconds_total{%s}"
                             "[%s]))" % (JN, RI),
                             "{{node}} {{netdev}} {{direction}} prio {{priority}}")],
                     unit="percentunit", min_=0), 12, 8)
    d.add(timeseries("XmitWait share, top $topk ports", "HCA and switch ports.",
                     [target("topk($topk, %s)" % wait_share(JN),
                             "{{node}} {{device}}{{switch}}/{{port}}")],
                     unit="percentunit", min_=0), 12, 8)

    d.row("Link flaps, errors, saturated counters")
    d.add(timeseries("Link down events", "Edge-exact link-down counters: IB LinkDowned (HCA and "
                     "switch ports), netdev carrier_down_count, mlx5 link_down_events_phy. Two "
                     "within flap_window_s raise link_flapping.",
                     targets(("sum by (node, device, switch, port) (increase("
                              "fabricmon_ib_link_downed_total{%s}[%s])) > 0" % (JN, RI),
                              "IB {{node}} {{device}}{{switch}}/{{port}}"),
                             ("sum by (node, netdev) (increase(fabricmon_netdev_carrier_down_total"
                              "{%s}[%s])) > 0" % (JN, RI), "carrier {{node}} {{netdev}}"),
                             ("sum by (node, netdev) (increase("
                              "fabricmon_roce_link_down_events_total{%s}[%s])) > 0" % (JN, RI),
                              "RoCE {{node}} {{netdev}}")),
                     bars=True, legend_calcs=("sum",)), 12, 8)
    d.add(table("Links that went down in the time range", "Ports with link-down events in the "
                "dashboard's time range, by counter.",
                [target(" or ".join([
                    'label_replace(sum by (node, device, switch, port) (increase('
                    'fabricmon_ib_link_downed_total{%s}[$__range])) > 0, "counter", '
                    '"ib_link_downed", "__name__", ".*")' % JN,
                    'label_replace(sum by (node, netdev) (increase('
                    'fabricmon_netdev_carrier_down_total{%s}[$__range])) > 0, "counter", '
                    '"netdev_carrier_down", "__name__", ".*")' % JN,
                    'label_replace(sum by (node, netdev) (increase('
                    'fabricmon_roce_link_down_events_total{%s}[$__range])) > 0, "counter", '
                    '"roce_link_down_events", "__name__", ".*")' % JN]))],
                rename={"Value": "link downs"},
                order=["node", "device", "switch", "port", "netdev", "counter", "link downs"],
                overrides=[override_name("link downs", decimals=0)],
                sort_by=[("link downs", True)]), 12, 8)
    d.add(timeseries("Physical / link errors, top $topk ports",
                     "IB: symbol errors, link error recoveries, receive, remote physical, "
                     "integrity, overrun errors and transmit discards (HCA and switch ports). "
                     "RoCE: PHY CRC, PCS symbol and symbol errors.",
                     targets(("topk($topk, %s)" % sum_rates(IB_ERROR_METRICS, JN,
                                                            "node, device, switch, port"),
                              "IB {{node}} {{device}}{{switch}}/{{port}}"),
                             ("topk($topk, %s)" % sum_rates(ROCE_PHY_ERROR_METRICS, JN,
                                                            "node, netdev"),
                              "RoCE {{node}} {{netdev}}")),
                     unit="cps"), 12, 8)
    d.add(table("Saturated counters", "Counters pinned at their maximum. Their rate() reads 0 "
                "while events continue, so alerts and panels on them are blind: clear the port "
                "counters (perfquery -R) and find out why they filled up.",
                [target("fabricmon_series_saturated{%s} == 1" % JN)],
                hide=("Value", "switch_guid"),
                order=["node", "metric", "device", "switch", "port", "netdev"]), 12, 8)
    return d


# ------------------------------------------------------------------------------------------
# (2) Node drill-down.


def node_dashboard():
    NS = '%s, node="$node"' % J
    DEV = '%s, device=~"$device"' % NS
    NET = '%s, netdev=~"$netdev"' % NS
    GPU = '%s, gpu=~"$gpu"' % NS
    d = Dashboard(
        "fabricmon-node", "fabricmon / Node drill-down",
        "One node: its findings, HCA ports (state, rate, data, errors, credit waits), RoCE PFC by "
        "priority and direction, RDMA versus kernel TCP/IP bytes, TCP retransmits, GPUs and "
        "NVLinks, and the health of its collectors.",
        [datasource_variable(), cluster_variable(), job_variable(),
         query_variable("node", "Node", 'label_values(fabricmon_node_up{%s}, node)' % J),
         query_variable("device", "HCA", 'label_values(fabricmon_ib_port_state{%s, node="$node"}'
                        ', device)' % J, multi=True, include_all=True, all_value=".+",
                        description="RDMA devices of the node (ib_sysfs)."),
         query_variable("netdev", "Netdev", 'label_values(fabricmon_netdev_info{%s, '
                        'node="$node"}, netdev)' % J, multi=True, include_all=True,
                        all_value=".+"),
         query_variable("gpu", "GPU", 'label_values(fabricmon_gpu_info{%s, node="$node"}, gpu)'
                        % J, multi=True, include_all=True, all_value=".+")])

    d.row("$node")
    d.add(stat("Agent", "fabricmon_node_up: connected and sending.",
               "max(fabricmon_node_up{%s})" % NS, mappings=value_mappings(UP_DOWN),
               color_mode="background", graph=False), 4, 4)
    d.add(stat("Last seen", "Seconds since the agent last sent anything.",
               "max(fabricmon_node_last_seen_age_seconds{%s})" % NS, unit="s",
               thresholds_=thresholds("green", (10, "orange"), (30, "red")), decimals=1), 4, 4)
    d.add(stat("Series", "Series the node's agent declared.",
               "max(fabricmon_node_series{%s})" % NS), 4, 4)
    d.add(stat("Findings touching the node", "Active findings whose subject is on the node or "
               "whose peer is one of its ports.",
               'count(fabricmon_finding_active{%s} or fabricmon_finding_active{%s, '
               'peer=~"$node .*"}) or vector(0)' % (NS, J),
               thresholds_=thresholds("green", (1, "orange"))), 4, 4)
    d.add(stat("Saturated counters", "Counters of the node pinned at their maximum.",
               "count(fabricmon_series_saturated{%s}) or vector(0)" % NS,
               thresholds_=thresholds("green", (1, "orange"))), 4, 4)
    d.add(stat("Replay buffer", "Unacknowledged data the agent holds (grows while the "
               "aggregator is unreachable).",
               "max(fabricmon_agent_replay_buffer_bytes{%s})" % NS, unit="bytes"), 4, 4)
    d.add(table("Findings touching $node", "Subject on this node, or peer on this node "
                "(e.g. a switch port that waits on it).",
                [target("max by (kind, severity, node, device, port, peer) ("
                        'fabricmon_finding_active{%s} or fabricmon_finding_active{%s, '
                        'peer=~"$node .*"})' % (NS, J))],
                hide=("Value",), order=["severity", "kind", "node", "device", "port", "peer"],
                overrides=[severity_override()], sort_by=[("severity", False)]), 24, 6)

    d.row("HCA ports")
    d.add(table("HCA ports", "State, physical state, negotiated rate, data rates and link "
                "layer of every RDMA port (ib_sysfs).",
                targets("max by (device, port, link_layer, netdev) (fabricmon_ib_port_info{%s})"
                        % DEV,
                        "max by (device, port) (fabricmon_ib_port_state{%s})" % DEV,
                        "max by (device, port) (fabricmon_ib_port_phys_state{%s})" % DEV,
                        "max by (device, port) (fabricmon_ib_port_rate_bytes_per_second{%s})"
                        % DEV,
                        "sum by (device, port) (rate(fabricmon_ib_port_xmit_data_bytes_total{%s}"
                        "[%s]))" % (DEV, RI),
                        "sum by (device, port) (rate(fabricmon_ib_port_rcv_data_bytes_total{%s}"
                        "[%s]))" % (DEV, RI)),
                rename={"Value #B": "state", "Value #C": "phys state", "Value #D": "rate",
                        "Value #E": "tx", "Value #F": "rx", "link_layer": "link layer"},
                hide=("Value #A",),
                order=["device", "port", "link layer", "netdev", "state", "phys state", "rate",
                       "tx", "rx"],
                overrides=[override_name("state", mappings=value_mappings(IB_PORT_STATES),
                                         custom__cellOptions={"type": "color-text"}),
                           override_name("phys state", mappings=value_mappings(IB_PHYS_STATES),
                                         custom__cellOptions={"type": "color-text"}),
                           override_name("rate", unit="Bps"), override_name("tx", unit="Bps"),
                           override_name("rx", unit="Bps")]), 24, 8)
    d.add(state_timeline("Port state", "Logical state of each port over time.",
                         "max by (device, port) (fabricmon_ib_port_state{%s})" % DEV,
                         "{{device}}/{{port}}", value_mappings(IB_PORT_STATES)), 12, 8)
    d.add(timeseries("Port data rate", "IB PortXmitData / PortRcvData (bytes = data words x 4); "
                     "rx drawn below the axis. On IB ports this includes IPoIB.",
                     targets(("sum by (device, port) (rate(fabricmon_ib_port_xmit_data_bytes_total"
                              "{%s}[%s]))" % (DEV, RI), "{{device}}/{{port}} tx"),
                             ("sum by (device, port) (rate(fabricmon_ib_port_rcv_data_bytes_total"
                              "{%s}[%s]))" % (DEV, RI), "{{device}}/{{port}} rx")),
                     unit="Bps",
                     overrides=[override_regex(".* rx$", custom__transform="negative-Y")]),
          12, 8)
    d.add(timeseries("Link utilization", "Data rate / negotiated port rate.",
                     targets(("sum by (device, port) (rate(fabricmon_ib_port_xmit_data_bytes_total"
                              "{%s}[%s])) / max by (device, port) "
                              "(fabricmon_ib_port_rate_bytes_per_second{%s})" % (DEV, RI, DEV),
                              "{{device}}/{{port}} tx"),
                             ("sum by (device, port) (rate(fabricmon_ib_port_rcv_data_bytes_total"
                              "{%s}[%s])) / max by (device, port) "
                              "(fabricmon_ib_port_rate_bytes_per_second{%s})" % (DEV, RI, DEV),
                              "{{device}}/{{port}} rx")),
                     unit="percentunit", min_=0), 12, 8)
    d.add(timeseries("XmitWait share", "Time waiting for credits: XmitWait / (XmitWait + XmitData "
                     "words). The congestion detector raises a finding at 5 %.",
                     [target(wait_share(DEV, by="device, port"), "{{device}}/{{port}}")],
                     unit="percentunit", min_=0), 12, 8)
    d.add(timeseries("Port errors", "Sum of the IBA error counters per port (symbol, link "
                     "recovery, receive, remote physical, integrity, overrun, xmit discards).",
                     [target(sum_rates(IB_ERROR_METRICS, DEV, "device, port"),
                             "{{device}}/{{port}}")],
                     unit="cps"), 12, 8)
    d.add(table("Error counters in the time range", "Increase of each IBA error counter and of "
                "LinkDowned per port over the dashboard's time range.",
                targets(*["max by (device, port) (increase(fabricmon_ib_%s_total{%s}[$__range]))"
                          % (name, DEV) for name, _ in IB_ERROR_COUNTERS + [
                              ("link_downed", "link downs")]]),
                rename={"Value #%s" % chr(ord("A") + i): label for i, (_, label) in enumerate(
                    IB_ERROR_COUNTERS + [("link_downed", "link downs")])},
                overrides=[override_regex(".*(errors|recoveries|overruns|discards|downs)$",
                                          decimals=0,
                                          custom__cellOptions={"type": "color-text"},
                                          thresholds=thresholds("text", (1, "red")))]), 24, 7)
    d.add(timeseries("Congestion control (DCQCN)", "mlx5 hw_counters: ECN-marked RoCE packets "
                     "received and CNPs sent (notification point), CNPs handled and ignored "
                     "(reaction point). Pauses without marks or CNPs: ECN is not engaging.",
                     targets(("sum by (device) (rate(fabricmon_ib_hw_np_ecn_marked_roce_packets_"
                              "total{%s}[%s]))" % (DEV, RI), "{{device}} ECN-marked rx"),
                             ("sum by (device) (rate(fabricmon_ib_hw_np_cnp_sent_total{%s}[%s]))"
                              % (DEV, RI), "{{device}} CNP sent"),
                             ("sum by (device) (rate(fabricmon_ib_hw_rp_cnp_handled_total{%s}[%s]))"
                              % (DEV, RI), "{{device}} CNP handled"),
                             ("sum by (device) (rate(fabricmon_ib_hw_rp_cnp_ignored_total{%s}[%s]))"
                              % (DEV, RI), "{{device}} CNP ignored")),
                     unit="pps"), 12, 8)
    d.add(timeseries("Out-of-sequence and retransmissions (RDMA)", "mlx5 q-counters: "
                     "out_of_sequence, packet_seq_err, local_ack_timeout_err, roce_adp_retrans.",
                     targets(("sum by (device) (rate(fabricmon_ib_hw_out_of_sequence_total{%s}"
                              "[%s]))" % (DEV, RI), "{{device}} out of sequence"),
                             ("sum by (device) (rate(fabricmon_ib_hw_packet_seq_err_total{%s}[%s]))"
                              % (DEV, RI), "{{device}} packet seq err"),
                             ("sum by (device) (rate(fabricmon_ib_hw_local_ack_timeout_err_total"
                              "{%s}[%s]))" % (DEV, RI), "{{device}} local ack timeout"),
                             ("sum by (device) (rate(fabricmon_ib_hw_roce_adp_retrans_total{%s}"
                              "[%s]))" % (DEV, RI), "{{device}} adaptive retrans")),
                     unit="cps"), 12, 8)

    d.row("RoCE: PFC, priorities, drops")
    d.add(timeseries("PFC pause time by priority and direction", "Fraction of time paused. tx: "
                     "this NIC pauses its switch (its receive side cannot keep up); rx: the switch "
                     "pauses this NIC (congestion downstream).",
                     [target("sum by (netdev, direction, priority) (rate("
                             "fabricmon_roce_pfc_pause_duration_seconds_total{%s}[%s]))"
                             % (NET, RI), "{{netdev}} {{direction}} prio {{priority}}")],
                     unit="percentunit", min_=0), 12, 8)
    d.add(timeseries("PFC pause frames by priority and direction", "Pause frames per second.",
                     [target("sum by (netdev, direction, priority) (rate("
                             "fabricmon_roce_pfc_pause_frames_total{%s}[%s]))" % (NET, RI),
                             "{{netdev}} {{direction}} prio {{priority}}")],
                     unit="pps"), 12, 8)
    d.add(timeseries("Traffic by priority", "Bytes per second per priority on the physical port; "
                     "rx below the axis.",
                     [target("sum by (netdev, direction, priority) (rate("
                             "fabricmon_roce_prio_bytes_total{%s}[%s]))" % (NET, RI),
                             "{{netdev}} {{direction}} prio {{priority}}")],
                     unit="Bps",
                     overrides=[override_regex(".* rx prio .*", custom__transform="negative-Y")]),
          12, 8)
    d.add(timeseries("Drops, ECN marks and pause storms", "rx_out_of_buffer (host too slow), "
                     "PHY discards, ECN-marked packets per priority, pause-storm watchdog events.",
                     targets(("sum by (netdev) (rate(fabricmon_roce_rx_out_of_buffer_total{%s}"
                              "[%s]))" % (NET, RI), "{{netdev}} rx out of buffer"),
                             ("sum by (netdev, direction) (rate(fabricmon_roce_phy_discards_total"
                              "{%s}[%s]))" % (NET, RI), "{{netdev}} {{direction}} phy discards"),
                             ("sum by (netdev, priority) (rate("
                              "fabricmon_roce_rx_prio_ecn_marked_packets_total{%s}[%s]))"
                              % (NET, RI), "{{netdev}} prio {{priority}} ECN-marked"),
                             ("sum by (netdev) (rate("
                              "fabricmon_roce_pause_storm_warning_events_total{%s}[%s]) + rate("
                              "fabricmon_roce_pause_storm_error_events_total{%s}[%s]))"
                              % (NET, RI, NET, RI), "{{netdev}} pause storm events")),
                     unit="pps"), 12, 8)

    d.row("RDMA vs kernel TCP/IP")
    kernel_join = ("(rate(fabricmon_netdev_rx_bytes_total{%s}[%s]) + "
                   "rate(fabricmon_netdev_tx_bytes_total{%s}[%s])) "
                   "* on (job, instance, node, netdev) group_left (kind) "
                   'fabricmon_netdev_info{%s, kind!~"loopback|virtual"}')
    d.add(timeseries("Bytes by path (rx + tx)", "HCA port data (IB: RDMA and IPoIB; RoCE: what "
                     "the HCA's PMA counts), RoCE RDMA bytes through the vport (ethtool), and "
                     "kernel-stack bytes by netdev kind (rdma_ethernet, ipoib, ethernet). Kernel "
                     "bytes high while RDMA stays flat: a job fell back to TCP.",
                     targets(("sum(rate(fabricmon_ib_port_xmit_data_bytes_total{%s}[%s]) + "
                              "rate(fabricmon_ib_port_rcv_data_bytes_total{%s}[%s]))"
                              % (NS + ', device!=""', RI, NS + ', device!=""', RI),
                              "HCA port data"),
                             ("sum(rate(fabricmon_roce_rdma_bytes_total{%s}[%s]))" % (NS, RI),
                              "RoCE RDMA (vport)"),
                             ("sum by (kind) (%s)" % (kernel_join % (NS, RI, NS, RI, NS)),
                              "kernel stack on {{kind}}")),
                     unit="Bps"), 12, 8)
    d.add(timeseries("Kernel bytes per netdev (rx + tx)", "netdev statistics (kernel stack only: "
                     "RDMA bypasses them), physical and RDMA-capable netdevs.",
                     [target("sum by (netdev, kind) (%s)" % (kernel_join % (NET, RI, NET, RI, NET)),
                             "{{netdev}} ({{kind}})")],
                     unit="Bps"), 12, 8)
    d.add(timeseries("TCP segments and retransmits", "Node-wide TCP (the agent's network "
                     "namespace): segments in/out, retransmitted segments, RTO timeouts.",
                     targets(("sum by (direction) (rate(fabricmon_tcp_segments_total{%s}[%s]))"
                              % (NS, RI), "segments {{direction}}"),
                             ("sum(rate(fabricmon_tcp_retransmitted_segments_total{%s}[%s]))"
                              % (NS, RI), "retransmitted"),
                             ("sum(rate(fabricmon_tcp_timeouts_total{%s}[%s]))" % (NS, RI),
                              "RTO timeouts")),
                     unit="pps"), 12, 8)
    d.add(timeseries("TCP retransmit ratio", "Retransmitted / sent segments.",
                     [target("sum(rate(fabricmon_tcp_retransmitted_segments_total{%s}[%s])) / "
                             'sum(rate(fabricmon_tcp_segments_total{%s, direction="out"}[%s]))'
                             % (NS, RI, NS, RI), "retransmit ratio")],
                     unit="percentunit", min_=0), 12, 8)
    d.add(table("Netdevs", "Every netdev of the node (netdev collector): kind (rdma_ethernet, "
                "ipoib, ethernet, virtual, loopback), driver, RDMA device, state and rates.",
                targets("max by (netdev, kind, driver, rdma_device) (fabricmon_netdev_info{%s})"
                        % NET,
                        "max by (netdev) (fabricmon_netdev_oper_state{%s})" % NET,
                        "max by (netdev) (fabricmon_netdev_speed_bytes_per_second{%s})" % NET,
                        "max by (netdev) (fabricmon_netdev_mtu_bytes{%s})" % NET,
                        "sum by (netdev) (rate(fabricmon_netdev_rx_bytes_total{%s}[%s]))"
                        % (NET, RI),
                        "sum by (netdev) (rate(fabricmon_netdev_tx_bytes_total{%s}[%s]))"
                        % (NET, RI),
                        "max by (netdev) (fabricmon_netdev_carrier_down_total{%s})" % NET),
                rename={"Value #B": "oper state", "Value #C": "speed", "Value #D": "mtu",
                        "Value #E": "rx", "Value #F": "tx", "Value #G": "carrier downs",
                        "rdma_device": "RDMA device"},
                hide=("Value #A",),
                order=["netdev", "kind", "driver", "RDMA device", "oper state", "speed", "mtu",
                       "rx", "tx", "carrier downs"],
                overrides=[override_name("oper state", mappings=value_mappings(NETDEV_OPER_STATES),
                                         custom__cellOptions={"type": "color-text"}),
                           override_name("speed", unit="Bps"), override_name("mtu", unit="bytes"),
                           override_name("rx", unit="Bps"), override_name("tx", unit="Bps")]),
          24, 8)

    d.row("GPUs and NVLink")
    d.add(timeseries("GPU utilization", "Fraction of time a kernel ran (NVML).",
                     [target("max by (gpu) (fabricmon_gpu_utilization_ratio{%s})" % GPU,
                             "GPU {{gpu}}")], unit="percentunit", min_=0, max_=1), 12, 8)
    d.add(bargauge("Active NVLinks per GPU", "Links in state active (fabricmon_nvlink_state = 1)."
                   " A GPU with fewer links than its peers runs collectives over PCIe.",
                   [target("sum by (gpu) (fabricmon_nvlink_state{%s})" % GPU, "GPU {{gpu}}")],
                   thresholds_=thresholds("red", (1, "green"))), 12, 8)
    d.add(timeseries("NVLink errors by GPU and type", "nvmlDeviceGetNvLinkErrorCounter: replay, "
                     "recovery, crc_flit, crc_data, ecc_data, summed over each GPU's links.",
                     [target("sum by (gpu, type) (rate(fabricmon_nvlink_errors_total{%s}[%s]))"
                             % (GPU, RI), "GPU {{gpu}} {{type}}")], unit="cps"), 12, 8)
    d.add(table("NVLinks with errors in the time range", "Top 20 links by error count.",
                [target("topk(20, sum by (gpu, link, type) (increase("
                        "fabricmon_nvlink_errors_total{%s}[$__range])) > 0)" % GPU)],
                rename={"Value": "errors"}, order=["gpu", "link", "type", "errors"],
                overrides=[override_name("errors", decimals=0)],
                sort_by=[("errors", True)]), 12, 8)
    d.add(table("Inactive NVLinks", "Links NVML reports inactive (normally none).",
                [target("fabricmon_nvlink_state{%s} == 0" % GPU)], hide=("Value", "node"),
                order=["gpu", "link"]), 8, 7)
    d.add(timeseries("NVLink5 recoveries", "Link recoveries by outcome (Blackwell and later): "
                     "failed = the link went down.",
                     [target("sum by (gpu, outcome) (rate(fabricmon_nvlink_recovery_events_total"
                             "{%s}[%s]))" % (GPU, RI), "GPU {{gpu}} {{outcome}}")],
                     unit="cps"), 8, 7)
    d.add(timeseries("GPU memory bandwidth utilization", "Fraction of time device memory was "
                     "read or written (not capacity).",
                     [target("max by (gpu) (fabricmon_gpu_memory_utilization_ratio{%s})" % GPU,
                             "GPU {{gpu}}")], unit="percentunit", min_=0, max_=1), 8, 7)
    d.add(timeseries("NVLink error rate, top 10 links", "All error types of a link summed; the "
                     "nvlink_degraded finding fires from 1 error/s on one link.",
                     [target("topk(10, sum by (gpu, link) (rate(fabricmon_nvlink_errors_total{%s}"
                             "[%s])))" % (GPU, RI), "GPU {{gpu}} link {{link}}")], unit="cps"),
          24, 7)

    d.row("Collectors")
    d.add(table("Collector health", "Last run succeeded, hardware found, run time, and read "
                "errors in the time range. success 0 with hardware absent is normal.",
                targets("max by (collector) (fabricmon_collector_success{%s})" % NS,
                        "max by (collector) (fabricmon_collector_hardware_present{%s})" % NS,
                        "max by (collector) (fabricmon_collector_duration_seconds{%s})" % NS,
                        "sum by (collector) (increase(fabricmon_collector_errors_total{%s}"
                        "[$__range]))" % NS),
                rename={"Value #A": "success", "Value #B": "hardware",
                        "Value #C": "run time", "Value #D": "read errors"},
                overrides=[override_name("success", mappings=value_mappings(OK_FAIL),
                                         custom__cellOptions={"type": "color-text"}),
                           override_name("hardware", mappings=value_mappings(PRESENT)),
                           override_name("run time", unit="s"),
                           override_name("read errors", decimals=0)]), 8, 8)
    d.add(timeseries("Collector run time", "Wall time of each collector's last run.",
                     [target("max by (collector) (fabricmon_collector_duration_seconds{%s})" % NS,
                             "{{collector}}")], unit="s"), 8, 8)
    d.add(timeseries("Collector read errors", "By collector and kind (missing, empty, no_pma, "
                     "not_numeric, unsupported, permission, io).",
                     [target("sum by (collector, kind) (rate(fabricmon_collector_errors_total{%s}"
                             "[%s]))" % (NS, RI), "{{collector}} {{kind}}")], unit="cps"), 8, 8)
    return d


# ------------------------------------------------------------------------------------------
# (3) Congestion tree.


def congestion_dashboard():
    SPREAD = '%s, kind="congestion_spreading"' % J
    d = Dashboard(
        "fabricmon-congestion", "fabricmon / Congestion tree",
        "Congestion spreading: the root port (sink: slow receiver or incast target), the "
        "direction it backs up to, how many ports wait behind it and how many hops deep the tree "
        "is; with the ports that wait (IB credits) or are paused (RoCE PFC).",
        [datasource_variable(), cluster_variable(), job_variable(),
         custom_variable("topk", "Top N", ["10", "20", "50", "100"], "20")])

    d.row("Spreading congestion")
    d.add(stat("Spreading trees", "Active congestion_spreading findings (one per root port).",
               "count(fabricmon_finding_victims{%s}) or vector(0)" % SPREAD,
               thresholds_=thresholds("green", (1, "red"))), 6, 4)
    d.add(stat("Victim ports", "Ports waiting behind a root, all trees.",
               "sum(fabricmon_finding_victims{%s}) or vector(0)" % SPREAD,
               thresholds_=thresholds("green", (1, "orange"), (8, "red"))), 6, 4)
    d.add(stat("Deepest tree", "Largest depth in hops from a root to its farthest victim.",
               "max(fabricmon_finding_depth_hops{%s}) or vector(0)" % SPREAD,
               thresholds_=thresholds("green", (1, "orange"), (3, "red"))), 6, 4)
    d.add(stat("Congested ports (not spreading)", "congestion findings: a port that waits or "
               "pauses, without a tree behind it.",
               'count(fabricmon_finding_active{%s, kind="congestion"}) or vector(0)' % J,
               thresholds_=thresholds("green", (1, "orange"))), 6, 4)
    d.add(table("Congestion trees", "One row per root. Root: the port everything waits on "
                "(node is the switch name for a switch port). Toward: the sink behind it "
                "(peer of the root). Victims and depth: fabricmon_finding_victims and "
                "fabricmon_finding_depth_hops. `fabricmon diagnose --nodes=<root node>` lists "
                "the victims.",
                targets("max by (node, device, port, peer, severity) "
                        "(fabricmon_finding_active{%s})" % SPREAD,
                        "max by (node, device, port) (fabricmon_finding_victims{%s})" % SPREAD,
                        "max by (node, device, port) (fabricmon_finding_depth_hops{%s})"
                        % SPREAD),
                rename={"node": "root node", "device": "root device", "port": "root port",
                        "peer": "toward", "Value #B": "victims", "Value #C": "depth (hops)"},
                hide=("Value #A",),
                order=["severity", "root node", "root device", "root port", "toward", "victims",
                       "depth (hops)"],
                overrides=[severity_override(),
                           override_name("victims", decimals=0,
                                         custom__cellOptions={"type": "color-background",
                                                              "mode": "gradient"},
                                         thresholds=thresholds("orange", (8, "red"))),
                           node_link("root node")],
                sort_by=[("victims", True)]), 24, 7)
    d.add(timeseries("Victims per tree", "Ports waiting behind each root over time.",
                     [target("max by (node, device, port) (fabricmon_finding_victims{%s})"
                             % SPREAD, "root {{node}} {{device}}/{{port}}")], decimals=0), 12, 8)
    d.add(timeseries("Tree depth", "Hops from each root to its farthest victim.",
                     [target("max by (node, device, port) (fabricmon_finding_depth_hops{%s})"
                             % SPREAD, "root {{node}} {{device}}/{{port}}")], decimals=0), 12, 8)

    d.row("Waiting and paused ports")
    d.add(wait_share_table("Waiting ports: IB credit waits", "XmitWait share (XmitWait / "
                           "(XmitWait + XmitData words)) of HCA ports (node, device) and switch "
                           "ports (switch): the ports that form IB trees. 5 % raises a finding.",
                           J, node_links=False), 12, 10)
    d.add(share_table("Paused ports: RoCE PFC", "Fraction of time paused. role: tx = the port "
                      "pauses its switch (slow receiver: a root), rx = the switch pauses the port "
                      "(victim). RoCE switches are not measured: the tree is walked through the "
                      "link list.",
                      'topk($topk, label_replace(label_replace(sum by (node, netdev, direction, '
                      'priority) (rate(fabricmon_roce_pfc_pause_duration_seconds_total{%s}[%s])),'
                      ' "role", "paused by its switch (victim)", "direction", "rx"), "role", '
                      '"pausing its switch (root)", "direction", "tx"))' % (J, RI), "time paused",
                      ["node", "netdev", "priority", "direction", "role", "time paused"],
                      node_links=False), 12, 10)
    d.add(timeseries("XmitWait share, top $topk ports", "HCA and switch ports.",
                     [target("topk($topk, %s)" % wait_share(J),
                             "{{node}} {{device}}{{switch}}/{{port}}")],
                     unit="percentunit", min_=0), 12, 8)
    d.add(timeseries("PFC pause time, top $topk ports", "tx: pausing its switch; rx: paused.",
                     [target("topk($topk, sum by (node, netdev, direction) (rate("
                             "fabricmon_roce_pfc_pause_duration_seconds_total{%s}[%s])))"
                             % (J, RI), "{{node}} {{netdev}} {{direction}}")],
                     unit="percentunit", min_=0), 12, 8)

    d.row("Related findings and congestion control")
    d.add(table("Congestion, pause storm and ECN findings", "Active congestion, "
                "congestion_spreading, pause_storm and ecn_misconfigured findings.",
                [target("max by (kind, severity, node, device, port, peer) ("
                        'fabricmon_finding_active{%s, kind=~"congestion|congestion_spreading|'
                        'pause_storm|ecn_misconfigured"})' % J)],
                hide=("Value",), order=["severity", "kind", "node", "device", "port", "peer"],
                overrides=[severity_override()], sort_by=[("severity", False)]), 12, 8)
    d.add(timeseries("ECN marks and CNPs (fabric-wide)", "DCQCN at work: ECN-marked packets "
                     "received and CNPs sent by notification points, CNPs handled (or ignored) by "
                     "reaction points. Pauses without these: congestion control is not engaging.",
                     targets(("sum(rate(fabricmon_ib_hw_np_ecn_marked_roce_packets_total{%s}[%s]))"
                              % (J, RI), "ECN-marked received"),
                             ("sum(rate(fabricmon_ib_hw_np_cnp_sent_total{%s}[%s]))" % (J, RI),
                              "CNP sent"),
                             ("sum(rate(fabricmon_ib_hw_rp_cnp_handled_total{%s}[%s]))" % (J, RI),
                              "CNP handled"),
                             ("sum(rate(fabricmon_ib_hw_rp_cnp_ignored_total{%s}[%s]))" % (J, RI),
                              "CNP ignored")),
                     unit="pps"), 12, 8)
    return d


# ------------------------------------------------------------------------------------------
# (4) fabricmon self-monitoring.


def self_dashboard():
    JI = '%s, instance=~"$instance"' % J
    JN = '%s, node=~"$node"' % J
    d = Dashboard(
        "fabricmon-self", "fabricmon / Self-monitoring",
        "Is fabric monitoring itself working: aggregator ingest and rejects, /metrics build and "
        "scrape time, detectors, agents' streams, replay buffers and drops, collectors.",
        [datasource_variable(), cluster_variable(), job_variable(),
         query_variable("instance", "Aggregator", 'label_values(fabricmon_aggregator_series{%s}, '
                        'instance)' % J, multi=True, include_all=True, all_value=".+"),
         query_variable("node", "Node", 'label_values(fabricmon_node_up{%s}, node)' % J,
                        multi=True, include_all=True, all_value=".+"),
         custom_variable("topk", "Top N", ["5", "10", "20", "50"], "10")])

    d.row("Aggregator")
    d.add(stat("Aggregators up", "Scrape targets answering (up).",
               "sum(up{%s})" % JI, thresholds_=thresholds("red", (1, "green"))), 4, 4)
    d.add(stat("Agent streams open", "fabricmon_aggregator_streams.",
               "sum(fabricmon_aggregator_streams{%s})" % JI), 4, 4)
    d.add(stat("Series held", "fabricmon_aggregator_series.",
               "sum(fabricmon_aggregator_series{%s})" % JI), 4, 4)
    d.add(stat("Nodes up", "fabricmon_aggregator_nodes{state=\"up\"}.",
               'sum(fabricmon_aggregator_nodes{%s, state="up"})' % JI), 4, 4)
    d.add(stat("Nodes down", "fabricmon_aggregator_nodes{state=\"down\"}.",
               'sum(fabricmon_aggregator_nodes{%s, state="down"})' % JI,
               thresholds_=thresholds("green", (1, "red"))), 4, 4)
    d.add(stat("HCAs no agent claims", "Host HCAs the fabric topology knows that no node known "
               "to the aggregator claims (fabricmon_topology_unclaimed_ca): agents missing.",
               "count(fabricmon_topology_unclaimed_ca{%s}) or vector(0)" % JI,
               thresholds_=thresholds("green", (1, "orange"))), 4, 4)
    d.add(stat("/metrics build time", "Time the aggregator took to build its previous /metrics "
               "answer.", "max(fabricmon_aggregator_scrape_duration_seconds{%s})" % JI,
               unit="s", thresholds_=thresholds("green", (1, "orange"), (5, "red"))), 4, 4)
    d.add(timeseries("Ingest: batches and samples", "Sample batches and samples stored per "
                     "second.",
                     targets(("sum by (instance) (rate(fabricmon_aggregator_batches_total{%s}[%s]))"
                              % (JI, RI), "{{instance}} batches"),
                             ("sum by (instance) (rate(fabricmon_aggregator_samples_total{%s}[%s]))"
                              % (JI, RI), "{{instance}} samples")),
                     unit="ops"), 12, 8)
    d.add(timeseries("Ingest: bytes received", "Protobuf bytes of agent messages.",
                     [target("sum by (instance) (rate(fabricmon_aggregator_received_bytes_total"
                             "{%s}[%s]))" % (JI, RI), "{{instance}}")], unit="Bps"), 12, 8)
    d.add(timeseries("Rejected messages by reason", "Each reject ends that agent's stream. "
                     "duplicate_node: two hosts share a node_name; series_limit: more metric "
                     "families or layouts than the aggregator holds; others: version skew.",
                     [target("sum by (reason) (rate(fabricmon_aggregator_rejected_messages_total"
                             "{%s}[%s]))" % (JI, RI), "{{reason}}")], unit="cps"), 12, 8)
    d.add(timeseries("Series kept out by a series cap", "Series agents declared that "
                     "max_series_total (or a node's max_series_per_node) keeps out of the store, "
                     "and their values dropped per second; the nodes' other series are stored. "
                     "Raise the cap, add a shard or exclude devices.",
                     targets(("sum by (instance) (fabricmon_aggregator_series_unstored{%s})" % JI,
                              "{{instance}} series kept out"),
                             ("sum by (instance) (rate(fabricmon_aggregator_unstored_series_"
                              "samples_dropped_total{%s}[%s]))" % (JI, RI),
                              "{{instance}} values dropped")),
                     unit="short"), 12, 8)
    d.add(timeseries("Duplicates, agent drops, timestamps backwards", "Replayed batches already "
                     "stored, batches agents dropped from full buffers, samples older than their "
                     "series' latest.",
                     targets(("sum(rate(fabricmon_aggregator_duplicate_batches_total{%s}[%s]))"
                              % (JI, RI), "duplicate batches"),
                             ("sum(rate(fabricmon_aggregator_agent_dropped_batches_total{%s}[%s]))"
                              % (JI, RI), "agent-dropped batches"),
                             ("sum(rate(fabricmon_aggregator_timestamps_backwards_total{%s}[%s]))"
                              % (JI, RI), "timestamps backwards")),
                     unit="cps"), 12, 8)
    d.add(timeseries("Series churn", "Series retired after series_retention_s without a "
                     "sample (gone processes, veths, ethtool keys), values that arrived for a "
                     "retired series (dropped; the agent is asked to declare it again) and those "
                     "declarations. Steady retirement is normal on nodes with churn; dropped "
                     "values mean series came back after the retention.",
                     targets(("sum(rate(fabricmon_aggregator_series_retired_total{%s}[%s]))"
                              % (JI, RI), "retired series"),
                             ("sum(rate(fabricmon_aggregator_retired_series_samples_dropped_total"
                              "{%s}[%s]))" % (JI, RI), "dropped values"),
                             ("sum(rate(fabricmon_aggregator_redeclare_requests_total{%s}[%s]))"
                              % (JI, RI), "redeclare requests")),
                     unit="cps"), 12, 8)
    d.add(timeseries("Series numbered per agent", "Series each agent numbers now and the highest "
                     "id it handed out: the two stay close while ids of series gone for 10 "
                     "minutes are reused.",
                     targets(("max by (node) (fabricmon_agent_series{%s})" % JN, "{{node}} series"),
                             ("max by (node) (fabricmon_agent_series_ids{%s})" % JN,
                              "{{node}} highest id")), legend_calcs=("lastNotNull",)), 12, 8)
    d.add(timeseries("Scrape time", "/metrics build time (aggregator) and the whole scrape as "
                     "Prometheus sees it. A large shard exports ~1 M series: keep it well under "
                     "scrape_timeout.",
                     targets(("max by (instance) (fabricmon_aggregator_scrape_duration_seconds"
                              "{%s})" % JI, "{{instance}} /metrics build"),
                             ("max by (instance) (scrape_duration_seconds{%s})" % JI,
                              "{{instance}} scrape (Prometheus)")),
                     unit="s"), 12, 8)
    d.add(timeseries("Samples per scrape", "scrape_samples_scraped.",
                     [target("max by (instance) (scrape_samples_scraped{%s})" % JI,
                             "{{instance}}")]), 6, 8)
    d.add(timeseries("Detectors", "Time of the last detector evaluation and cables in the "
                     "topology graph the detectors use.",
                     targets(("max by (instance) (fabricmon_detector_tick_seconds{%s})" % JI,
                              "{{instance}} tick"),
                             ("max by (instance) (fabricmon_topology_links{%s})" % JI,
                              "{{instance}} topology links")),
                     overrides=[override_regex(".* topology links$", unit="short",
                                               custom__axisPlacement="right")],
                     unit="s"), 6, 8)

    d.row("Agents")
    d.add(timeseries("Replay buffer", "Unacknowledged data each agent holds; grows while its "
                     "aggregator is unreachable, bounded by replay_buffer_bytes.",
                     [target("max by (node) (fabricmon_agent_replay_buffer_bytes{%s})" % JN,
                             "{{node}}")], unit="bytes"), 12, 8)
    d.add(timeseries("Dropped from replay buffers", "Batches and samples agents dropped (oldest "
                     "first) from their full buffers.",
                     targets(("sum by (node) (rate(fabricmon_agent_dropped_batches_total{%s}[%s]))"
                              % (JN, RI), "{{node}} batches"),
                             ("sum by (node) (rate(fabricmon_agent_dropped_samples_total{%s}[%s]))"
                              % (JN, RI), "{{node}} samples")),
                     unit="cps"), 12, 8)
    d.add(state_timeline("Stream connected", "fabricmon_agent_stream_connected per agent.",
                         "max by (node) (fabricmon_agent_stream_connected{%s})" % JN, "{{node}}",
                         value_mappings(UP_DOWN)), 12, 8)
    d.add(timeseries("Stream connects and replays", "Streams established and attempted, batches "
                     "replayed after a reconnect.",
                     targets(("sum by (node) (increase(fabricmon_agent_stream_connects_total{%s}"
                              "[%s]))" % (JN, RI), "{{node}} connects"),
                             ("sum by (node) (increase(fabricmon_agent_stream_connect_attempts_"
                              "total{%s}[%s]))" % (JN, RI), "{{node}} attempts"),
                             ("sum by (node) (increase(fabricmon_agent_replayed_batches_total{%s}"
                              "[%s]))" % (JN, RI), "{{node}} replayed batches")),
                     bars=True, legend_calcs=("sum",)), 12, 8)
    d.add(timeseries("Bytes sent per agent", "Protobuf bytes written by each agent.",
                     [target("sum by (node) (rate(fabricmon_agent_sent_bytes_total{%s}[%s]))"
                             % (JN, RI), "{{node}}")], unit="Bps"), 12, 8)
    d.add(timeseries("Data loss per node (aggregator view)", "Sequence gaps (batches that never "
                     "arrived), of which agent drops, duplicates and counter resets.",
                     targets(("sum by (node) (increase(fabricmon_node_sequence_gaps_total{%s}"
                              "[%s]))" % (JN, RI), "{{node}} sequence gaps"),
                             ("sum by (node) (increase(fabricmon_node_agent_dropped_batches_total"
                              "{%s}[%s]))" % (JN, RI), "{{node}} agent-dropped"),
                             ("sum by (node) (increase(fabricmon_node_duplicate_batches_total{%s}"
                              "[%s]))" % (JN, RI), "{{node}} duplicates"),
                             ("sum by (node) (increase(fabricmon_node_series_resets_total{%s}"
                              "[%s]))" % (JN, RI), "{{node}} counter resets")),
                     bars=True, legend_calcs=("sum",)), 12, 8)
    d.add(table("Nodes", "Per node: up, seconds since last seen, series, and in the time range: "
                "sequence gaps, agent drops, counter resets.",
                targets("max by (node) (fabricmon_node_up{%s})" % JN,
                        "max by (node) (fabricmon_node_last_seen_age_seconds{%s})" % JN,
                        "max by (node) (fabricmon_node_series{%s})" % JN,
                        "sum by (node) (increase(fabricmon_node_sequence_gaps_total{%s}"
                        "[$__range]))" % JN,
                        "sum by (node) (increase(fabricmon_node_agent_dropped_batches_total{%s}"
                        "[$__range]))" % JN,
                        "sum by (node) (increase(fabricmon_node_series_resets_total{%s}"
                        "[$__range]))" % JN),
                rename={"Value #A": "up", "Value #B": "last seen (s ago)", "Value #C": "series",
                        "Value #D": "sequence gaps", "Value #E": "agent drops",
                        "Value #F": "counter resets"},
                overrides=[override_name("up", mappings=value_mappings(UP_DOWN),
                                         custom__cellOptions={"type": "color-text"}),
                           override_name("last seen (s ago)", unit="s", decimals=1),
                           override_regex("sequence gaps|agent drops|counter resets",
                                          decimals=0),
                           node_link()],
                sort_by=[("up", False)]), 24, 8)

    d.row("Collectors (all nodes)")
    d.add(table("Collectors by node", "Last run of every collector on every node: success, "
                "hardware found, run time. success 0 with hardware present is a failing "
                "collector (FabricmonCollectorFailing).",
                targets("max by (node, collector) (fabricmon_collector_success{%s})" % JN,
                        "max by (node, collector) (fabricmon_collector_hardware_present{%s})"
                        % JN,
                        "max by (node, collector) (fabricmon_collector_duration_seconds{%s})"
                        % JN),
                rename={"Value #A": "success", "Value #B": "hardware", "Value #C": "run time"},
                overrides=[override_name("success", mappings=value_mappings(OK_FAIL),
                                         custom__cellOptions={"type": "color-text"}),
                           override_name("hardware", mappings=value_mappings(PRESENT)),
                           override_name("run time", unit="s")],
                sort_by=[("success", False)]), 12, 9)
    d.add(timeseries("Collector read errors, top $topk", "By node, collector and kind.",
                     [target("topk($topk, sum by (node, collector, kind) (rate("
                             "fabricmon_collector_errors_total{%s}[%s])))" % (JN, RI),
                             "{{node}} {{collector}} {{kind}}")], unit="cps"), 12, 9)
    d.add(timeseries("Slowest collector runs", "Run time of each collector, worst node.",
                     [target("max by (collector) (fabricmon_collector_duration_seconds{%s})" % JN,
                             "{{collector}}")], unit="s"), 12, 8)
    d.add(timeseries("ib_fabric sweeps", "Subnet sweeps of the agents' ib_fabric collectors: "
                     "sweep time and MADs per second by outcome (timeouts: a switch PMA that "
                     "does not answer).",
                     targets(("max by (node) (fabricmon_ib_fabric_sweep_duration_seconds{%s})"
                              % JN, "{{node}} sweep time"),
                             ("sum by (node, result) (rate(fabricmon_ib_fabric_mads_total{%s}[%s]))"
                              % (JN, RI), "{{node}} MADs {{result}}")),
                     overrides=[override_regex(".* MADs .*", unit="ops",
                                               custom__axisPlacement="right")],
                     unit="s"), 12, 8)
    return d


# ------------------------------------------------------------------------------------------

def job_dashboard():
    # A registered job's nodes (fabricmon_job_node_info, `fabricmon job start` or the Slurm
    # prolog): every query keeps the series of those nodes by joining on node.
    MEMBERS = 'max by (node) (fabricmon_job_node_info{%s, job_name="$job_name"})' % J

    def of_job(expr):
        return "(%s) * on (node) group_left %s" % (expr, MEMBERS)

    d = Dashboard(
        "fabricmon-job", "fabricmon / Job",
        "One registered job (fabricmon job start, the Slurm prolog): its nodes, the findings that "
        "touch them, its stragglers and its nodes' RDMA throughput, credit waits and PFC pauses "
        "side by side.",
        [datasource_variable(), cluster_variable(), job_variable(),
         query_variable("job_name", "Fabric job",
                        "label_values(fabricmon_job_node_info{%s}, job_name)" % J,
                        description="Jobs registered with the aggregator (label job_name: "
                                    "Prometheus owns `job`).")])

    d.row("$job_name")
    d.add(stat("Nodes", "Nodes of the job (fabricmon_job_node_info).",
               "count(%s) or vector(0)" % MEMBERS), 6, 4)
    d.add(stat("Nodes down", "Nodes of the job whose agent is not connected and sending.",
               "count(%s == 0) or vector(0)" % of_job("max by (node) (fabricmon_node_up{%s})" % J),
               thresholds_=thresholds("green", (1, "red"))), 6, 4)
    d.add(stat("Findings on its nodes", "Active findings whose subject is one of the job's nodes.",
               "count(%s) or vector(0)" % of_job("fabricmon_finding_active{%s}" % J),
               thresholds_=thresholds("green", (1, "orange"))), 6, 4)
    d.add(stat("Stragglers", "straggler findings: a node markedly slower than its job peers "
               "while the job's GPUs are busy (README \"Findings\").",
               "count(%s) or vector(0)" % of_job('fabricmon_finding_active{%s, kind="straggler"}'
                                                  % J),
               thresholds_=thresholds("green", (1, "orange"))), 6, 4)
    d.add(table("Findings touching $job_name", "Active findings on the job's nodes, stragglers "
                "included. `fabricmon diagnose --job=$job_name` adds those on the links and "
                "switches the job's traffic crosses.",
                [target("max by (kind, severity, node, device, port, peer) (%s)"
                        % of_job("fabricmon_finding_active{%s}" % J))],
                hide=("Value",), order=["severity", "kind", "node", "device", "port", "peer"],
                overrides=[severity_override()], sort_by=[("severity", False)]), 24, 6)
    d.add(table("Nodes of $job_name", "Each node: agent up, RDMA bytes/s (HCA port data in + "
                "out, host ports), kernel netdev bytes/s.",
                targets(of_job("max by (node) (fabricmon_node_up{%s})" % J),
                        of_job("sum by (node) (rate(fabricmon_ib_port_xmit_data_bytes_total{%s, "
                               'device!=""}[%s]) + rate(fabricmon_ib_port_rcv_data_bytes_total'
                               '{%s, device!=""}[%s]))' % (J, RI, J, RI)),
                        of_job("sum by (node) (rate(fabricmon_netdev_rx_bytes_total{%s}[%s]) + "
                               "rate(fabricmon_netdev_tx_bytes_total{%s}[%s]))" % (J, RI, J, RI))),
                rename={"Value #A": "up", "Value #B": "RDMA B/s", "Value #C": "kernel B/s"},
                order=["node", "up", "RDMA B/s", "kernel B/s"],
                overrides=[override_name("RDMA B/s", unit="Bps"),
                           override_name("kernel B/s", unit="Bps")]), 24, 6)

    d.row("Side by side")
    d.add(timeseries("RDMA throughput per node", "HCA port data, in + out, per node of the job: a "
                     "straggler sits below the others.",
                     [target(of_job("sum by (node) (rate(fabricmon_ib_port_xmit_data_bytes_total"
                                    '{%s, device!=""}[%s]) + rate('
                                    "fabricmon_ib_port_rcv_data_bytes_total{%s, "
                                    'device!=""}[%s]))' % (J, RI, J, RI)), "{{node}}")],
                     unit="Bps"), 12, 8)
    d.add(timeseries("RoCE RDMA throughput per node", "RoCE vport RDMA bytes per node (ethtool).",
                     [target(of_job("sum by (node) (rate(fabricmon_roce_rdma_bytes_total{%s}[%s]))"
                                    % (J, RI)), "{{node}}")], unit="Bps"), 12, 8)
    d.add(timeseries("Credit waits per node (IB XmitWait share)", "Worst host port's XmitWait / "
                     "(XmitWait + XmitData words) per node.",
                     [target(of_job("max by (node) (%s)" % wait_share('%s, device!=""' % J,
                                                                     by="node, device, port")),
                             "{{node}}")], unit="percentunit"), 12, 8)
    d.add(timeseries("PFC pauses per node (RoCE)", "Worst netdev's fraction of time paused (rx: "
                     "paused by its peer; tx: pausing it) per node.",
                     [target(of_job("max by (node) (rate("
                                    "fabricmon_roce_pfc_pause_duration_seconds_total{%s}[%s]))"
                                    % (J, RI)), "{{node}}")], unit="percentunit"), 12, 8)
    d.add(timeseries("NVLink errors per node", "NVLink error counters per node, all links.",
                     [target(of_job("sum by (node) (rate(fabricmon_nvlink_errors_total{%s}[%s]))"
                                    % (J, RI)), "{{node}}")]), 12, 8)
    d.add(timeseries("GPU utilization per node", "Busiest GPU of each node: the straggler "
                     "detector judges a job only while its GPUs are busy.",
                     [target(of_job("max by (node) (fabricmon_gpu_utilization_ratio{%s})" % J),
                             "{{node}}")], unit="percentunit"), 12, 8)
    return d


DASHBOARDS = {
    "fabricmon-overview.json": overview,
    "fabricmon-node.json": node_dashboard,
    "fabricmon-congestion.json": congestion_dashboard,
    "fabricmon-self.json": self_dashboard,
    "fabricmon-job.json": job_dashboard,
}


def render(name):
    return json.dumps(DASHBOARDS[name]().to_json(), indent=2, ensure_ascii=False) + "\n"


def main(argv=None):
    global RUNBOOK_BASE
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if a committed file differs from the generated one")
    parser.add_argument("--out", default=OUT_DIR)
    parser.add_argument("--runbook-base", default=RUNBOOK_BASE,
                        help="URL under which %s is served (default %s)" % (RUNBOOK_PATH,
                                                                             RUNBOOK_BASE))
    args = parser.parse_args(argv)
    RUNBOOK_BASE = args.runbook_base.rstrip("/")
    stale = []
    for name in sorted(DASHBOARDS):
        text = render(name)
        path = os.path.join(args.out, name)
        try:
            with open(path, encoding="utf-8") as f:
                current = f.read()
        except OSError:
            current = None
        if current == text:
            continue
        if args.check:
            stale.append(path)
            continue
        os.makedirs(args.out, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        print("wrote", path)
    if stale:
        print("out of date (run dashboards/generate_dashboards.py): %s" % ", ".join(stale),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
