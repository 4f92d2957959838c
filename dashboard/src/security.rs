//! What every request passes through: the optional token, the CSRF check of state-changing
//! requests, and the response headers that keep pages inert (a content security policy that
//! runs only the dashboard's own script, no sniffing, no framing).

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Method, Request, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;

use crate::Shared;

/// A fresh random token (122 random bits).
pub fn new_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// Compares two secrets in time that does not depend on where they differ.
pub fn same_secret(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether the request carries the token: as a bearer token, or as the password of basic
/// auth.
fn authorised(headers: &HeaderMap, token: &str) -> bool {
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    if let Some(bearer) = value.strip_prefix("Bearer ") {
        return same_secret(bearer.trim(), token);
    }
    if let Some(basic) = value.strip_prefix("Basic ") {
        let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(basic.trim()) else {
            return false;
        };
        let decoded = String::from_utf8_lossy(&decoded);
        return decoded
            .split_once(':')
            .is_some_and(|(_, password)| same_secret(password, token));
    }
    false
}

/// The headers every response gets.
fn harden(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

/// Asks for the token when one is set, refuses cross-site state-changing requests, and
/// hardens every response. The CSRF token itself is checked by the handlers, which read the
/// form.
pub async fn guard(State(app): State<Shared>, request: Request<Body>, next: Next) -> Response {
    if let Some(token) = &app.options.token {
        if !authorised(request.headers(), token) {
            let mut response = (
                StatusCode::UNAUTHORIZED,
                "pg_jobs dashboard: this dashboard asks for its token (the password; any user name)\n",
            )
                .into_response();
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"pg_jobs dashboard\", charset=\"UTF-8\""),
            );
            harden(response.headers_mut());
            return response;
        }
    }
    // Browsers say where a request comes from; a state-changing one from another site is
    // refused before its form is read (the CSRF token would refuse it too).
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let cross_site = request
            .headers()
            .get("sec-fetch-site")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|site| site == "cross-site");
        if cross_site {
            let mut response = (
                StatusCode::FORBIDDEN,
                "pg_jobs dashboard: a request from another site may not change anything\n",
            )
                .into_response();
            harden(response.headers_mut());
            return response;
        }
    }
    let mut response = next.run(request).await;
    harden(response.headers_mut());
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_compared_whole() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "ab"));
        assert!(!same_secret("", "a"));
    }

    #[test]
    fn basic_and_bearer_carry_the_token() {
        let mut headers = HeaderMap::new();
        assert!(!authorised(&headers, "s3cret"));
        headers.insert(header::AUTHORIZATION, "Bearer s3cret".parse().unwrap());
        assert!(authorised(&headers, "s3cret"));
        headers.insert(header::AUTHORIZATION, "Bearer s3cre".parse().unwrap());
        assert!(!authorised(&headers, "s3cret"));
        let basic = base64::engine::general_purpose::STANDARD.encode("ops:s3cret");
        headers.insert(
            header::AUTHORIZATION,
            format!("Basic {basic}").parse().unwrap(),
        );
        assert!(authorised(&headers, "s3cret"));
        let basic = base64::engine::general_purpose::STANDARD.encode("s3cret:wrong");
        headers.insert(
            header::AUTHORIZATION,
            format!("Basic {basic}").parse().unwrap(),
        );
        assert!(!authorised(&headers, "s3cret"));
    }
}
