//! Auth: admin tokens, sign-in and where it may redirect.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_auth_on_the_console_needs_an_admin_token() {
    let admin_token = "console-admin-token-123456";
    let app = console_app(vec![
        TokenEntry {
            role: Role::Admin,
            token: admin_token.into(),
            name: Some("ops".into()),
            workers: None,
            queues: None,
        },
        TokenEntry {
            role: Role::Worker,
            token: "console-worker-token-123456".into(),
            name: None,
            workers: None,
            queues: None,
        },
    ])
    .await;
    let mut b = Browser::new(&app);
    let r = b.get("/tasks?queue=a").await;
    assert_eq!(r.status, 303);
    assert_eq!(r.header("location"), Some("/login?next=/tasks%3Fqueue%3Da"));
    assert_eq!(b.get("/overview/live").await.status, 303);
    let htmx = b
        .request("GET", "/overview/live", &[("HX-Request", "true")], "")
        .await;
    assert_eq!(htmx.status, 401);
    assert_eq!(htmx.header("hx-redirect"), Some("/login"));
    assert_eq!(b.post("/dead/requeue", &[("queue", "a")]).await.status, 401);

    let login = b.get("/login?next=/tasks").await;
    assert_eq!(login.status, 200);
    let token = login.csrf();
    let refused = b
        .post(
            "/login",
            &[
                ("csrf", &token),
                ("token", "wrong-token-000000000"),
                ("next", "/tasks"),
            ],
        )
        .await;
    assert_eq!(refused.status, 401);
    assert!(refused.body.contains("not valid"));
    let worker = b
        .post(
            "/login",
            &[("csrf", &token), ("token", "console-worker-token-123456")],
        )
        .await;
    assert_eq!(worker.status, 401);
    assert!(worker.body.contains("not an admin token"));
    assert_eq!(b.get("/").await.status, 303, "still signed out");
    assert_eq!(
        b.post("/login", &[("token", admin_token)]).await.status,
        403,
        "sign-in needs the CSRF token too"
    );

    let ok = b
        .post(
            "/login",
            &[("csrf", &token), ("token", admin_token), ("next", "/tasks")],
        )
        .await;
    assert_eq!(ok.status, 303);
    assert_eq!(ok.header("location"), Some("/tasks"));
    let cookie = ok
        .headers
        .iter()
        .find(|(k, v)| k == "set-cookie" && v.starts_with("tb_session="))
        .map(|(_, v)| v.clone())
        .expect("a session cookie");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(!cookie.contains(admin_token), "the cookie is not the token");
    let home = b.get("/").await;
    assert_eq!(home.status, 200);
    assert!(home.body.contains("Signed in as ops"));
    assert!(!home.body.contains(admin_token));

    let out = b.post("/logout", &[("csrf", &home.csrf())]).await;
    assert_eq!(out.status, 303);
    assert_eq!(b.get("/").await.status, 303, "signed out again");
    app.shutdown().await;
}

/// `next` after sign-in: a path on this site stays; anything a browser could read as
/// another site (tabs and newlines it drops, `\\` it reads as `/`, `//host`,
/// schemes, the same percent-encoded once or twice) goes to `/`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_redirects_only_to_paths_on_this_site() {
    let admin_token = "console-admin-token-123456";
    let app = console_app(vec![TokenEntry {
        role: Role::Admin,
        token: admin_token.into(),
        name: Some("ops".into()),
        workers: None,
        queues: None,
    }])
    .await;
    let mut b = Browser::new(&app);
    let kept = [
        "/tasks?state=dead",
        "/tasks/t-1?tab=runs#history",
        "/tasks?queue=caf%C3%A9",
        "/a%2Fb",
        "/",
    ];
    let hostile = [
        "/\t/evil.example/phish",
        "/\n/evil.example",
        "/\r\n/evil.example",
        "\t//evil.example",
        " //evil.example",
        "/ /evil.example",
        "//evil.example",
        "///evil.example",
        "/\\evil.example",
        "\\/evil.example",
        "/\\/evil.example",
        "/x\\..\\..\\evil",
        "/\u{0}/evil.example",
        "/\u{7f}/evil.example",
        "/\u{3000}/evil.example",
        "https://evil.example",
        "HTTPS://evil.example/",
        "javascript:alert(1)",
        "data:text/html,x",
        "evil.example",
        "",
        "/%09/evil.example/phish",
        "/%0A/evil.example",
        "/%0d%0a/evil.example",
        "/%2F/evil.example",
        "/%2f%2fevil.example",
        "%2F%2Fevil.example",
        "/%5Cevil.example",
        "/%5c/evil.example",
        "/%2509/evil.example",
        "/%252F/evil.example",
        "/%25252F/evil.example",
        "/%00/evil.example",
    ];
    let cases = kept
        .iter()
        .map(|n| (*n, *n))
        .chain(hostile.iter().map(|n| (*n, "/")));
    for (next, expected) in cases {
        let page = b.get(&format!("/login?next={}", encode(next))).await;
        assert_eq!(page.status, 200, "{next:?}");
        let hidden = format!("name=\"next\" value=\"{}\"", expected.replace('&', "&amp;"));
        assert!(page.body.contains(&hidden), "{next:?}: {}", page.body);
        let signed_in = b
            .post(
                "/login",
                &[
                    ("csrf", &page.csrf()),
                    ("token", admin_token),
                    ("next", next),
                ],
            )
            .await;
        assert_eq!(signed_in.status, 303, "{next:?}");
        assert_eq!(signed_in.header("location"), Some(expected), "{next:?}");
    }
    app.shutdown().await;
}
