"""Static checks of Grafana dashboard JSON and the template-variable handling the live test
shares (what Grafana does to a query before it reaches Prometheus).

Python 3 standard library only.
"""

import json
import re

GRID_COLUMNS = 24
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
PANEL_TYPES = {"timeseries", "stat", "table", "bargauge", "state-timeline", "gauge",
               "status-history", "barchart", "heatmap", "piechart"}
# Grafana's global variables (the ones these dashboards may use).
BUILTINS = {"__rate_interval", "__interval", "__interval_ms", "__range", "__range_s",
            "__range_ms", "__from", "__to", "__dashboard", "__name", "__org", "__user",
            "timeFilter", "__timeFilter", "__value", "__url_time_range", "__data", "__field",
            "__series", "__all"}
# Values the live test substitutes, as Grafana would for a 1 h range and a 15 s scrape interval.
BUILTIN_VALUES = {"__rate_interval": "1m", "__interval": "15s", "__interval_ms": "15000",
                  "__range": "1h", "__range_s": "3600", "__range_ms": "3600000"}
# ${name}, ${name:format}, ${name.field}, $name, [[name]], [[name:format]]. Names made of digits
# only ($1 in label_replace's replacement) are not variables: Grafana leaves them alone.
VARIABLE_RE = re.compile(r"\$\{(\w+)(?:[.:][^}]*)?\}|\$(\w+)|\[\[(\w+)(?::\w+)?\]\]")
RANGE_RE = re.compile(r"\[([^\]\[]*)\]")
# Every metric selector filters on the cluster variable (an external label; All = ".*" also
# matches series without it), and no metric is queried without a selector.
CLUSTER_MATCHER = 'cluster=~"$cluster"'
SELECTOR_RE = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^{}]*)\}")
BARE_METRIC_RE = re.compile(r"\b((?:fabricmon|scrape)_[a-z0-9_]+|up)\b(?!\s*\{)")
RUNBOOK_URL_RE = re.compile(r"\$\{runbook_base\}/deploy/runbooks/README\.md#[a-z0-9]+")
LABEL_VALUES_RE = re.compile(r"^\s*label_values\(\s*(?:(.*),\s*)?([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$",
                             re.S)


def iter_panels(dashboard):
    """Every panel, rows and panels inside collapsed rows included."""
    for panel in dashboard.get("panels", []):
        yield panel
        for inner in panel.get("panels", []) or []:
            yield inner


def query_panels(dashboard):
    return [p for p in iter_panels(dashboard) if p.get("type") not in ("row", "text")]


def variable_refs(text):
    names = set()
    for m in VARIABLE_RE.finditer(text or ""):
        name = m.group(1) or m.group(2) or m.group(3)
        if not name.isdigit():
            names.add(name)
    return names


def variable_query(variable):
    query = variable.get("query")
    if isinstance(query, dict):
        query = query.get("query", "")
    return query or ""


def parse_label_values(query):
    """label_values(selector, label) → (selector or None, label); None if not label_values."""
    m = LABEL_VALUES_RE.match(query)
    if not m:
        return None
    return (m.group(1) or None), m.group(2)


