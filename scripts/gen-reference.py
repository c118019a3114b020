#!/usr/bin/env python3
"""Generates the reference pages under docs/reference/ from the code, and checks the docs.

    scripts/gen-reference.py            # check: regenerate in memory, compare, run the checks
    scripts/gen-reference.py --write    # rewrite the generated pages, then run the checks

Generated (never edit them by hand; change the comments they come from):
- docs/reference/api.md      every service, RPC, message, field and enum value of
                             proto/taskbroker/v1/*.proto, with its comment;
- docs/reference/config.md   every configuration key, its flag, environment variable and
                             default, from the server's configuration code
                             (server/src/config.rs or server/src/config/*.rs);
- docs/reference/metrics.md  every metric registered in server/src/**/*.rs, with its type,
                             labels and help text.

Checked (the check fails and names what is missing):
- every RPC of the proto is named in README.md and in docs/reference/api.md;
- every gRPC status code the server can answer (Status::x / Code::X in server/src) and every
  ErrorInfo reason is in docs/reference/errors.md (hand-written);
- no docs page, README.md or CHANGELOG.md carries an issue number or a session word.

Python 3 standard library only; no protoc.
"""

import difflib
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROTO_DIR = os.path.join(ROOT, "proto", "taskbroker", "v1")
REF = os.path.join(ROOT, "docs", "reference")

# Words that tie a text to the project's history rather than to the system.
HISTORY = re.compile(r"issue [0-9]+|\(#[0-9]+\)|[Rr]ound [0-9]|session [0-9]")


def clean(text):
    """A comment as reference prose: one line, no issue tags, table-safe."""
    text = " ".join(text.split())
    text = re.sub(r"\s*\((?:issue \d+[^)]*|#\d+)\)", "", text)
    text = re.sub(r"\b(\w+) \(#\d+\)", r"\1", text)
    text = re.sub(r"^(?:Issue \d+|#\d+):\s*", "", text)
    text = re.sub(r"^(\w+) \((?:issue \d+|#\d+)\):\s*", r"\1: ", text)
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # outside code spans: no accidental emphasis or HTML
        parts[i] = parts[i].replace("*", "\\*").replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts).replace("|", "\\|")


def rel(path):
    return os.path.relpath(path, ROOT)


# ---------------------------------------------------------------- proto


class Decl:
    def __init__(self, kind, name, doc, file, line):
        self.kind, self.name, self.doc, self.file, self.line = kind, name, doc, file, line
        self.items = []  # fields, values or rpcs
        self.children = []  # nested messages and enums
        self.parent = None

    def full(self):
        return self.name if self.parent is None else self.parent.full() + "." + self.name


FIELD = re.compile(
    r"^(?:(repeated|optional)\s+)?(map\s*<\s*[\w.]+\s*,\s*[\w.]+\s*>|[\w.]+)\s+(\w+)\s*=\s*(\d+)"
)
ENUM_VALUE = re.compile(r"^(\w+)\s*=\s*(-?\d+)")
RPC = re.compile(
    r"^rpc\s+(\w+)\s*\(\s*(stream\s+)?([\w.]+)\s*\)\s*returns\s*\(\s*(stream\s+)?([\w.]+)\s*\)"
)


