//! The compare, picker and group pages through the router (no sockets): status codes, the error
//! pages for bad links, and what the server renders into them.

use crate::common;

use axum::http::{StatusCode, header};
use common::server::TestServer as Server;

fn server() -> Server {
    Server::new()
}

/// `GET path`: status, body as text, headers.
async fn get(server: &Server, path: &str) -> (StatusCode, String, header::HeaderMap) {
    let (status, body, headers) = server.send_get(path).await;
    (status, String::from_utf8_lossy(&body).into_owned(), headers)
}

/// Uploads a fixture with a name and group; returns its id.
async fn upload(server: &Server, file: &str, name: &str, group: &str) -> String {
    let bytes = std::fs::read(common::fixtures().join(file)).expect("fixture");
    let (status, json) = server
        .upload(bytes, &format!("?name={name}&group={group}"))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{json}");
    json["id"].as_str().expect("id").to_owned()
}

#[tokio::test]
async fn compare_page_renders_for_two_snapshots() {
    let server = server();
    let a = upload(&server, "infer_nograd.pickle", "nograd", "").await;
    let b = upload(&server, "infer_grad.pickle", "grad", "").await;
    let (status, html, headers) = get(&server, &format!("/compare/{a}/{b}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    assert!(
        headers[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .contains("script-src 'self'")
    );
    assert!(html.contains(&format!(r#"data-before="{a}""#)), "{html}");
    assert!(html.contains(&format!(r#"data-after="{b}""#)));
    assert!(html.contains("<title>nograd → grad · compare · snapview</title>"));
    // Swapping is a plain link, so it works before the script runs.
    assert!(html.contains(&format!(r#"href="/compare/{b}/{a}""#)));
    assert!(
        html.contains("/static/compare.") && html.contains("/static/compare/main."),
        "the page links its stylesheet and its script (static/compare/main.js)"
    );
    assert!(
        !html.contains("style="),
        "no inline styles (the CSP forbids them)"
    );
    // ignore_lines comes from the URL.
    let (status, html, _) = get(&server, &format!("/compare/{a}/{b}?ignore_lines=1")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("id=\"ignore-lines\" checked"));
    assert!(html.contains(&format!(r#"href="/compare/{b}/{a}?ignore_lines=1""#)));
}

#[tokio::test]
async fn compare_page_refuses_bad_and_unknown_ids() {
    let server = server();
    let a = upload(&server, "mlp_small.pickle", "mlp", "").await;
    let (status, html, _) = get(&server, &format!("/compare/not-an-id/{a}")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(html.contains("That link is not right"), "{html}");
    let (status, _, _) = get(&server, &format!("/compare/{a}/zz")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, html, _) = get(&server, &format!("/compare/{a}/0123456789abcdef")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(html.contains("Snapshot not found"));
    assert!(html.contains("0123456789abcdef"));
    let (status, _, _) = get(&server, "/compare/0123456789abcdef").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, _) = get(&server, "/compare/nope").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn compare_picker_lists_the_other_snapshots() {
    let server = server();
    let a = upload(&server, "infer_nograd.pickle", "nograd", "").await;
    let b = upload(&server, "infer_grad.pickle", "grad", "").await;
    let (status, html, _) = get(&server, &format!("/compare/{a}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        html.contains(&format!(r#"href="/compare/{a}/{b}""#)),
        "{html}"
    );
    assert!(
        !html.contains(&format!(r#"href="/compare/{a}/{a}""#)),
        "a snapshot is not offered against itself"
    );
    // Alone, there is nothing to pick.
    let lone = server_with_one().await;
    let (status, html, _) = get(&lone.0, &format!("/compare/{}", lone.1)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("Nothing to compare with yet"));
}

async fn server_with_one() -> (Server, String) {
    let server = server();
    let id = upload(&server, "mlp_small.pickle", "mlp", "").await;
    (server, id)
}

#[tokio::test]
async fn group_page_lists_members_and_outliers() {
    let server = server();
    let r0 = upload(&server, "ddp_rank.pickle", "rank0", "ddp").await;
    let r1 = upload(&server, "ddp_rank_rank1.pickle", "rank1", "ddp").await;
    let (status, html, _) = get(&server, "/g/ddp").await;
    assert_eq!(status, StatusCode::OK);
    for id in [&r0, &r1] {
        assert!(html.contains(&format!(r#"href="/s/{id}""#)), "{html}");
        assert!(html.contains(&format!(r#"data-id="{id}""#)));
    }
    assert!(html.contains(r#"data-peak="3680751624""#));
    assert!(html.contains("3.43 GiB"));
    assert!(
        !html.contains("class=\"outlier\""),
        "two equal ranks have no outlier"
    );
    // A third, far smaller member stands out, with a link comparing it to a typical member.
    let odd = upload(&server, "mlp_small.pickle", "odd", "ddp").await;
    let (status, html, _) = get(&server, "/g/ddp").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains(&format!(r#"<tr data-id="{odd}""#)));
    assert!(html.contains("class=\"outlier\""));
    assert!(
        html.contains(&format!(r#"href="/compare/{r0}/{odd}""#))
            || html.contains(&format!(r#"href="/compare/{r1}/{odd}""#)),
        "no compare link from the median-closest member to the outlier: {html}"
    );
    // The list links the group.
    let (_, list, _) = get(&server, "/").await;
    assert!(list.contains(r#"href="/g/ddp""#));
}

#[tokio::test]
async fn unknown_group_is_a_404_page() {
    let server = server();
    let (status, html, _) = get(&server, "/g/nobody").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(html.contains("no snapshot is in the group"), "{html}");
    // Names with spaces and slashes arrive percent-encoded.
    upload(&server, "mlp_small.pickle", "mlp", "run%2042").await;
    let (status, html, _) = get(&server, "/g/run%2042").await;
    assert_eq!(status, StatusCode::OK, "{html}");
    let (_, list, _) = get(&server, "/").await;
    assert!(list.contains(r#"href="/g/run%2042""#), "{list}");
}
