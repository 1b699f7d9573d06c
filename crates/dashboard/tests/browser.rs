//! The dashboard of a real node running real programs: its HTTP API from a
//! plain client, and its page in a real browser (Debian's headless
//! Chromium, driven through the DevTools protocol), clicked like a user
//! would.
//!
//! Screenshots go to `target/dashboard*.png`; with `ATOLL_SCREENSHOTS=DIR`
//! also to DIR, relative to the repository (docs/ holds the recorded one).

#[path = "../../node/tests/common/mod.rs"]
mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use atoll_abi::{status, KernelId};
use atoll_dashboard::Dashboard;
use atoll_node::Node;
use common::{job, start, HANG};
use headless_chrome::protocol::cdp::Page::CaptureScreenshotFormatOption;
use headless_chrome::{Browser, LaunchOptions, Tab};
use serde_json::{json, Value};

fn kernel(i: u16) -> KernelId {
    KernelId::new(0, i)
}

fn node_with_dashboard() -> (Arc<Node>, Dashboard) {
    let node = Arc::new(common::node(2));
    let dashboard = Dashboard::start(
        node.clone(),
        "127.0.0.1:0".parse().unwrap(),
        Duration::from_millis(250),
    )
    .expect("dashboard starts");
    (node, dashboard)
}