def parse_proto(path):
    """Services, messages and enums of one .proto file, each with its leading comment."""
    services, types = [], []
    stack = []  # open blocks: Decl, or a oneof name
    doc = []
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        raw = lines[i]
        lineno = i + 1
        i += 1
        s = raw.strip()
        if s.startswith("//"):
            doc.append(s[2:].strip())
            continue
        if not s:
            doc = []
            continue
        trailing = ""
        if "//" in s:
            s, trailing = s.split("//", 1)
            s, trailing = s.strip(), trailing.strip()
        # an rpc may span lines
        if s.startswith("rpc ") and not s.endswith(";") and not s.endswith("{"):
            while i < len(lines) and not (s.endswith(";") or s.endswith("{")):
                s += " " + lines[i].split("//")[0].strip()
                i += 1
        text = " ".join(doc + ([trailing] if trailing else []))
        rpc_doc = doc
        doc = []
        m = re.match(r"^(service|message|enum)\s+(\w+)\s*\{", s)
        if m:
            d = Decl(m.group(1), m.group(2), text, path, lineno)
            closed = s.endswith("}")
            parent = next((b for b in reversed(stack) if isinstance(b, Decl)), None)
            if m.group(1) == "service":
                services.append(d)
            elif parent is not None:
                d.parent = parent
                parent.children.append(d)
                types.append(d)
            else:
                types.append(d)
            if not closed:
                stack.append(d)
            continue
        m = re.match(r"^oneof\s+(\w+)\s*\{", s)
        if m:
            stack.append(("oneof", m.group(1)))
            continue
        if s.startswith("}"):
            if stack:
                stack.pop()
            continue
        if not stack:
            continue
        top = stack[-1]
        owner = next(b for b in reversed(stack) if isinstance(b, Decl))
        oneof = top[1] if isinstance(top, tuple) else None
        if s.startswith(("option ", "reserved ")):
            continue
        if owner.kind == "service":
            m = RPC.match(s)
            if m:
                # A group heading right above an rpc's own comment ("// ---- Routing ----",
                # "// Admission: live queue settings ...") belongs to the group, not the rpc.
                block = list(rpc_doc)
                if len(block) > 1 and re.match(r"^(-{2,}|[A-Z]\w*(?: \([^)]*\))?: )", block[0]):
                    block = block[1:]
                text = " ".join(block + ([trailing] if trailing else []))
                owner.items.append(
                    {
                        "name": m.group(1),
                        "req": m.group(3),
                        "req_stream": bool(m.group(2)),
                        "resp": m.group(5),
                        "resp_stream": bool(m.group(4)),
                        "doc": text,
                    }
                )
            continue
        if owner.kind == "enum":
            m = ENUM_VALUE.match(s)
            if m:
                owner.items.append({"name": m.group(1), "number": m.group(2), "doc": text})
            continue
        m = FIELD.match(s)
        if m:
            label, typ, name, number = m.groups()
            typ = re.sub(r"\s+", "", typ).replace(",", ", ")
            if label == "repeated":
                typ = "repeated " + typ
            elif label == "optional":
                typ = "optional " + typ
            owner.items.append(
                {"name": name, "type": typ, "number": number, "doc": text, "oneof": oneof}
            )
    return services, types


def load_proto():
    files = sorted(f for f in os.listdir(PROTO_DIR) if f.endswith(".proto"))
    services, types = [], []
    for f in files:
        s, t = parse_proto(os.path.join(PROTO_DIR, f))
        services += s
        types += t
    return files, services, types


def anchor(name):
    return name.lower().replace(".", "")


def type_link(typ, known):
    base = typ.split()[-1]
    if base.startswith("map<"):
        return "`" + typ + "`"
    short = base.split(".")[-1] if base.startswith("taskbroker.") else base
    for k in known:
        if k == short or k.endswith("." + short) and short not in known:
            pre = typ[: len(typ) - len(base)]
            return f"{pre}[`{short}`](#{anchor(k)})"
    return "`" + typ + "`"


