//! Static assets embedded in the binary, served under content-hashed names so browsers cache
//! them forever and a new release is fetched at once.

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rust_embed::RustEmbed;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::OnceLock;

#[derive(RustEmbed)]
#[folder = "static/"]
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
            let digest = Sha256::digest(&file.data);
            let short: String = digest.iter().take(5).map(|b| format!("{b:02x}")).collect();
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

fn content_type(name: &str) -> &'static str {
    match name.rsplit('.').next() {
        Some("css") => "text/css; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("woff2") => "font/woff2",
        _ => "application/octet-stream",
    }
}

/// `GET /static/{*path}`: hashed names are immutable; plain names (ES modules importing each
/// other by relative path) must be revalidated.
pub async fn serve(Path(path): Path<String>) -> Response {
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
    let mut response = file.data.into_owned().into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(&name)),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    response
}