/// An HTTP answer: its status and JSON body.
fn answer(r: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> (u16, Value) {
    let mut r = r.expect("the dashboard answers");
    let status = r.status().as_u16();
    (status, r.body_mut().read_json().expect("a JSON body"))
}

/// An agent that hands 4xx answers back instead of failing on them.
fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

#[test]
fn the_api_wants_the_token_and_refuses_what_the_cli_refuses() {
    let (_node, d) = node_with_dashboard();
    let http = agent();
    let api = |path: &str| format!("http://{}/api/{path}", d.addr());

    // The page itself holds no data and needs no token.
    let page = http.get(&format!("http://{}/", d.addr())).call().unwrap();
    assert_eq!(page.status(), 200);

    let (code, body) = answer(http.get(&api("snapshot")).call());
    assert_eq!(code, 401, "{body}");
    assert!(body["error"].as_str().unwrap().contains("no token"));
    let (code, _) = answer(http.get(&api("snapshot?token=0123")).call());
    assert_eq!(code, 401);
    let (code, _) = answer(
        http.post(&api("kill"))
            .header("Authorization", "Bearer nope")
            .send_json(json!({"pid": "0.0:0:0"})),
    );
    assert_eq!(
        code, 401,
        "a wrong bearer is refused before anything is done"
    );

    let bearer = format!("Bearer {}", d.token());
    let (code, snapshot) = answer(
        http.get(&api("snapshot"))
            .header("Authorization", &bearer)
            .call(),
    );
    assert_eq!(code, 200);
    assert_eq!(snapshot["kernels"].as_array().unwrap().len(), 2);
    assert_eq!(snapshot["kernels"][1]["kernel"], "0.1");

    let post = |path: &str, body: Value| {
        answer(
            http.post(&api(path))
                .header("Authorization", &bearer)
                .send_json(body),
        )
    };
    for (path, body, want, says) in [
        ("migrate", json!({"pid": "one", "to": "0.1"}), 400, "PID"),
        (
            "migrate",
            json!({"pid": "0.0:0:0"}),
            400,
            "missing field `to`",
        ),
        (
            "migrate",
            json!({"pid": "0.0:0:0", "to": "0.1", "mode": "teleport"}),
            400,
            "teleport",
        ),
        (
            "migrate",
            json!({"pid": "0.0:77:0", "to": "0.1"}),
            409,
            "no process 0.0:77:0",
        ),
        (
            "migrate",
            json!({"pid": "0.0:77:0", "to": "0.9"}),
            409,
            "0.9",
        ),
        ("kill", json!({"pid": "0.1:5:3"}), 409, "0.1:5:3"),
        (
            "kill",
            json!({"pid": "0.1:5:3", "sig": 9}),
            400,
            "unknown field `sig`",
        ),
    ] {
        let (code, body) = post(path, body.clone());
        let error = body["error"].as_str().unwrap_or_default();
        assert_eq!(code, want, "{path} {body}");
        assert!(
            error.contains(says),
            "{path}: {error:?} should mention {says:?}"
        );
    }
}

/// The browser the tests drive: Debian's `chromium-headless-shell` (or
/// `chromium`), or `$ATOLL_CHROMIUM`.
fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("ATOLL_CHROMIUM") {
        return p.into();
    }
    ["/usr/bin/chromium-headless-shell", "/usr/bin/chromium"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("no Chromium: scripts/setup.sh installs Debian's chromium-headless-shell")
}

fn browser() -> Browser {
    // SAFETY: getuid has no preconditions.
    let root = unsafe { libc::getuid() } == 0;
    Browser::new(LaunchOptions {
        path: Some(chromium()),
        // Chromium's sandbox refuses to run as root.
        sandbox: !root,
        window_size: Some((1400, 1100)),
        idle_browser_timeout: HANG,
        ..LaunchOptions::default()
    })
    .expect("Chromium starts")
}

/// Waits until the JavaScript expression `cond` is true in the page.
fn wait_for(tab: &Tab, what: &str, cond: &str) {
    let t = Instant::now();
    loop {
        let v = tab.evaluate(cond, false).expect("the page evaluates");
        if v.value == Some(Value::Bool(true)) {
            return;
        }
        assert!(t.elapsed() < HANG, "the page never showed {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The text of the first element `selector` matches, read in one step in
/// the page (a redraw cannot come between finding and reading).
fn text(tab: &Tab, selector: &str) -> String {
    let js = format!("document.querySelector({selector:?})?.innerText ?? ''");
    match tab.evaluate(&js, false).expect("the page evaluates").value {
        Some(Value::String(s)) => s,
        other => panic!("{selector}: {other:?}"),
    }
}

/// Clicks `selector` until `done` holds: each snapshot redraws the tables,
/// so a button found just before a redraw may be gone when clicked.
fn click_until(tab: &Tab, selector: &str, what: &str, done: &str) {
    let t = Instant::now();
    loop {
        if let Ok(button) = tab.find_element(selector) {
            // A button replaced meanwhile fails the click: try again.
            let _ = button.click();
            let clicked = Instant::now();
            while clicked.elapsed() < Duration::from_secs(5) {
                let v = tab.evaluate(done, false).expect("the page evaluates");
                if v.value == Some(Value::Bool(true)) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        assert!(
            t.elapsed() < HANG,
            "clicking {selector} never {what}; the page says {:?}",
            text(tab, "#message")
        );
    }
}

fn screenshot(tab: &Tab, name: &str) {
    let png = tab
        .capture_screenshot(CaptureScreenshotFormatOption::Png, None, None, true)
        .expect("a screenshot");
    let repo = common::support::repo();
    std::fs::write(repo.join("target").join(name), &png).unwrap();
    if let Some(dir) = std::env::var_os("ATOLL_SCREENSHOTS") {
        std::fs::write(repo.join(dir).join(name), &png).unwrap();
    }
}

#[test]
fn the_page_shows_a_live_node_and_moves_and_kills_a_process_with_a_click() {
    let (node, d) = node_with_dashboard();
    node.domain_create("batch", Some(8)).unwrap();
    // A process that never ends, to move and kill; and IPC between the
    // two kernels, to see it flow.
    let mut spin = job("spin", &[]);
    spin.kernel = Some(kernel(0));
    spin.domain = Some("batch".into());
    let (pid, _, ended) = start(&node, &spin);
    let mut pingpong = job("ipc", &["pingpong", "other", "1000000000"]);
    pingpong.kernel = Some(kernel(1));
    let _ipc = start(&node, &pingpong);

    let browser = browser();
    let tab = browser.new_tab().unwrap();
    tab.navigate_to(&d.url()).unwrap();
    tab.wait_until_navigated().unwrap();
    let row = format!("#processes tr[data-pid='{pid}']");

    wait_for(
        &tab,
        "the live status",
        "document.querySelector('#status').className === 'up'",
    );
    wait_for(
        &tab,
        "the spinning process",
        &format!("!!document.querySelector(\"{row}\")"),
    );
    let shown = text(&tab, &row);
    assert!(shown.contains("spin"), "{shown}");
    assert!(shown.contains("batch"), "the row names its domain: {shown}");
    wait_for(
        &tab,
        "both kernels, each with its load line",
        "document.querySelectorAll('#kernels tbody tr').length === 2 && \
         document.querySelectorAll('#load-chart polyline').length === 2",
    );
    wait_for(
        &tab,
        "messages flowing from one kernel to the other",
        "[...document.querySelectorAll('#flows tbody tr')].some(tr => \
           [...tr.querySelectorAll('td[data-to]')].some(td => \
             td.dataset.to !== tr.dataset.from && parseFloat(td.textContent.replace(/,/g, '')) > 0))",
    );
    wait_for(
        &tab,
        "the domain with its process",
        "(document.querySelector(\"#domains tr[data-domain='batch']\") || {}).innerText?.includes('8')",
    );
    assert_eq!(
        node.locate(pid).unwrap(),
        kernel(0),
        "nothing moved before the click"
    );

    // One click moves it: the row's target is the other kernel.
    click_until(
        &tab,
        &format!("{row} button.migrate"),
        "moved the process",
        "document.querySelector('#message').innerText.includes('moved')",
    );
    assert_eq!(node.locate(pid).unwrap(), kernel(1));
    let message = text(&tab, "#message");
    assert!(message.contains("0.0 \u{2192} 0.1"), "{message}");
    wait_for(
        &tab,
        "the migration with its downtime",
        &format!(
            "[...document.querySelectorAll(\"#migrations tr[data-pid='{pid}']\")].some(tr => \
               tr.innerText.includes('0.1') && tr.innerText.includes('\u{b5}s'))"
        ),
    );
    wait_for(
        &tab,
        "the process on its new kernel",
        &format!("document.querySelector(\"{row} td.kernel\")?.innerText === '0.1'"),
    );
    screenshot(&tab, "dashboard.png");

    // And one click ends it.
    click_until(
        &tab,
        &format!("{row} button.kill"),
        "killed the process",
        &format!("document.querySelector('#message').innerText.includes('killed {pid}')"),
    );
    assert_eq!(
        ended.recv_timeout(HANG).expect("the process ends"),
        128 + status::SIGKILL
    );
    wait_for(
        &tab,
        "the process gone from the list",
        &format!("!document.querySelector(\"{row}\")"),
    );
    let listed = node.ps().unwrap();
    assert!(
        listed
            .iter()
            .flat_map(|r| &r.processes)
            .all(|p| p.pid != pid),
        "{pid} is still listed"
    );
}