def gen_api(files, services, types):
    known = {t.full(): t for t in types}
    out = [
        "# API reference",
        "",
        "<!-- Generated by scripts/gen-reference.py from proto/taskbroker/v1/*.proto: edit the",
        "     proto comments, then run `scripts/gen-reference.py --write`. -->",
        "",
        "Every service, RPC, message, field and enum of the v1 contract (package `taskbroker.v1`,",
        "files " + ", ".join(f"`{f}`" for f in files) + "), with the comment the proto gives it.",
        "Names and field numbers are fixed: fields are added, never renamed or renumbered. What",
        "each call does to a task, and every status code, is in [semantics](../semantics.md) and",
        "[errors](errors.md). Durations are `google.protobuf.Duration`, times",
        "`google.protobuf.Timestamp`.",
        "",
        "Every RPC is served over gRPC, gRPC-Web, and HTTP/JSON on the same port: the",
        "[Connect protocol](https://connectrpc.com/docs/protocol/), `POST /taskbroker.v1.<Service>/<Method>`",
        "with the request message as JSON (`application/json`, the canonical proto3 JSON mapping:",
        "lowerCamelCase field names, `bytes` as base64, 64-bit integers as strings, enums by name) or",
        "protobuf (`application/proto`), and WatchTasks as Connect server streaming",
        "(`application/connect+json`); see [semantics](../semantics.md#http-and-json-the-connect-protocol).",
        "",
        "## Services",
        "",
    ]
    for svc in services:
        out.append(f"- [`{svc.name}`](#{anchor(svc.name)}): {clean(svc.doc)}")
    for svc in services:
        out += ["", f"### {svc.name}", ""]
        if svc.doc:
            out += [clean(svc.doc), ""]
        out += ["| RPC | request | response | what it does |", "|---|---|---|---|"]
        for r in svc.items:
            req = ("stream " if r["req_stream"] else "") + type_link(r["req"], known)
            resp = ("stream " if r["resp_stream"] else "") + type_link(r["resp"], known)
            out.append(f"| `{r['name']}` | {req} | {resp} | {clean(r['doc'])} |")
    out += ["", "## Messages", ""]
    for t in sorted((t for t in types if t.kind == "message"), key=lambda t: t.full()):
        out += [f"### {t.full()}", ""]
        out.append(f"*{os.path.basename(t.file)}*" + (f". {clean(t.doc)}" if t.doc else ""))
        out.append("")
        if not t.items:
            out += ["No fields.", ""]
            continue
        out += ["| field | number | type | description |", "|---|---:|---|---|"]
        for f in t.items:
            d = clean(f["doc"])
            if f["oneof"]:
                d = f"One of `{f['oneof']}`. " + d
            out.append(f"| `{f['name']}` | {f['number']} | {type_link(f['type'], known)} | {d} |")
        out.append("")
    out += ["## Enums", ""]
    for t in sorted((t for t in types if t.kind == "enum"), key=lambda t: t.full()):
        out += [f"### {t.full()}", ""]
        out.append(f"*{os.path.basename(t.file)}*" + (f". {clean(t.doc)}" if t.doc else ""))
        out += ["", "| value | number | meaning |", "|---|---:|---|"]
        for v in t.items:
            out.append(f"| `{v['name']}` | {v['number']} | {clean(v['doc'])} |")
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def undocumented_fields(types):
    return [
        f"{t.full()}.{f['name']}"
        for t in types
        if t.kind == "message"
        for f in t.items
        if not f["doc"].strip()
    ]


# ---------------------------------------------------------------- configuration


def config_sources():
    paths = []
    src = os.path.join(ROOT, "server", "src")
    for name in sorted(os.listdir(src)):
        p = os.path.join(src, name)
        if name.startswith("config"):
            if os.path.isfile(p) and name.endswith(".rs"):
                paths.append(p)
            elif os.path.isdir(p):
                for dirpath, _, names in os.walk(p):
                    paths += [os.path.join(dirpath, n) for n in sorted(names) if n.endswith(".rs")]
    return paths


def rust_structs(text):
    """struct name -> list of (field, type, doc, attrs) for `pub struct X { ... }` blocks."""
    structs = {}
    for m in re.finditer(r"pub struct (\w+)\s*\{", text):
        body_start = m.end()
        depth, j = 1, body_start
        while depth and j < len(text):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        body = text[body_start : j - 1]
        fields, doc, attrs = [], [], []
        for line in body.split("\n"):
            s = line.strip()
            if s.startswith("///"):
                doc.append(s[3:].strip())
            elif s.startswith("#["):
                attrs.append(s)
            elif s.startswith("//") or not s:
                continue
            else:
                fm = re.match(r"pub (\w+):\s*(.+?),?$", s)
                if fm:
                    fields.append((fm.group(1), fm.group(2), " ".join(doc), " ".join(attrs)))
                doc, attrs = [], []
        # multi-line #[arg(...)] attributes: gather env names per field
        structs[m.group(1)] = (fields, body)
    return structs


def serve_flags(body):
    """ServeArgs field -> (env, doc) from its #[arg(...)] attributes, which may span lines."""
    flags = {}
    doc, attr = [], ""
    for line in body.split("\n"):
        s = line.strip()
        if s.startswith("///"):
            doc.append(s[3:].strip())
        elif s.startswith("#[") or attr:
            attr += " " + s
        fm = re.match(r"pub (\w+):", s)
        if fm:
            env = re.search(r'env\s*=\s*"(\w+)"', attr)
            flags[fm.group(1)] = (env.group(1) if env else "", " ".join(doc))
            doc, attr = [], ""
    return flags


