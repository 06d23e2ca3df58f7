//! Who is asking a dashboard page: a browser's session cookie, or `Authorization: Bearer` as
//! for the API; every page needs the `read` scope and counts against the token's request rate.
//! The login form takes a token and answers with the session cookie (`HttpOnly`,
//! `SameSite=Strict`, `Path=/ui`, `Secure` under TLS); logout ends the session.
//!
//! A form a session posts carries the session's CSRF value, and a request whose `Origin` is not
//! this host is refused before anything else.

use std::sync::Arc;

use askama::Template;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::error::UiError;
use super::pages::Chrome;
use super::session::{self, COOKIE, SESSION_TTL};
use crate::service::Service;
use crate::service::auth;
use crate::service::rate_limit::Kind;
use crate::service::scope::{self, Scope};
use crate::service::tokens::Caller;

/// The signed-in caller of a page.
#[derive(Debug, Clone)]
pub struct Viewer {
    /// The token's name and scopes.
    pub caller: Caller,
    /// The session's CSRF value (`None` for a bearer token, which a browser never sends on its
    /// own, so it needs none).
    pub csrf: Option<String>,
}

impl Viewer {
    /// Whether the token may do what `scope` allows.
    pub fn may(&self, scope: Scope) -> bool {
        scope::allows(&self.caller.scopes, scope)
    }

    /// The page chrome for this viewer.
    pub fn chrome(&self) -> Chrome {
        Chrome {
            who: Some(super::text::line(&self.caller.name)),
            csrf: self.csrf.clone(),
        }
    }
}

/// The viewer of a request to `path` (for the login redirect), who must hold `read`.
pub fn viewer(svc: &Service, headers: &HeaderMap, path: &str) -> Result<Viewer, UiError> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(auth::bearer);
    let viewer = match bearer {
        Some(token) => Viewer {
            caller: svc
                .tokens()
                .verify(token)
                .ok_or_else(|| UiError::Unauthorized("wrong bearer token".into()))?,
            csrf: None,
        },
        None => {
            let signed = cookie(headers)
                .and_then(|c| svc.sessions.check(svc.tokens(), c))
                .ok_or_else(|| UiError::SignIn {
                    next: path.to_owned(),
                })?;
            Viewer {
                caller: signed.caller,
                csrf: Some(signed.csrf),
            }
        }
    };
    if !viewer.may(Scope::Read) {
        return Err(UiError::Forbidden(format!(
            "token `{}` lacks the `read` scope the dashboard needs",
            viewer.caller.name
        )));
    }
    svc.check_rate(&viewer.caller.name, Kind::Requests, 1)?;
    Ok(viewer)
}

/// The session cookie's value in a request, if any.
fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|h| session::cookie_value(h, COOKIE))
}

/// Refuses a request another site's page sent: its `Origin`, when given, must name this host
/// (`Host`), and a session's form must carry the session's CSRF value.
pub fn check_form(headers: &HeaderMap, viewer: Option<&Viewer>, csrf: &str) -> Result<(), UiError> {
    if let Some(origin) = headers.get(header::ORIGIN) {
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
        let origin_host = origin
            .to_str()
            .ok()
            .and_then(|o| o.split_once("://").map(|(_, h)| h));
        if host.is_none() || origin_host != host {
            return Err(UiError::Forbidden(
                "the form was sent from another site (its Origin is not this host)".into(),
            ));
        }
    }
    if let Some(expected) = viewer.and_then(|v| v.csrf.as_deref())
        && !session::csrf_matches(expected, csrf)
    {
        return Err(UiError::Forbidden(
            "the form's CSRF value is missing or stale: reload the page and try again".into(),
        ));
    }
    Ok(())
}

/// A `next` that stays on the dashboard (a path under `/ui`, not `//host`), else the queue.
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if (n == "/ui" || n.starts_with("/ui/"))
                && !n.contains("//")
                && !n.contains('\\')
                && !n.chars().any(char::is_control) =>
        {
            n.to_owned()
        }
        _ => "/ui/jobs".to_owned(),
    }
}

