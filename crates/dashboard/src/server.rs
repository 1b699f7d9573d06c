//! The HTTP side: the page, the API under `/api`, and the sampler that
//! feeds the event stream.
//!
//! | route | what |
//! |---|---|
//! | `GET /` | the page (`assets/`) |
//! | `GET /api/snapshot` | one [`Snapshot`], sampled now |
//! | `GET /api/events` | server-sent events: a `snapshot` each interval |
//! | `POST /api/migrate` | `{"pid", "to", "mode"?}`: the migration's report |
//! | `POST /api/kill` | `{"pid", "signal"?}` (default SIGKILL) |
//!
//! PIDs and kernels are the strings the CLI takes (`"0.1:4:0"`, `"0.1"`),
//! checked as the CLI checks them; the node refuses what it would refuse
//! the CLI. Errors are `{"error": "..."}` with 400 (a malformed request),
//! 401 (no or a wrong token) or 409 (the node refused).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use atoll_abi::{status, KernelId, Pid};
use atoll_migration::Mode;
use atoll_node::Node;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::Stream;
use serde::Deserialize;
use tokio::sync::{broadcast, oneshot};

use crate::view::{self, Snapshot, Watcher};

/// The page, its style and its script, built into the binary.
const INDEX_HTML: &str = include_str!("../assets/index.html");
const DASHBOARD_CSS: &str = include_str!("../assets/dashboard.css");
const DASHBOARD_JS: &str = include_str!("../assets/dashboard.js");

/// A running dashboard; dropping it stops the server and the sampler.
pub struct Dashboard {
    addr: SocketAddr,
    token: String,
    /// Ends the server's thread when sent or dropped.
    _stop_server: oneshot::Sender<()>,
    /// Ends the sampler's thread when dropped.
    _stop_sampler: mpsc::Sender<()>,
}

impl Dashboard {
    /// Serves `node`'s dashboard on `addr` (port 0 picks one), sampling the
    /// node every `interval` while anyone watches the event stream.
    ///
    /// # Errors
    /// When `addr` cannot be bound.
    pub fn start(node: Arc<Node>, addr: SocketAddr, interval: Duration) -> anyhow::Result<Self> {
        let listener = std::net::TcpListener::bind(addr)
            .with_context(|| format!("binding the dashboard to {addr}"))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let token = new_token()?;
        let (events, _) = broadcast::channel(4);
        let shared = Arc::new(Shared {
            node,
            token: token.clone(),
            watcher: Mutex::default(),
            latest: Mutex::default(),
            events,
        });

        let (stop_sampler, stopped) = mpsc::channel();
        let sampler = shared.clone();
        std::thread::Builder::new()
            .name("dashboard-sampler".into())
            .spawn(move || sampler.sample_while_watched(interval, stopped))?;

        let (stop_server, stop) = oneshot::channel();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let app = router(shared);
        std::thread::Builder::new()
            .name("dashboard".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => return tracing::error!("dashboard: {e}"),
                    };
                    tokio::select! {
                        r = axum::serve(listener, app) => {
                            if let Err(e) = r {
                                tracing::error!("dashboard: {e}");
                            }
                        }
                        _ = stop => {}
                    }
                })
            })?;
        Ok(Dashboard {
            addr,
            token,
            _stop_server: stop_server,
            _stop_sampler: stop_sampler,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its API's token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The page's address with the token: what a user opens.
    pub fn url(&self) -> String {
        format!("http://{}/?token={}", self.addr, self.token)
    }
}

/// 128 random bits, in hex.
fn new_token() -> anyhow::Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness for a token: {e}"))?;
    Ok(hex::encode(bytes))
}

/// What the handlers and the sampler share.
struct Shared {
    node: Arc<Node>,
    token: String,
    watcher: Mutex<Watcher>,
    /// The last snapshot sent, for a client that connects between two.
    latest: Mutex<Option<Arc<str>>>,
    events: broadcast::Sender<Arc<str>>,
}

impl Shared {
    /// A snapshot of the node now.
    fn sample(&self) -> anyhow::Result<Snapshot> {
        let reports = self.node.ps()?;
        let mut watcher = self.watcher.lock().expect("watcher");
        Ok(watcher.update(
            self.node.id(),
            view::now(),
            reports,
            self.node.domains(),
            self.node.nodes(),
        ))
    }