def rust_value(expr, consts):
    """A default written in Rust (`false`, `16`, `Duration::from_secs(300)`, a const) as TOML."""
    expr = expr.strip().rstrip(",")
    m = re.match(r"^(?:[\w:]+::)?([A-Z][A-Z0-9_]+)$", expr)
    if m and m.group(1) in consts:
        return rust_value(consts[m.group(1)], consts)
    if re.match(r"^(true|false|-?[\d.]+)$", expr):
        return expr
    m = re.match(r'^"([^"]*)"(?:\.into\(\)|\.to_string\(\))?$', expr)
    if m:
        return f'"{m.group(1)}"'
    m = re.match(r"^Duration::from_(secs|millis)\(([\d\s*+]+)\)$", expr)
    if m:
        n = eval(m.group(2), {"__builtins__": {}})  # digits, spaces, * and + only
        if m.group(1) == "millis":
            return f"{n}ms"
        for unit, size in (("days", 86400), ("h", 3600), ("m", 60)):
            if n and n % size == 0:
                return f"{n // size}{unit}"
        return f"{n}s"
    return ""


def rust_defaults(text, struct):
    """Field -> default expression, from `impl Default for STRUCT`'s struct literal."""
    m = re.search(r"impl Default for " + struct + r"\b.*?" + struct + r"\s*\{(.*?)\n\s*\}", text, re.S)
    if not m:
        return {}
    return dict(re.findall(r"^\s*(\w+):\s*(.+?),\s*$", m.group(1), re.M))


def default_of(doc):
    m = re.search(r"\[default: ([^\]]+)\]", doc)
    return m.group(1).strip() if m else ""


