//! The console's static files, built into the binary: the stylesheet, the icon and htmx
//! (2.0.11, 0BSD licence, from the `htmx.org` npm package's `dist/htmx.min.js`).

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

const CSS: &str = include_str!("assets/console.css");
const HTMX: &str = include_str!("assets/htmx.min.js");
const ICON: &str = include_str!("assets/favicon.svg");

pub async fn serve(Path(name): Path<String>) -> Response {
    let (body, kind) = match name.as_str() {
        "console.css" => (CSS, "text/css; charset=utf-8"),
        "htmx.min.js" => (HTMX, "text/javascript; charset=utf-8"),
        "favicon.svg" => (ICON, "image/svg+xml"),
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    (
        [
            (header::CONTENT_TYPE, kind),
            // The same for everyone; the browser may keep them an hour, proxies not at all.
            (header::CACHE_CONTROL, "private, max-age=3600"),
        ],
        body,
    )
        .into_response()
}
