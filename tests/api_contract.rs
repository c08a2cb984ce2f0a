//! The contract between the server and the pages: a real server (the binary, over TCP) on a few
//! fixtures answers every endpoint, and each answer's shape (every field's path and JSON type,
//! which fields may be absent) must equal the shapes `docs/api.md` documents. A field added,
//! renamed or removed on the server without the document (or the other way round) fails here.
//!
//! After an intended change, `SNAPVIEW_BLESS=1 cargo test --release --test it api_contract::` writes
//! the new shapes into `docs/api.md`; the diff is the contract change to review (and the pages'
//! readers to update in the same commit).
//!
//! Answers that have a strict type in the library (the error body, the timeline's markers, the
//! stored summary row) are also read back through it.

use crate::common;

use common::served::Served;
use snapview::analysis::markers::Markers;
use snapview::server::error::ErrorBody;
use snapview::server::wire::{LoadStatus, SummaryRow};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// Objects whose keys are data, not fields (a map): their keys show as `{*}`.
const MAPS: &[&str] = &[".analysis.devices[].actions", ".segment_stacks", ".stacks"];
/// Values that are free-form JSON (the allocator's settings as torch wrote them, an audit
/// entry's details): their type is checked, their insides are not part of the contract.
const FREE_FORM: &[&str] = &[
    ".allocator_settings",
    "[].allocator_settings",
    ".entries[].detail",
];

const BEGIN: &str =
    "<!-- contract:begin (written by tests/api_contract.rs; SNAPVIEW_BLESS=1 to update) -->";
const END: &str = "<!-- contract:end -->";

/// Every path of one answer: its JSON types, how often it was seen, and (for objects) how many
/// objects were seen there, so a key seen less often than its object is optional.
#[derive(Default)]
struct Shape {
    paths: BTreeMap<String, PathFacts>,
}

#[derive(Default)]
struct PathFacts {
    types: BTreeSet<&'static str>,
    seen: usize,
    objects: usize,
}

impl Shape {
    /// The shape of answers of one kind: what any of them has (a field that is `null` in one
    /// and a number in another is `null | number`).
    fn of(values: &[&serde_json::Value]) -> Self {
        let mut shape = Shape::default();
        for value in values {
            shape.walk("", value);
        }
        shape
    }

    fn walk(&mut self, path: &str, value: &serde_json::Value) {
        use serde_json::Value;
        let facts = self.paths.entry(path.to_owned()).or_default();
        facts.seen += 1;
        facts.types.insert(match value {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        });
        if FREE_FORM.contains(&path) {
            return;
        }
        match value {
            Value::Array(items) => {
                for item in items {
                    self.walk(&format!("{path}[]"), item);
                }
            }
            Value::Object(fields) => {
                facts.objects += 1;
                let map = MAPS.contains(&path);
                for (key, field) in fields {
                    let key = if map { "{*}" } else { key.as_str() };
                    self.walk(&format!("{path}.{key}"), field);
                }
            }
            _ => {}
        }
    }

    /// One line per path: `.field[].inner: number | null` (`?` after a field that may be absent).
    fn lines(&self) -> Vec<String> {
        self.paths
            .iter()
            .filter(|(path, _)| !path.is_empty())
            .map(|(path, facts)| {
                let parent = parent_of(path);
                let optional = self
                    .paths
                    .get(parent)
                    .is_some_and(|p| facts.seen < p.objects && !path.ends_with("[]"));
                let types: Vec<&str> = facts.types.iter().copied().collect();
                format!(
                    "{path}{}: {}",
                    if optional { "?" } else { "" },
                    types.join(" | ")
                )
            })
            .collect()
    }
}

/// `.a.b[]` → `.a`; `.a.b` → `.a`; `.a` → ``.
fn parent_of(path: &str) -> &str {
    if let Some(array) = path.strip_suffix("[]") {
        return array;
    }
    path.rfind('.').map_or("", |i| &path[..i])
}

/// The documented shapes: one section per endpoint.
struct Contract {
    sections: Vec<(String, Vec<String>)>,
}

impl Contract {
    /// The merged shape of `values`, answers of one endpoint (on different fixtures, so that
    /// fields that are sometimes `null` or absent are seen so).
    fn add(&mut self, title: &str, values: &[&serde_json::Value]) {
        let shape = Shape::of(values);
        let root: Vec<&str> = shape.paths[""].types.iter().copied().collect();
        let mut lines = vec![format!("(root): {}", root.join(" | "))];
        lines.extend(shape.lines());
        self.sections.push((title.to_owned(), lines));
    }

    fn add_lines(&mut self, title: &str, lines: Vec<String>) {
        self.sections.push((title.to_owned(), lines));
    }