def gen_config():
    paths = config_sources()
    text = "\n".join(open(p, encoding="utf-8").read() for p in paths)
    structs = rust_structs(text)
    missing = [s for s in ("Config", "ServeArgs", "QueueConfig") if s not in structs]
    if missing:
        raise SystemExit(f"gen-reference: no struct {missing} in {[rel(p) for p in paths]}")
    flags = serve_flags(structs["ServeArgs"][1])
    consts = {}
    for p in rust_files():
        consts.update(re.findall(r"const (\w+): [\w:<>]+ = (.+?);", open(p, encoding="utf-8").read()))
    config_defaults = rust_defaults(text, "Config")
    # TOML key -> ServeArgs field, from the layering table `"key" => self.field`
    layered = dict(re.findall(r'"([\w.]+)"\s*=>\s*self\.(\w+)', text))
    tables = {}
    for name, typ, doc, attrs in structs["Config"][0]:
        inner = re.sub(r"^Option<(.+)>$", r"\1", typ)
        if inner in structs and inner not in ("QueueConfig",):
            tables[name] = inner
    rows = []

    def row(key, doc, optional=False, required=False):
        field = layered.get(key)
        flag = env = default = ""
        if "." not in key and key in config_defaults:
            default = rust_value(config_defaults[key], consts)
        if field:
            env, fdoc = flags.get(field, ("", ""))
            flag = "--" + field.replace("_", "-")
            default = default_of(fdoc) or default
            if not doc:
                doc = re.sub(r"\s*\[default: [^\]]+\]\.?", "", fdoc)
        if not default:
            default = "unset" if optional else f"required with `[{key.split('.')[0]}]`" if required else "none"
        doc = clean(doc)
        if doc and not doc.endswith("."):
            doc += "."
        rows.append((key, flag, env, default, doc))

    for name, typ, doc, attrs in structs["Config"][0]:
        if name in tables or name == "queues":
            continue
        row(name, doc)
    for table, sname in tables.items():
        for name, typ, doc, attrs in structs[sname][0]:
            row(
                f"{table}.{name}",
                doc,
                optional=typ.startswith(("Option<", "Vec<")),
                required=config_defaults.get(table, "").startswith("None"),
            )
    queue_rows = []
    global_keys = {r[0].split(".")[-1]: r[0] for r in rows}
    for name, typ, doc, attrs in structs["QueueConfig"][0]:
        doc = clean(doc)
        if not doc and name in tables:
            doc = f"The `[{name}]` table for this queue."
        elif not doc and name in global_keys:
            doc = f"`{global_keys[name]}` for this queue."
        if doc and not doc.endswith("."):
            doc += "."
        queue_rows.append((f"queues.NAME.{name}", doc))
    out = [
        "# Configuration reference",
        "",
        "<!-- Generated by scripts/gen-reference.py from the server's configuration code",
        "     (server/src/config*): edit the doc comments there, then run",
        "     `scripts/gen-reference.py --write`. -->",
        "",
        "`taskbroker serve` reads its configuration in layers: built-in defaults, then a TOML file",
        "(`--config PATH` / `TASKBROKER_CONFIG`), then `TASKBROKER_*` environment variables, then",
        "flags. Everything is checked before a port is bound; a bad value stops the broker with a",
        "one-line reason. `taskbroker config print` shows the effective configuration, secrets",
        "redacted. Durations are written `500ms`, `30s`, `5m`, `7days`. A key's TOML table is the",
        "part before the dot (`limits.max_wait` is `max_wait` under `[limits]`).",
        "",
        "| key | flag | environment | default | what it sets |",
        "|---|---|---|---|---|",
    ]
    for key, flag, env, default, doc in rows:
        c = lambda v: f"`{v}`" if v else ""
        out.append(f"| `{key}` | {c(flag)} | {c(env)} | {default} | {doc} |")
    out += [
        "",
        "## Per queue: `[queues.NAME]`",
        "",
        "Overrides for one queue, in the TOML file only. Unset keys take the global value (or no",
        "limit). The admission keys (`paused`, `max_concurrent`, `rate_limit`,",
        "`max_concurrent_per_key`, `per_key_rate_limit`, `fairness`, `priority_aging`,",
        "`max_leases_per_worker`, `default_lease`, `max_pending`, `max_pending_bytes`, `bucket`,",
        "`payload_schema` or `payload_schema_file`) seed the queue's live settings: each start",
        "stores the file's values for a queue no operator has changed; once `UpdateQueue`",
        "(`taskbroker queue set`, the console) has changed it, its stored settings win over the",
        "file ([semantics](../semantics.md#admission-live-queue-settings-limits-fairness-aging-explain)).",
        "`bucket` and the schema are checked as UpdateQueue checks them (a bucket need not be",
        "defined yet; a schema is JSON Schema text of at most 65536 bytes that compiles, with no",
        "remote `$ref`); a bad one stops the broker naming the key.",
        "",
        "| key | what it sets |",
        "|---|---|",
    ]
    for key, doc in queue_rows:
        out.append(f"| `{key}` | {doc} |")
    out += [
        "",
        "`retry` under a queue is a table of the `[retry]` keys: "
        "`retry = { max_attempts = 10, initial_backoff = \"1m\", multiplier = 2.0, "
        "max_backoff = \"6h\", jitter = 0.2 }`.",
        "",
        "A payload schema, inline or from a file (a mounted ConfigMap, like the TLS files):",
        "",
        "```toml",
        "[queues.orders]",
        "bucket = \"partner-api\"",
        "payload_schema_file = \"/etc/taskbroker/order.schema.json\"",
        "",
        "[queues.notes]",
        "payload_schema = '{\"type\": \"object\", \"required\": [\"text\"]}'",
        "```",
        "",
        "Other environment variables: `RUST_LOG` filters the logs, `--log-format json` (or",
        "`TASKBROKER_LOG_FORMAT`) makes them JSON lines, and the standard `OTEL_*` variables",
        "(`OTEL_EXPORTER_OTLP_ENDPOINT` first) turn on OpenTelemetry traces.",
    ]
    keys = [r[0] for r in rows] + [q[0] for q in queue_rows]
    return "\n".join(out) + "\n", keys


# ---------------------------------------------------------------- metrics


def rust_files():
    for dirpath, _, names in os.walk(os.path.join(ROOT, "server", "src")):
        for n in sorted(names):
            if n.endswith(".rs"):
                yield os.path.join(dirpath, n)