#[derive(Template)]
#[template(path = "ui/login.html")]
struct LoginPage {
    next: String,
    error: Option<String>,
    chrome: Chrome,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LoginQuery {
    next: Option<String>,
}

fn login_page(status: StatusCode, next: String, error: Option<String>) -> Response {
    let page = LoginPage {
        next,
        error,
        chrome: Chrome::default(),
    };
    match page.render() {
        Ok(html) => (status, Html(html)).into_response(),
        Err(e) => UiError::from(e).into_response(),
    }
}

/// `GET /ui/login`.
pub(super) async fn form(
    q: Result<Query<LoginQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let next = safe_next(q.as_ref().ok().and_then(|q| q.next.as_deref()));
    login_page(StatusCode::OK, next, None)
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LoginForm {
    token: String,
    #[serde(default)]
    next: Option<String>,
}

/// `POST /ui/login`: a token in, a session cookie out.
pub(super) async fn login(
    State(svc): State<Arc<Service>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(e) = check_form(&headers, None, "") {
        return e.into_response();
    }
    let form: LoginForm = match serde_urlencoded::from_bytes(&body) {
        Ok(f) => f,
        Err(e) => {
            return UiError::BadRequest(format!("the login form could not be read: {e}"))
                .into_response();
        }
    };
    let next = safe_next(form.next.as_deref());
    let Some((value, signed)) = svc.sessions.login(svc.tokens(), form.token.trim()) else {
        return login_page(
            StatusCode::UNAUTHORIZED,
            next,
            Some("That token is not valid here.".into()),
        );
    };
    if !scope::allows(&signed.caller.scopes, Scope::Read) {
        svc.sessions.logout(&value);
        return login_page(
            StatusCode::FORBIDDEN,
            next,
            Some(format!(
                "Token `{}` lacks the `read` scope the dashboard needs.",
                super::text::line(&signed.caller.name)
            )),
        );
    }
    tracing::info!(token = %signed.caller.name, "dashboard login");
    let secure = if svc.tls.is_some() { "; Secure" } else { "" };
    let set = format!(
        "{COOKIE}={value}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
        SESSION_TTL.as_secs()
    );
    let mut resp = Redirect::to(&next).into_response();
    if let Ok(v) = HeaderValue::from_str(&set) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LogoutForm {
    #[serde(default)]
    csrf: String,
}

/// `POST /ui/logout`: ends the session, clears the cookie.
pub(super) async fn logout(
    State(svc): State<Arc<Service>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let form: LogoutForm = serde_urlencoded::from_bytes(&body).unwrap_or_default();
    if let Some(c) = cookie(&headers) {
        let signed = svc.sessions.check(svc.tokens(), c);
        let v = signed.map(|s| Viewer {
            caller: s.caller,
            csrf: Some(s.csrf),
        });
        if let Err(e) = check_form(&headers, v.as_ref(), &form.csrf) {
            return e.into_response();
        }
        svc.sessions.logout(c);
    }
    let mut resp = Redirect::to("/ui/login").into_response();
    resp.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("ralph_session=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_stays_on_the_dashboard() {
        assert_eq!(safe_next(Some("/ui/jobs/abc")), "/ui/jobs/abc");
        assert_eq!(safe_next(Some("/ui")), "/ui");
        for bad in [
            "//evil.example/ui/",
            "https://evil.example/",
            "/ui//evil",
            "/uix",
            "/ui/\\evil",
            "/v1/jobs",
            "/ui/\nx",
        ] {
            assert_eq!(safe_next(Some(bad)), "/ui/jobs", "{bad}");
        }
        assert_eq!(safe_next(None), "/ui/jobs");
    }

    #[test]
    fn a_form_from_another_site_is_refused() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("ralph.example:8080"));
        assert!(check_form(&h, None, "").is_ok());
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://ralph.example:8080"),
        );
        assert!(check_form(&h, None, "").is_ok());
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://evil.example"),
        );
        assert!(check_form(&h, None, "").is_err());
        h.remove(header::ORIGIN);
        let v = Viewer {
            caller: Caller {
                name: "x".into(),
                scopes: vec![Scope::Cancel],
            },
            csrf: Some("s3cret".into()),
        };
        assert!(check_form(&h, Some(&v), "s3cret").is_ok());
        assert!(check_form(&h, Some(&v), "").is_err());
        assert!(check_form(&h, Some(&v), "s3creT").is_err());
    }
}