    fn render(&self) -> String {
        let mut text = String::new();
        for (title, lines) in &self.sections {
            text.push_str(&format!("\n#### {title}\n\n```text\n"));
            for line in lines {
                text.push_str(line);
                text.push('\n');
            }
            text.push_str("```\n");
        }
        text.push('\n');
        text
    }
}

struct Client {
    server: Served,
}

impl Client {
    fn json(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        expect: u16,
    ) -> serde_json::Value {
        let (status, text) = self.server.call(method, path, body);
        assert_eq!(status, expect, "{method} {path}: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method} {path}: {e}: {text}"))
    }

    fn get(&self, path: &str) -> serde_json::Value {
        self.json("GET", path, None, 200)
    }

    fn upload(&self, fixture: &str, query: &str) -> String {
        let bytes = std::fs::read(common::fixtures().join(fixture)).expect("fixture");
        let answer = self.json(
            "POST",
            &format!("/api/snapshots?filename={fixture}{query}"),
            Some(&bytes),
            201,
        );
        answer["id"].as_str().expect("id").to_owned()
    }
}

fn docs_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/api.md")
}

#[test]
fn every_answer_has_the_documented_shape() {
    let data = tempfile::tempdir().expect("tempdir");
    let client = Client {
        server: Served::start(data.path(), &[]),
    };
    let mut contract = Contract {
        sections: Vec::new(),
    };

    // Uploads: an OOM, a run with annotations, and two ranks of one job.
    let bytes = std::fs::read(common::fixtures().join("mlp_small.pickle")).expect("fixture");
    let uploaded = client.json(
        "POST",
        "/api/snapshots?filename=mlp_small.pickle&name=mlp",
        Some(&bytes),
        201,
    );
    contract.add(
        "POST /api/snapshots (201 created, 200 already stored)",
        &[&uploaded],
    );
    let mlp = uploaded["id"].as_str().expect("id").to_owned();
    let oom = client.upload("oom.pickle", "&name=oom");
    let rank0 = client.upload("ddp_rank.pickle", "&name=rank0&group=job7");
    let _rank1 = client.upload("ddp_rank_rank1.pickle", "&name=rank1&group=job7");
    // Fields that are `null` on some snapshots: no history, a trace that starts mid-run.
    let bare = client.upload("no_history.pickle", "&name=bare");
    let wrapped = client.upload("ring_wrap.pickle", "&name=wrapped");
    let all = [&mlp, &oom, &rank0, &bare, &wrapped];
    let each = |path: &str| -> Vec<serde_json::Value> {
        all.iter()
            .map(|id| client.get(&format!("/api/snapshots/{id}{path}")))
            .collect()
    };

    let list = client.get("/api/snapshots");
    for row in list["snapshots"].as_array().expect("snapshots") {
        // The stored summary row reads back through its type.
        let summary: SummaryRow = serde_json::from_value(row["summary"].clone()).expect("row");
        assert!(!summary.devices.is_empty(), "{row}");
    }
    contract.add("GET /api/snapshots", &[&list]);

    let detail = client.get(&format!("/api/snapshots/{oom}"));
    let details = each("");
    contract.add(
        "GET /api/snapshots/{id}",
        &details.iter().collect::<Vec<_>>(),
    );
    let default_device = detail["default_device"].as_u64().expect("default device");

    let timeline = client.get(&format!("/api/snapshots/{mlp}/timeline?width=400"));
    let markers: Markers = serde_json::from_value(timeline["markers"].clone()).expect("markers");
    assert!(
        !markers.annotations.is_empty(),
        "mlp_small records annotations"
    );
    let oom_timeline = client.get(&format!(
        "/api/snapshots/{oom}/timeline?width=400&axis=time"
    ));
    let markers: Markers =
        serde_json::from_value(oom_timeline["markers"].clone()).expect("markers");
    assert!(!markers.ooms.is_empty(), "oom.pickle records an OOM");
    assert_eq!(
        oom_timeline["device"].as_u64(),
        Some(default_device),
        "the server's default device"
    );
    let mut timelines = each("/timeline?width=300");
    timelines.extend([timeline, oom_timeline]);
    contract.add(
        "GET /api/snapshots/{id}/timeline",
        &timelines.iter().collect::<Vec<_>>(),
    );

    // ---- roles in the views (issue 11) ----
    let mut role_windows = each("/roles?width=300");
    role_windows.push(client.get(&format!(
        "/api/snapshots/{oom}/roles?width=50&axis=time&start=3"
    )));
    contract.add(
        "GET /api/snapshots/{id}/roles",
        &role_windows.iter().collect::<Vec<_>>(),
    );
    let by_role = each("/flame?by=role");
    contract.add(
        "GET /api/snapshots/{id}/flame?by=role",
        &by_role.iter().collect::<Vec<_>>(),
    );
    // ---- end of roles in the views ----

    // ---- the load status (issue 12) ----
    // Every snapshot here was parsed by its upload, so the server answers `ready`; the states
    // of a load in flight (and of a failed one, which tests/server_cold.rs makes on a damaged
    // file) are written by the same type the handler serialises.
    let mut statuses = each("/status");
    for status in &statuses {
        assert_eq!(status["state"], "ready", "{status}");
    }
    statuses.extend(
        [
            LoadStatus::Queued,
            LoadStatus::Reading {
                read: 4 << 20,
                total: 286_650_809,
            },
            LoadStatus::Analysing,
            LoadStatus::Failed {
                error: "its stored file does not read as a snapshot: the file ends early".into(),
            },
        ]
        .iter()
        .map(|status| serde_json::to_value(status).expect("json")),
    );
    contract.add(
        "GET /api/snapshots/{id}/status",
        &statuses.iter().collect::<Vec<_>>(),
    );
    // ---- end of the load status ----

    let allocation = client.get(&format!("/api/snapshots/{mlp}/allocations/0"));
    // The trace that starts mid-run has blocks freed that it never saw allocated.
    let orphan = client.get(&format!("/api/snapshots/{wrapped}/allocations/0"));
    contract.add(
        "GET /api/snapshots/{id}/allocations/{n}",
        &[&allocation, &orphan],
    );

    // The allocations a timeline column draws in grey (issue 20): one band at most, so the
    // column's rows (and their frames) are there.
    let column = client.get(&format!(
        "/api/snapshots/{mlp}/timeline/column?width=300&detail=1&column=150&limit=5"
    ));
    assert!(column["total"].as_u64() > column["rows"].as_array().map(|r| r.len() as u64));
    let zoomed_column = client.get(&format!(
        "/api/snapshots/{oom}/timeline/column?width=300&y0=0&y1=100000&detail=1&column=10&limit=3"
    ));
    contract.add(
        "GET /api/snapshots/{id}/timeline/column",
        &[&column, &zoomed_column],
    );

    let flame = client.get(&format!("/api/snapshots/{mlp}/flame"));
    assert_eq!(flame["mode"], "allocated", "the answer says its mode");
    let reserved = client.get(&format!(
        "/api/snapshots/{mlp}/flame?mode=reserved&at=start"
    ));
    assert_eq!(reserved["mode"], "reserved");
    assert_eq!(
        reserved["at"],
        serde_json::Value::Null,
        "start is before the first event"
    );
    let mut flames = each("/flame");
    flames.extend(each("/flame?mode=reserved"));
    flames.push(reserved);
    contract.add(
        "GET /api/snapshots/{id}/flame",
        &flames.iter().collect::<Vec<_>>(),
    );

    let segments = client.get(&format!("/api/snapshots/{mlp}/segments?at=peak"));
    assert_eq!(
        segments["at"], flame["at"],
        "peak is the same moment for both views"
    );
    let mut maps = each("/segments?at=start");
    maps.extend(each("/segments"));
    maps.push(segments);
    contract.add(
        "GET /api/snapshots/{id}/segments",
        &maps.iter().collect::<Vec<_>>(),
    );

    let histories = each("/history?at=peak&before=3&after=3");
    contract.add(
        "GET /api/snapshots/{id}/history",
        &histories.iter().collect::<Vec<_>>(),
    );
    let segment_timelines = each("/segment-timeline?width=200");
    contract.add(
        "GET /api/snapshots/{id}/segment-timeline",
        &segment_timelines.iter().collect::<Vec<_>>(),
    );

    let events = client.get(&format!("/api/snapshots/{mlp}/events?limit=50"));
    let mut pages = each("/events?limit=20");
    pages.push(events);
    // With a frame filter each row names the frame that matched.
    let filtered = client.get(&format!("/api/snapshots/{mlp}/events?limit=5&frame=py"));
    assert!(
        filtered["rows"][0]["matched_frame"].is_string(),
        "{filtered}"
    );
    pages.push(filtered);
    contract.add(
        "GET /api/snapshots/{id}/events",
        &pages.iter().collect::<Vec<_>>(),
    );
    let event = client.get(&format!("/api/snapshots/{mlp}/events/3?frame=py"));
    assert!(!event["frames"].as_array().expect("frames").is_empty());
    contract.add("GET /api/snapshots/{id}/events/{index}", &[&event]);

    let reports = client.get(&format!("/api/snapshots/{oom}/oom"));
    assert!(!reports.as_array().expect("reports").is_empty());
    contract.add("GET /api/snapshots/{id}/oom", &[&reports]);

    let compare = client.get(&format!("/api/compare/{rank0}/{mlp}"));
    let compare_bare = client.get(&format!(
        "/api/compare/{bare}/{wrapped}?at_a=start&at_b=end"
    ));
    contract.add("GET /api/compare/{a}/{b}", &[&compare, &compare_bare]);

    let group = client.get("/api/groups/job7");
    assert_eq!(group["members"].as_array().map(Vec::len), Some(2));
    contract.add("GET /api/groups/{name}", &[&group]);

    let patched = client.json(
        "PATCH",
        &format!("/api/snapshots/{mlp}"),
        Some(br#"{"name": "mlp renamed", "group": "job8"}"#),
        200,
    );
    contract.add("PATCH /api/snapshots/{id}", &[&patched]);
    let (status, _) = client
        .server
        .call("DELETE", &format!("/api/snapshots/{mlp}"), None);
    assert_eq!(status, 204, "DELETE answers 204 without a body");
    let restored = client.json("POST", &format!("/api/snapshots/{mlp}/restore"), None, 200);
    contract.add("POST /api/snapshots/{id}/restore", &[&restored]);

    let audit = client.get("/api/audit?limit=5");
    contract.add("GET /api/audit", &[&audit]);

    let (status, headers, _) =
        client
            .server
            .call_with_headers("GET", &format!("/api/snapshots/{mlp}/raw"), None);
    assert_eq!(status, 200);
    let mut names: Vec<String> = ["content-type", "content-length", "content-disposition"]
        .iter()
        .filter(|name| headers.contains_key(**name))
        .map(|name| format!("{name}: present"))
        .collect();
    names.push(format!(
        "content-type = {}",
        headers["content-type"].to_str().expect("ascii")
    ));
    contract.add_lines(
        "GET /api/snapshots/{id}/raw (headers; the body is the stored file)",
        names,
    );

    // Every error, of every endpoint, has one body; it says what was not found.
    let mut errors = Vec::new();
    for (path, what) in [
        (
            format!("/api/snapshots/{mlp}/allocations/999999999"),
            "allocation 999999999",
        ),
        ("/api/groups/nobody".to_owned(), "group \"nobody\""),
        (
            "/api/snapshots/00000000000000aa".to_owned(),
            "no snapshot with id",
        ),
        (
            format!("/api/snapshots/{mlp}/flame?at=later"),
            "not a moment",
        ),
    ] {
        let (status, text) = client.server.call("GET", &path, None);
        assert!(status == 404 || status == 400, "{path}: {status} {text}");
        let body: ErrorBody =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}"));
        assert!(
            body.error.message.contains(what),
            "{path}: {}",
            body.error.message
        );
        errors.push(serde_json::from_str::<serde_json::Value>(&text).expect("json"));
    }
    let errors: Vec<&serde_json::Value> = errors.iter().collect();
    contract.add("Every error (4xx, 5xx)", &errors);

    let generated = contract.render();
    let path = docs_path();
    let docs = std::fs::read_to_string(&path).expect("docs/api.md");
    let (Some(begin), Some(end)) = (docs.find(BEGIN), docs.find(END)) else {
        panic!("docs/api.md lacks the contract markers");
    };
    let documented = &docs[begin + BEGIN.len()..end];
    if std::env::var_os("SNAPVIEW_BLESS").is_some() {
        let updated = format!("{}{BEGIN}{generated}{}", &docs[..begin], &docs[end..]);
        std::fs::write(&path, updated).expect("write docs/api.md");
        return;
    }
    if documented != generated {
        let old: BTreeSet<&str> = documented.lines().collect();
        let new: BTreeSet<&str> = generated.lines().collect();
        let added: Vec<&&str> = new.difference(&old).collect();
        let removed: Vec<&&str> = old.difference(&new).collect();
        panic!(
            "the server's answers and docs/api.md disagree.\nsent but not documented: {added:#?}\ndocumented but not sent: {removed:#?}\n(after an intended change: SNAPVIEW_BLESS=1 cargo test --release --test it api_contract::)"
        );
    }
}

#[test]
fn shapes_mark_optional_fields_and_collapse_maps() {
    let value = serde_json::json!([{"a": 1, "b": null}, {"a": 2, "b": "x", "c": [true]}]);
    let lines = Shape::of(&[&value]).lines();
    assert_eq!(
        lines,
        vec![
            "[]: object",
            "[].a: number",
            "[].b: null | string",
            "[].c?: array",
            "[].c[]: bool"
        ]
    );
    assert_eq!(parent_of(".x.y[]"), ".x.y");
    assert_eq!(parent_of(".x.y"), ".x");
    assert_eq!(parent_of("[].c"), "[]");
}
