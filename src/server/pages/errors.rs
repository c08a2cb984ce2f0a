//! The error page: an API error, or an unknown address, as a page a person can read.

use super::{Assets, render};
use crate::server::error::ApiError;
use askama::Template;
use axum::http::{StatusCode, Uri};
use axum::response::Response;

#[derive(Template)]
#[template(path = "error.html")]
pub(crate) struct ErrorPage {
    assets: Assets,
    title: String,
    message: String,
}

/// An API error as a page a person can read.
pub(crate) fn error_page(error: ApiError) -> Response {
    let public = error.public();
    let status = public.status;
    let title = match status {
        StatusCode::NOT_FOUND => match &error {
            ApiError::PageNotFound(_) => "Page not found",
            _ => "Snapshot not found",
        },
        StatusCode::GONE => "Snapshot deleted",
        StatusCode::BAD_REQUEST => "That link is not right",
        _ => "Something went wrong",
    };
    let mut response = render(ErrorPage {
        assets: Assets::new(),
        title: title.to_owned(),
        message: public.message,
    });
    *response.status_mut() = status;
    error.with_log_cause(response)
}

/// Any other path: a page for a person, the API's error shape under `/api/`.
pub async fn not_found(uri: Uri) -> Response {
    let error = ApiError::PageNotFound(uri.path().chars().take(200).collect());
    if uri.path().starts_with("/api/") || uri.path() == "/api" {
        return axum::response::IntoResponse::into_response(error);
    }
    error_page(error)
}