def interpolate(text, values):
    """Replaces variables like Grafana: known names by their value, others left as they are."""
    def replace(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name in values:
            return values[name]
        if name in BUILTIN_VALUES:
            return BUILTIN_VALUES[name]
        return m.group(0)
    return VARIABLE_RE.sub(replace, text)


def regex_escape(value):
    """Grafana's escaping of a multi-value variable's values in a Prometheus regex."""
    return re.sub(r"([\\^$*+?.()|{}\[\]])", r"\\\\\1", value)


def lint(name, dashboard):
    """Returns a list of problems (strings) with one dashboard."""
    problems = []

    def bad(message):
        problems.append("%s: %s" % (name, message))

    for key in ("uid", "title", "schemaVersion", "panels", "templating"):
        if key not in dashboard:
            bad("missing top-level %r" % key)
    uid = dashboard.get("uid", "")
    if not isinstance(uid, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,40}", uid):
        bad("uid %r is not 1-40 characters of [A-Za-z0-9_-]" % uid)
    if not isinstance(dashboard.get("schemaVersion"), int) or \
            not 36 <= dashboard["schemaVersion"] <= 41:
        bad("schemaVersion %r is not a Grafana 9-11 schema (36..41)" %
            dashboard.get("schemaVersion"))
    if not dashboard.get("title"):
        bad("empty title")

    # Variables.
    variables = dashboard.get("templating", {}).get("list", [])
    defined = []
    for v in variables:
        vname = v.get("name", "")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", vname):
            bad("variable name %r" % vname)
        if vname in defined:
            bad("variable %r defined twice" % vname)
        if v.get("type") == "query":
            if v.get("datasource") != DATASOURCE:
                bad("variable %r: datasource %r, want %r" % (vname, v.get("datasource"),
                                                             DATASOURCE))
            query = variable_query(v)
            if parse_label_values(query) is None:
                bad("variable %r: query %r is not label_values(...)" % (vname, query))
            for ref in variable_refs(query):
                if ref not in defined and ref not in BUILTINS:
                    bad("variable %r refers to $%s, which is not defined before it" %
                        (vname, ref))
        elif v.get("type") == "datasource":
            if v.get("query") != "prometheus":
                bad("datasource variable %r is not of type prometheus" % vname)
        elif v.get("type") not in ("custom", "textbox", "constant", "interval"):
            bad("variable %r has unsupported type %r" % (vname, v.get("type")))
        defined.append(vname)
    cluster = next((v for v in variables if v.get("name") == "cluster"), None)
    if cluster is None or cluster.get("type") != "query" or \
            parse_label_values(variable_query(cluster)) != ("fabricmon_node_up", "cluster") or \
            not cluster.get("includeAll") or cluster.get("allValue") != ".*":
        bad("no `cluster` variable label_values(fabricmon_node_up, cluster) with All = .* "
            "(which also matches series without the label)")
    if "datasource" not in defined or next(
            v for v in variables if v["name"] == "datasource").get("type") != "datasource":
        bad("no `datasource` variable of type datasource")

    # Panels.
    ids = set()
    used = set()
    boxes = []
    for panel in iter_panels(dashboard):
        title = panel.get("title", "")
        where = "panel %r (id %s)" % (title, panel.get("id"))
        pid = panel.get("id")
        if not isinstance(pid, int):
            bad("%s: id is not an integer" % where)
        elif pid in ids:
            bad("%s: duplicate panel id" % where)
        ids.add(pid)
        grid = panel.get("gridPos", {})
        if not all(isinstance(grid.get(k), int) for k in ("x", "y", "w", "h")):
            bad("%s: gridPos %r lacks integer x, y, w, h" % (where, grid))
            continue
        if grid["x"] < 0 or grid["y"] < 0 or grid["w"] < 1 or grid["h"] < 1 or \
                grid["x"] + grid["w"] > GRID_COLUMNS:
            bad("%s: gridPos %r outside the %d columns" % (where, grid, GRID_COLUMNS))
        for other_where, other in boxes:
            if grid["x"] < other["x"] + other["w"] and other["x"] < grid["x"] + grid["w"] and \
                    grid["y"] < other["y"] + other["h"] and other["y"] < grid["y"] + grid["h"]:
                bad("%s overlaps %s" % (where, other_where))
        boxes.append((where, grid))
        # Every string of the panel (titles, queries, legends, links, overrides), nested panels
        # of a collapsed row aside: they are checked on their own.
        used |= variable_refs(json.dumps({k: v for k, v in panel.items() if k != "panels"}))
        if panel.get("type") == "row":
            if panel.get("collapsed") and not panel.get("panels"):
                bad("%s: collapsed row without panels" % where)
            continue
        if panel.get("type") not in PANEL_TYPES:
            bad("%s: unknown panel type %r" % (where, panel.get("type")))
        if not title:
            bad("%s: no title" % where)
        if panel.get("datasource") != DATASOURCE:
            bad("%s: datasource %r, want %r" % (where, panel.get("datasource"), DATASOURCE))
        tgts = panel.get("targets") or []
        if not tgts:
            bad("%s: no targets" % where)
        refs = set()
        for t in tgts:
            expr = t.get("expr", "")
            if not expr.strip():
                bad("%s: target %s has no expr" % (where, t.get("refId")))
            if t.get("refId") in refs or not t.get("refId"):
                bad("%s: missing or duplicate refId %r" % (where, t.get("refId")))
            refs.add(t.get("refId"))
            if t.get("datasource") != DATASOURCE:
                bad("%s: target %s datasource %r" % (where, t.get("refId"), t.get("datasource")))
            if expr.count("(") != expr.count(")") or expr.count("{") != expr.count("}"):
                bad("%s: target %s has unbalanced brackets" % (where, t.get("refId")))
            for m in SELECTOR_RE.finditer(expr):
                if CLUSTER_MATCHER not in m.group(2):
                    bad("%s: target %s: selector %s does not filter on %s" %
                        (where, t.get("refId"), m.group(0), CLUSTER_MATCHER))
            # Label names in by()/without() and strings are not metrics: strip them first.
            bare = re.sub(r'"[^"]*"|\b(?:by|without|on|ignoring|group_left|group_right)\s*'
                          r'\([^)]*\)', "", expr)
            for m in BARE_METRIC_RE.finditer(bare):
                bad("%s: target %s: metric %s without a selector (no cluster filter)" %
                    (where, t.get("refId"), m.group(1)))
            # Range selectors and subqueries follow Grafana's interval, never a fixed window.
            for window in RANGE_RE.findall(expr):
                if window not in ("$__rate_interval", "$__range", "$__interval"):
                    bad("%s: target %s uses the fixed window [%s]; use $__rate_interval or "
                        "$__range" % (where, t.get("refId"), window))
        for link in panel.get("links", []):
            if not RUNBOOK_URL_RE.fullmatch(link.get("url", "")):
                bad("%s: link %r is not ${runbook_base}/deploy/runbooks/README.md#<alert>" %
                    (where, link.get("url")))
        # Transformations may rename "Value #X" columns: they must name existing refIds.
        for transformation in panel.get("transformations", []):
            options = transformation.get("options", {})
            for key in list(options.get("renameByName", {})) + list(
                    options.get("excludeByName", {})):
                m = re.fullmatch(r"Value #(\w+)", key)
                if m and m.group(1) not in refs:
                    bad("%s: transformation names %r but there is no target %s" %
                        (where, key, m.group(1)))
    for v in variables:
        used |= variable_refs(json.dumps({k: x for k, x in v.items()
                                          if k not in ("name", "current", "options")}))
    used |= variable_refs(json.dumps(dashboard.get("links", [])))
    for ref in sorted(used):
        if ref not in defined and ref not in BUILTINS:
            bad("refers to $%s, which is not a variable of the dashboard" % ref)
    for vname in defined:
        if vname not in used:
            bad("variable %r is never used" % vname)
    return problems


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)
