//! One error type for the HTTP API, mapped exhaustively to status codes and to the one error
//! shape every endpoint uses: `{"error": {"code": "...", "message": "..."}}`.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("no snapshot with id {0}")]
    NotFound(String),
    #[error("{0:?} is not a snapshot id (ids are 16 hex digits)")]
    BadId(String),
    #[error("{0}")]
    BadRequest(String),
    /// The upload is not a readable snapshot; the message is the reader's.
    #[error("{0}")]
    NotASnapshot(String),
    #[error("the upload is larger than this server's limit of {limit} bytes (--max-upload)")]
    TooLarge { limit: u64 },
    /// No token, or one that does not grant what the request wants.
    #[error("{0}")]
    Unauthorized(String),
    /// A write sent by another site's page.
    #[error("{0}")]
    Forbidden(String),
    /// A Host this server does not answer to (DNS rebinding).
    #[error("{0}")]
    WrongHost(String),
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::BadId(_) | ApiError::BadRequest(_) | ApiError::NotASnapshot(_) => {
                StatusCode::BAD_REQUEST
            }
            ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::WrongHost(_) => StatusCode::MISDIRECTED_REQUEST,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            ApiError::NotFound(_) => "not_found",
            ApiError::BadId(_) => "bad_id",
            ApiError::BadRequest(_) => "bad_request",
            ApiError::NotASnapshot(_) => "not_a_snapshot",
            ApiError::TooLarge { .. } => "too_large",
            ApiError::Unauthorized(_) => "unauthorized",
            ApiError::Forbidden(_) => "cross_site",
            ApiError::WrongHost(_) => "wrong_host",
            ApiError::Internal(_) => "internal",
        }
    }
}

impl From<super::store::StoreError> for ApiError {
    fn from(error: super::store::StoreError) -> Self {
        tracing::error!(%error, "storage failed");
        ApiError::Internal(error.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if matches!(self, ApiError::Internal(_)) {
            tracing::error!(error = %self, "request failed");
        }
        let body = serde_json::json!({
            "error": { "code": self.code(), "message": self.to_string() }
        });
        (self.status(), Json(body)).into_response()
    }
}
