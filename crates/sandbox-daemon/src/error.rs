//! The API's errors: an HTTP status, a stable code a client can branch on,
//! a message naming the field, and the fix (`docs/src/daemon.md`, "Errors").

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// One refused or failed request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message} ({fix})")]
pub struct ApiError {
    /// HTTP status.
    pub status: u16,
    /// Stable code (`bad_request`, `limit_too_high`, ...).
    pub code: &'static str,
    /// What is wrong, naming the field.
    pub message: String,
    /// What to do about it.
    pub fix: String,
    /// Seconds for `Retry-After`, for a refusal that passes.
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// An error with a status and code.
    pub fn new(
        status: u16,
        code: &'static str,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            fix: fix.into(),
            retry_after: None,
        }
    }

    /// 400 `bad_request`.
    pub fn bad_request(message: impl Into<String>, fix: impl Into<String>) -> ApiError {
        ApiError::new(400, "bad_request", message, fix)
    }

    /// 403 with a rule's refusal code.
    pub fn forbidden(
        code: &'static str,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) -> ApiError {
        ApiError::new(403, code, message, fix)
    }

    /// 404 `no_such_run` (also for another caller's run, so ids do not leak).
    pub fn no_such_run(id: &str) -> ApiError {
        ApiError::new(
            404,
            "no_such_run",
            format!("no run {id:?}"),
            "list your runs with GET /v1/runs",
        )
    }

    /// 409 `run_not_finished`: run `id`, in `state`, must end before this
    /// (`known_then`: what is known when it ends; `fix`: what to do).
    pub fn not_finished(
        id: &str,
        state: impl std::fmt::Display,
        known_then: &str,
        fix: impl Into<String>,
    ) -> ApiError {
        ApiError::new(
            409,
            "run_not_finished",
            format!("run {id} is {state}{known_then}"),
            fix,
        )
    }

    /// 500 for a failure of the daemon itself (database, spool).
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(
            500,
            "internal",
            message,
            "see the daemon's log; retry once the cause is fixed",
        )
    }

    /// With a `Retry-After`.
    pub fn retry_after(mut self, seconds: u64) -> ApiError {
        self.retry_after = Some(seconds);
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "error": {"code": self.code, "message": self.message, "fix": self.fix}
        });
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, axum::Json(body)).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// Run a blocking store or file call off the runtime's workers.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|err| ApiError::internal(format!("a blocking task failed: {err}")))?
}
