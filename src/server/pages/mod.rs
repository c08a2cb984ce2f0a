//! HTML pages (askama templates in `templates/`), one module per page. Pages render what the
//! server already knows; the scripts in `static/` add uploading, renaming and the interactive
//! views.

mod compare;
mod errors;
mod group;
mod index;
mod loading;
mod snapshot;

pub use compare::{compare, compare_picker};
pub(crate) use errors::error_page;
pub use errors::not_found;
pub use group::group;
pub use index::index;
pub use snapshot::snapshot;

use super::assets;
use askama::Template;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

/// Asset URLs every page links (hashed names).
pub struct Assets {
    pub css: String,
    pub index_js: String,
    pub snapshot_js: String,
    pub icon: String,
}

impl Assets {
    pub(crate) fn new() -> Self {
        Self {
            css: assets::url("app.css"),
            index_js: assets::url("index.js"),
            snapshot_js: assets::url("snapshot.js"),
            icon: assets::url("icon.svg"),
        }
    }
}

/// The stylesheet and script of the compare, picker and group pages (besides `Assets`).
pub(crate) struct CompareAssets {
    pub(crate) css: String,
    pub(crate) compare_js: String,
    pub(crate) group_js: String,
}

impl CompareAssets {
    pub(crate) fn new() -> Self {
        Self {
            css: assets::url("compare.css"),
            compare_js: assets::url("compare/main.js"),
            group_js: assets::url("group.js"),
        }
    }
}

pub(crate) fn render(page: impl Template) -> Response {
    match page.render() {
        // Pages show live data (names, new uploads): Back and Forward must revalidate.
        Ok(html) => ([(header::CACHE_CONTROL, "no-cache")], Html(html)).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "template failed");
            (StatusCode::INTERNAL_SERVER_ERROR, "page rendering failed").into_response()
        }
    }
}