    /// Samples every `interval` while a client watches the event stream,
    /// until `stop` hangs up.
    fn sample_while_watched(&self, interval: Duration, stop: mpsc::Receiver<()>) {
        while let Err(mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(interval) {
            if self.events.receiver_count() == 0 {
                continue;
            }
            match self.sample().and_then(|s| Ok(serde_json::to_string(&s)?)) {
                Ok(json) => {
                    let json: Arc<str> = json.into();
                    *self.latest.lock().expect("latest") = Some(json.clone());
                    let _ = self.events.send(json);
                }
                Err(e) => {
                    tracing::warn!("dashboard: sampling the node: {}", atoll_node::report(&e))
                }
            }
        }
    }
}

fn router(shared: Arc<Shared>) -> Router {
    let api = Router::new()
        .route("/snapshot", get(snapshot))
        .route("/events", get(events))
        .route("/migrate", post(migrate))
        .route("/kill", post(kill))
        .route_layer(middleware::from_fn_with_state(shared.clone(), authorize));
    Router::new()
        .route("/", get(|| asset("text/html; charset=utf-8", INDEX_HTML)))
        .route("/dashboard.css", get(|| asset("text/css", DASHBOARD_CSS)))
        .route(
            "/dashboard.js",
            get(|| asset("text/javascript", DASHBOARD_JS)),
        )
        .nest("/api", api)
        .with_state(shared)
}

async fn asset(kind: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
}

/// An API error: its status and `{"error": message}`.
fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let message = message.into();
    (status, Json(serde_json::json!({ "error": message }))).into_response()
}

/// Lets a request through when it carries the token, in the query
/// (`token=`, for EventSource, which cannot set headers) or as a bearer.
async fn authorize(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let from_header = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let from_query = request
        .uri()
        .query()
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|kv| kv.strip_prefix("token="));
    match from_header.or(from_query) {
        Some(t) if same(t.as_bytes(), shared.token.as_bytes()) => next.run(request).await,
        Some(_) => error(StatusCode::UNAUTHORIZED, "wrong token"),
        None => error(
            StatusCode::UNAUTHORIZED,
            "no token: open the URL the node printed (or `atoll dashboard` shows)",
        ),
    }
}

/// Compares without stopping at the first difference, so the time taken
/// says nothing about how much of a guess was right.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0, |d, (x, y)| d | (x ^ y)) == 0
}

async fn snapshot(State(shared): State<Arc<Shared>>) -> Response {
    match tokio::task::spawn_blocking(move || shared.sample()).await {
        Ok(Ok(s)) => Json(s).into_response(),
        Ok(Err(e)) => error(StatusCode::SERVICE_UNAVAILABLE, atoll_node::report(&e)),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn events(
    State(shared): State<Arc<Shared>>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let latest = shared.latest.lock().expect("latest").clone();
    let rx = shared.events.subscribe();
    let stream = futures_util::stream::unfold((latest, rx), |(first, mut rx)| async move {
        let json = match first {
            Some(json) => json,
            None => loop {
                match rx.recv().await {
                    Ok(json) => break json,
                    // A slow client misses snapshots, not the stream.
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            },
        };
        let event = Event::default().event("snapshot").data(&*json);
        Some((Ok(event), (None, rx)))
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MigrateRequest {
    pid: Pid,
    to: KernelId,
    mode: Option<Mode>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KillRequest {
    pid: Pid,
    signal: Option<i32>,
}

/// The request's JSON body as `T`, or what is wrong with it.
fn parse<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|e| e.to_string())
}

async fn migrate(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let r: MigrateRequest = match parse(&body) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let node = shared.node.clone();
    ask(move || node.migrate(r.pid, r.to, r.mode)).await
}

async fn kill(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let r: KillRequest = match parse(&body) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let node = shared.node.clone();
    let signal = r.signal.unwrap_or(status::SIGKILL);
    ask(move || {
        node.kill(r.pid, signal)?;
        Ok(serde_json::json!({ "killed": r.pid, "signal": signal }))
    })
    .await
}

/// Runs a request to the node (which blocks until the kernels answer) off
/// the server's thread; its answer as JSON, or 409 with the node's reason.
async fn ask<T: serde::Serialize + Send + 'static>(
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> Response {
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(answer)) => Json(answer).into_response(),
        Ok(Err(e)) => error(StatusCode::CONFLICT, atoll_node::report(&e)),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"abcd", b"abcd"));
        assert!(!same(b"abcd", b"abce"));
        assert!(!same(b"abc", b"abcd"));
        assert!(!same(b"", b"a"));
    }

    #[test]
    fn tokens_are_random_and_long() {
        let (a, b) = (new_token().unwrap(), new_token().unwrap());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }

    #[test]
    fn requests_take_the_strings_the_cli_takes() {
        let r: MigrateRequest =
            parse(br#"{"pid": "0.1:4:0", "to": "0.0", "mode": "copy"}"#).unwrap();
        assert_eq!(r.pid, Pid::new(KernelId::new(0, 1), 4, 0));
        assert_eq!(r.to, KernelId::new(0, 0));
        assert_eq!(r.mode, Some(Mode::Copy));
        for bad in [
            &br#"{"pid": "nonsense", "to": "0.0"}"#[..],
            br#"{"pid": "0.1:4:0", "to": "0.0", "mode": "teleport"}"#,
            br#"{"pid": "0.1:4:0"}"#,
            br#"{"pid": "0.1:4:0", "to": "0.0", "extra": 1}"#,
            b"not json",
        ] {
            assert!(parse::<MigrateRequest>(bad).is_err());
        }
    }
}
