//! The console's files, embedded in the binary: two HTML pages, one script, one stylesheet. No
//! build step, no third-party code, nothing fetched at run time.

use bytes::Bytes;
use hyper::Response;
use hyper::header::HeaderValue;

use super::super::body::{Body, json_response};

/// A page of the console.
#[derive(Debug, Clone, Copy)]
pub(super) enum Page {
    /// The console itself (its views are drawn by the script).
    Console,
    /// The login form.
    Login,
}

const CONSOLE_HTML: &str = include_str!("assets/console.html");
const LOGIN_HTML: &str = include_str!("assets/login.html");
const SCRIPT: &str = include_str!("assets/console.js");
const STYLE: &str = include_str!("assets/console.css");

/// A page's answer.
pub(super) fn page(page: Page) -> Response<Body> {
    let html = match page {
        Page::Console => CONSOLE_HTML,
        Page::Login => LOGIN_HTML,
    };
    file(html, "text/html; charset=utf-8")
}

/// `assets/<name>`.
pub(super) fn serve(name: &str) -> Response<Body> {
    match name {
        "console.js" => file(SCRIPT, "text/javascript; charset=utf-8"),
        "console.css" => file(STYLE, "text/css; charset=utf-8"),
        _ => json_response(404, &serde_json::json!({ "error": "no such file" })),
    }
}

fn file(text: &'static str, content_type: &'static str) -> Response<Body> {
    let mut resp = Response::new(Body::Full(Some(Bytes::from_static(text.as_bytes()))));
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    resp
}