def gen_metrics():
    found = []
    for p in rust_files():
        text = open(p, encoding="utf-8").read()
        prefix = re.search(r'Registry::with_prefix\("(\w+)"\)', text)
        prefix = prefix.group(1) + "_" if prefix else ""
        fields = {}
        for m in re.finditer(r"\b(\w+):\s*(Family<\s*(\w+)\s*,\s*(\w+)[^>]*>|\w+)\s*,", text):
            fields.setdefault(m.group(1), (m.group(3), m.group(4) or m.group(2)))
        labels = {}
        for m in re.finditer(r"pub struct (\w+)\s*\{([^}]*)\}", text):
            labels[m.group(1)] = re.findall(r"pub (\w+):", m.group(2))
        for m in re.finditer(
            r'\.register\(\s*"(\w+)",\s*"((?:[^"\\]|\\.)*)",\s*m\.(\w+)\.clone\(\)', text
        ):
            name, help_, field = m.groups()
            label_struct, kind = fields.get(field, (None, "?"))
            kind = {"FloatGauge": "gauge", "Gauge": "gauge", "Counter": "counter",
                    "Histogram": "histogram"}.get(kind, kind.lower())
            exposed = prefix + name + ("_total" if kind == "counter" else "")
            found.append((exposed, kind, labels.get(label_struct, []), help_, rel(p)))
    out = [
        "# Metrics reference",
        "",
        "<!-- Generated by scripts/gen-reference.py from the metrics registered in server/src:",
        "     edit the help text there, then run `scripts/gen-reference.py --write`. -->",
        "",
        "Prometheus text format at `/metrics` on `metrics_listen` (default `127.0.0.1:9090`; `\"\"`",
        "turns it off). No task id is ever a label. Counters end in `_total`; a histogram also",
        "has `_bucket`, `_sum` and `_count` series. Queue depths and the oldest READY age come",
        "from the last background count, at most `metrics_depth_max_age` (10 s) old;",
        "`taskbroker_queue_depth_age_seconds` says how old. Everything else is current on every",
        "scrape. Buckets: wait and run times 1 ms to about 9 minutes, RPC durations 100 us to",
        "about 52 s (doubling).",
        "",
        "| metric | type | labels | what it counts |",
        "|---|---|---|---|",
    ]
    for exposed, kind, lab, help_, path in found:
        lab_s = ", ".join(f"`{x}`" for x in lab)
        out.append(f"| `{exposed}` | {kind} | {lab_s} | {clean(help_)} |")
    out += [
        "",
        "`rpc_duration_seconds` has `method` (the gRPC path, `/taskbroker.v1.BrokerService/Lease`)",
        "and `code` (`OK`, `INVALID_ARGUMENT`, ...: [errors](errors.md)). `queue_depth` has `queue`",
        "and `state` (`scheduled`, `ready`, `leased`, `succeeded`, `dead`, `cancelled`, `blocked`).",
    ]
    return "\n".join(out) + "\n", [f[0] for f in found]


# ---------------------------------------------------------------- checks


def status_codes():
    codes, reasons = set(), set()
    for p in rust_files():
        if os.sep + "console" + os.sep in p:
            continue  # the console answers HTTP, not gRPC
        text = open(p, encoding="utf-8").read()
        for m in re.finditer(r"Status::([a-z_]+)\(", text):
            if m.group(1) not in ("new", "with_error_details", "from_error", "ok"):
                codes.add(m.group(1).upper())
        for m in re.finditer(r"(?<![\w:])(?:tonic::)?Code::([A-Z][a-z][A-Za-z]*)\b", text):
            if m.group(1) not in ("Ok",):
                codes.add(re.sub(r"(?<!^)([A-Z])", r"_\1", m.group(1)).upper())
        for m in re.finditer(r'with_error_info\(\s*"(\w+)"', text):
            reasons.add(m.group(1))
    return codes, reasons


def heading_anchors(text):
    """GitHub's anchors for a Markdown text's headings."""
    anchors = set()
    for line in text.split("\n"):
        m = re.match(r"^#{1,6}\s+(.*)", line)
        if m:
            h = m.group(1).strip().lower()
            h = re.sub(r"[^\w\- ]", "", h)
            anchors.add(h.replace(" ", "-"))
    return anchors


