//! `GET /api/snapshots/{id}/events/{index}`: one event with its whole stack, the frames the
//! list's frame filter matched marked, and every index or filter a client may send answered
//! without a panic (past the trace: 404 that names the trace's length).

use crate::common;

use axum::http::StatusCode;
use common::server::TestServer;

#[tokio::test]
async fn an_event_comes_with_its_whole_stack_and_the_filter_marks_its_frames() {
    let server = TestServer::new();
    let id = server.upload_fixture("gpt2_adamw", "").await;
    let page = server
        .get(&format!("/api/snapshots/{id}/events?limit=20"))
        .await;
    let alloc = page["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|row| row["action"] == "alloc")
        .expect("an alloc")
        .clone();
    let index = alloc["index"].as_u64().expect("index");
    let event = server
        .get(&format!("/api/snapshots/{id}/events/{index}"))
        .await;
    assert_eq!(event["event"]["index"], index);
    assert_eq!(event["event"]["block_id"], alloc["block_id"]);
    let frames = event["frames"].as_array().expect("frames");
    assert!(frames.len() > 3, "{event}");
    // The row's top frame is the first frame PyTorch's viewer shows.
    let first_shown = frames
        .iter()
        .find(|f| f["hidden"] == false)
        .expect("a shown frame");
    let top = alloc["top_frame"].as_str().expect("top frame");
    assert!(
        top.ends_with(first_shown["name"].as_str().expect("name")),
        "{top} vs {first_shown}"
    );
    assert!(frames.iter().all(|f| f["matched"] == false));

    // A filter on a frame deeper than the top one marks exactly the frames holding the text.
    let deep = frames
        .iter()
        .rev()
        .find(|f| f["hidden"] == false)
        .expect("an outer frame");
    let needle = deep["name"].as_str().expect("name").to_uppercase();
    let marked = server
        .get(&format!(
            "/api/snapshots/{id}/events/{index}?frame={}",
            urlencode(&needle)
        ))
        .await;
    let lower = needle.to_lowercase();
    for frame in marked["frames"].as_array().expect("frames") {
        let holds = frame["name"]
            .as_str()
            .is_some_and(|n| n.to_lowercase().contains(&lower))
            || frame["filename"]
                .as_str()
                .is_some_and(|n| n.to_lowercase().contains(&lower));
        assert_eq!(frame["matched"], holds, "{frame}");
    }
    assert!(
        marked["event"]["matched_frame"]
            .as_str()
            .is_some_and(|m| m.to_lowercase().contains(&lower)),
        "{marked}"
    );

    // The list's rows name the frame that matched too.
    let listed = server
        .get(&format!(
            "/api/snapshots/{id}/events?limit=5&frame={}",
            urlencode(&needle)
        ))
        .await;
    for row in listed["rows"].as_array().expect("rows") {
        assert!(
            row["matched_frame"]
                .as_str()
                .is_some_and(|m| m.to_lowercase().contains(&lower)),
            "{row}"
        );
    }
}

#[tokio::test]
async fn indexes_and_filters_a_client_may_send_are_answered_not_panicked_on() {
    let server = TestServer::new();
    let id = server.upload_fixture("mlp_small", "").await;
    let total = server
        .get(&format!("/api/snapshots/{id}/events?limit=1"))
        .await["total"]
        .as_u64()
        .expect("total");
    let (status, body) = server
        .call(get(&format!("/api/snapshots/{id}/events/{total}")))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("has {total} events"))),
        "{body}"
    );
    for path in [
        "/events/18446744073709551615",
        "/events/99999999999999999999999",
        "/events/-1",
        "/events/abc",
        "/events/0?device=99",
        "/events/0?device=host",
    ] {
        let (status, body) = server
            .call(get(&format!("/api/snapshots/{id}{path}")))
            .await;
        assert!(status.is_client_error(), "{path}: {status} {body}");
    }
    // A filter of any text, however long or odd, is a filter.
    let long = "ä".repeat(5000);
    for frame in ["%00", "%E2%80%AE", long.as_str()] {
        let (status, body) = server
            .call(get(&format!(
                "/api/snapshots/{id}/events/0?frame={}",
                urlencode(frame)
            )))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
}

fn get(path: &str) -> axum::http::Request<axum::body::Body> {
    axum::http::Request::get(path)
        .body(axum::body::Body::empty())
        .expect("request")
}

/// Percent-encodes a query value (every byte but letters, digits and `-_.`); a value that starts
/// with `%` is sent as it is, to test the server's decoding of hostile escapes.
fn urlencode(text: &str) -> String {
    const VALUE: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.');
    if text.starts_with('%') {
        return text.to_owned();
    }
    percent_encoding::utf8_percent_encode(text, VALUE).to_string()
}
