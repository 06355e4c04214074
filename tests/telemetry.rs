//! The OpenTelemetry exporter of the binaries: with `OTEL_EXPORTER_OTLP_ENDPOINT` at a receiver
//! on loopback, a fetch's spans arrive over OTLP/HTTP (protobuf), decoded here with the
//! official definitions (`opentelemetry-proto`): their names, parent links and fields.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use prost::Message as _;

use crate::support::cli::{demo_file, hub_builder, run, start, Sandbox, REPO};

const MODEL: &str = "tinyllama-q4_k_m.gguf";

/// A span as received: its name, ids and attributes (strings and integers as text).
#[derive(Debug, Clone)]
struct Got {
    name: String,
    id: Vec<u8>,
    parent: Vec<u8>,
    attrs: HashMap<String, String>,
}

fn attrs(kv: &[KeyValue]) -> HashMap<String, String> {
    kv.iter()
        .filter_map(|kv| {
            let v = match kv.value.as_ref()?.value.as_ref()? {
                any_value::Value::StringValue(s) => s.clone(),
                any_value::Value::IntValue(i) => i.to_string(),
                any_value::Value::BoolValue(b) => b.to_string(),
                other => format!("{other:?}"),
            };
            Some((kv.key.clone(), v))
        })
        .collect()
}

/// A receiver of OTLP/HTTP trace exports: the spans and the resource attributes it decoded.
struct Receiver {
    url: String,
    spans: Arc<Mutex<Vec<Got>>>,
    resources: Arc<Mutex<Vec<HashMap<String, String>>>>,
    _rt: tokio::runtime::Runtime,
}

impl Receiver {
    fn start() -> Receiver {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let spans: Arc<Mutex<Vec<Got>>> = Arc::default();
        let resources: Arc<Mutex<Vec<HashMap<String, String>>>> = Arc::default();
        let (s, r) = (spans.clone(), resources.clone());
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: Bytes| {
                let (s, r) = (s.clone(), r.clone());
                async move {
                    let req = ExportTraceServiceRequest::decode(body).expect("an OTLP export");
                    for rs in req.resource_spans {
                        if let Some(res) = &rs.resource {
                            r.lock().unwrap().push(attrs(&res.attributes));
                        }
                        for ss in rs.scope_spans {
                            for sp in ss.spans {
                                s.lock().unwrap().push(Got {
                                    name: sp.name.clone(),
                                    id: sp.span_id.clone(),
                                    parent: sp.parent_span_id.clone(),
                                    attrs: attrs(&sp.attributes),
                                });
                            }
                        }
                    }
                    (
                        [("content-type", "application/x-protobuf")],
                        ExportTraceServiceResponse::default().encode_to_vec(),
                    )
                }
            }),
        );
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        rt.spawn(async move { axum::serve(listener, app).await });
        Receiver {
            url,
            spans,
            resources,
            _rt: rt,
        }
    }
}

#[test]
fn a_fetch_exports_its_spans_over_otlp() {
    let hub = start(hub_builder());
    let rx = Receiver::start();
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.env("OTEL_EXPORTER_OTLP_ENDPOINT", &rx.url)
        .arg(REPO)
        .arg(MODEL);
    let o = run(c);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The exporter sends what is queued before the program ends.
    let spans = rx.spans.lock().unwrap().clone();
    let one = |name: &str| -> Got {
        spans
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("a '{name}' span among {:?}", names(&spans)))
            .clone()
    };
    let fetch = one("fetch");
    assert_eq!(fetch.attrs.get("repo").map(String::as_str), Some(REPO));
    assert_eq!(
        fetch.attrs.get("revision").map(String::as_str),
        Some("main")
    );
    let file = spans
        .iter()
        .find(|s| s.name == "fetch_file" && s.attrs.get("path").map(String::as_str) == Some(MODEL))
        .unwrap_or_else(|| panic!("the model's fetch_file among {:?}", names(&spans)));
    assert_eq!(
        file.attrs.get("size").map(String::as_str),
        Some(demo_file(MODEL).len().to_string().as_str())
    );
    // Each span's parent chain reaches the fetch.
    let by_id: HashMap<&[u8], &Got> = spans.iter().map(|s| (s.id.as_slice(), s)).collect();
    let under_fetch = |s: &Got| {
        let mut cur = s;
        for _ in 0..16 {
            if cur.id == fetch.id {
                return true;
            }
            match by_id.get(cur.parent.as_slice()) {
                Some(p) => cur = p,
                None => return false,
            }
        }
        false
    };
    assert!(under_fetch(file), "fetch_file is below fetch");
    let chunk = one("fetch_chunk");
    assert!(under_fetch(&chunk), "fetch_chunk is below fetch");
    assert!(chunk.attrs.contains_key("start") && chunk.attrs.contains_key("end"));
    let resources = rx.resources.lock().unwrap().clone();
    assert!(
        resources
            .iter()
            .any(|r| r.get("service.name").map(String::as_str) == Some("wi-fetch")),
        "{resources:?}"
    );
}

/// An endpoint nobody listens on: the fetch succeeds as without one.
#[test]
fn an_unreachable_endpoint_does_not_fail_a_fetch() {
    let hub = start(hub_builder());
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let sb = Sandbox::new();
    let mut c = sb.cmd(&hub);
    c.env("OTEL_EXPORTER_OTLP_ENDPOINT", &url)
        .arg(REPO)
        .arg(MODEL);
    let o = run(c);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn names(spans: &[Got]) -> Vec<&str> {
    spans.iter().map(|s| s.name.as_str()).collect()
}
