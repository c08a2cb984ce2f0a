//! Static assets embedded in the binary, served under content-hashed names so browsers cache
//! them forever and a new release is fetched at once. Each carries a strong `ETag` (its
//! SHA-256), so the ES modules fetched by their plain names are revalidated with a 304, not
//! sent again.

use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rust_embed::RustEmbed;
use std::collections::HashMap;
use std::sync::OnceLock;

/// `static/`, less the JS unit tests (`npm test`), which are no part of the app.
#[derive(RustEmbed)]
#[folder = "static/"]
#[exclude = "**/*.test.js"]
struct Static;

/// `app.css` → `app.3f2a1b9c.css` and back.
struct Names {
    hashed: HashMap<String, String>,
    original: HashMap<String, String>,
}

fn names() -> &'static Names {
    static NAMES: OnceLock<Names> = OnceLock::new();
    NAMES.get_or_init(|| {
        let mut hashed = HashMap::new();
        let mut original = HashMap::new();
        for name in Static::iter() {
            let Some(file) = Static::get(&name) else {
                continue;
            };
            let short = hex::encode(&file.metadata.sha256_hash()[..5]);
            let with_hash = match name.rsplit_once('.') {
                Some((stem, ext)) => format!("{stem}.{short}.{ext}"),
                None => format!("{name}.{short}"),
            };
            original.insert(with_hash.clone(), name.to_string());
            hashed.insert(name.to_string(), with_hash);
        }
        Names { hashed, original }
    })
}

/// The URL of an asset by its plain name (`app.css` → `/static/app.3f2a1b9c.css`).
pub fn url(name: &str) -> String {
    match names().hashed.get(name) {
        Some(hashed) => format!("/static/{hashed}"),
        None => format!("/static/{name}"),
    }
}

/// The `Content-Type` of an asset: what `mime_guess` says of its name (through rust-embed),
/// with the charset for text (the files are UTF-8).
fn content_type(file: &rust_embed::EmbeddedFile) -> HeaderValue {
    let mime = file.metadata.mimetype();
    let value = if mime.starts_with("text/") && !mime.contains("charset") {
        HeaderValue::from_str(&format!("{mime}; charset=utf-8"))
    } else {
        HeaderValue::from_str(mime)
    };
    value.unwrap_or(HeaderValue::from_static("application/octet-stream"))
}

/// Whether `If-None-Match` names this `etag` (or is `*`): the client's copy is current.
fn client_has(headers: &HeaderMap, etag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|tag| tag.trim().trim_start_matches("W/"))
        .any(|tag| tag == etag || tag == "*")
}

/// `GET /static/{*path}`: hashed names are immutable; plain names (ES modules importing each
/// other by relative path) are revalidated each time, by their `ETag` (a 304 when unchanged).
pub async fn serve(Path(path): Path<String>, request_headers: HeaderMap) -> Response {
    let (name, immutable) = match names().original.get(&path) {
        Some(original) => (original.clone(), true),
        None => (path, false),
    };
    let Some(file) = Static::get(&name) else {
        return (StatusCode::NOT_FOUND, "no such asset").into_response();
    };
    let cache = if immutable {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    // Strong: it names these bytes (compression, when the client asks, is a transfer detail
    // the `Vary: Accept-Encoding` the compression layer adds accounts for).
    let etag = format!("\"{}\"", hex::encode(file.metadata.sha256_hash()));
    let mut response = if client_has(&request_headers, &etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let content_type = content_type(&file);
        let mut response = file.data.into_owned().into_response();
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, content_type);
        response
    };
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    if let Ok(etag) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, etag);
    }
    response
}