def broken_links(generated):
    """Relative links (and their #anchors) in README.md, CHANGELOG.md and docs/ that lead nowhere."""
    pages = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "CHANGELOG.md")]
    for dirpath, _, names in os.walk(os.path.join(ROOT, "docs")):
        pages += [os.path.join(dirpath, n) for n in sorted(names) if n.endswith(".md")]
    out = []
    for page in pages:
        if not os.path.exists(page):
            continue
        text = open(page, encoding="utf-8").read()
        if os.path.dirname(page) == REF and os.path.basename(page) in generated:
            text = generated[os.path.basename(page)]
        text = re.sub(r"```.*?```", "", text, flags=re.S)
        # Inline code is not a link (`Define[P, R](q)` is a call).
        text = re.sub(r"`[^`\n]*`", "", text)
        for m in re.finditer(r"\]\(([^)\s]+)\)", text):
            target = m.group(1)
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, frag = target.partition("#")
            full = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if not os.path.exists(full):
                out.append(f"{rel(page)}: link to {target}: no such file")
                continue
            if frag and full.endswith(".md"):
                if os.path.dirname(full) == REF and os.path.basename(full) in generated:
                    body = generated[os.path.basename(full)]
                else:
                    body = open(full, encoding="utf-8").read()
                if frag not in heading_anchors(body):
                    out.append(f"{rel(page)}: link to {target}: no such heading")
    return out


def main():
    write = "--write" in sys.argv[1:]
    problems = []
    files, services, types = load_proto()
    api = gen_api(files, services, types)
    config, config_keys = gen_config()
    metrics, metric_names = gen_metrics()
    generated = {"api.md": api, "config.md": config, "metrics.md": metrics}
    os.makedirs(REF, exist_ok=True)
    for name, text in generated.items():
        path = os.path.join(REF, name)
        have = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
        if have == text:
            continue
        if write:
            open(path, "w", encoding="utf-8").write(text)
            print(f"wrote {rel(path)}")
        else:
            diff = difflib.unified_diff(
                have.splitlines(), text.splitlines(), rel(path), "generated", lineterm="", n=1
            )
            print("\n".join(list(diff)[:40]))
            problems.append(
                f"{rel(path)} differs from what the code generates: run scripts/gen-reference.py --write"
            )

    rpcs = [(s.name, r["name"]) for s in services for r in s.items]
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    for svc, rpc in rpcs:
        if not re.search(r"`" + rpc + r"`", readme):
            problems.append(f"README.md does not name the RPC `{rpc}` ({svc})")
        if f"| `{rpc}` |" not in api:
            problems.append(f"docs/reference/api.md does not list the RPC {rpc}")

    errors_path = os.path.join(REF, "errors.md")
    errors = open(errors_path, encoding="utf-8").read() if os.path.exists(errors_path) else ""
    codes, reasons = status_codes()
    for c in sorted(codes):
        if f"`{c}`" not in errors:
            problems.append(f"docs/reference/errors.md does not describe the status `{c}`")
    for r in sorted(reasons):
        if f"`{r}`" not in errors:
            problems.append(f"docs/reference/errors.md does not describe the reason `{r}`")

    try:
        hist = subprocess.run(
            ["git", "grep", "-nE", HISTORY.pattern, "--", "docs", "README.md", "CHANGELOG.md",
             ":!bench/results"],
            cwd=ROOT, capture_output=True, text=True,
        ).stdout.strip()
    except FileNotFoundError:
        hist = ""
    for name, text in generated.items():
        for n, line in enumerate(text.split("\n"), 1):
            if HISTORY.search(line):
                hist += f"\n(generated) docs/reference/{name}:{n}: {line}"
    if hist.strip():
        print(hist.strip())
        problems.append("issue numbers or session words in the docs (above)")

    problems += broken_links(generated)

    undocumented = undocumented_fields(types)
    print(
        f"gen-reference: {len(rpcs)} RPCs in {len(services)} services, "
        f"{sum(t.kind == 'message' for t in types)} messages, "
        f"{sum(t.kind == 'enum' for t in types)} enums, "
        f"{sum(len(t.items) for t in types if t.kind == 'message')} fields "
        f"({len(undocumented)} without a comment); {len(config_keys)} configuration keys; "
        f"{len(metric_names)} metrics; {len(codes)} status codes, {len(reasons)} reasons"
    )
    if undocumented:
        more = f" and {len(undocumented) - 8} more" if len(undocumented) > 8 else ""
        print("fields without a comment (not an error yet): " + ", ".join(undocumented[:8]) + more)
    for p in problems:
        print("FAIL: " + p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
