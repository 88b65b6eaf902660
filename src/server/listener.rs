//! The accept loop and the life of each connection, TLS or plain: a cap on
//! open connections (at the cap, the connection idle the longest makes
//! room, so holding idle connections blocks no one), a deadline for the
//! TLS handshake, for the first request, for writing an answer and for
//! keep-alive idleness (HTTP/1.1 and HTTP/2 alike, from what the
//! connection's requests do, not from its bytes), HTTP/2 stream and window
//! limits with keep-alive pings, and a stop that lets requests in flight
//! finish and then closes what is left. Request bodies are bounded by
//! [`super::body`], which reads the per-connection allowance and the
//! listener's budget that this module hands each request.
//!
//! Every connection that a rule closes or refuses is counted by rule in
//! [`ConnMetrics`] (`conn_metrics.rs`).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use prometheus_client::metrics::gauge::Gauge;
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore, watch};
use tokio_rustls::TlsAcceptor;
use tracing::Instrument as _;

use super::body::{BodyBudget, Guarded};
pub use super::conn_metrics::{ConnMetrics, ListenerLabels, Rule};
use super::limits::Limits;

/// How a listener's connections speak.
#[derive(Clone)]
pub enum Transport {
    Tls(Arc<ServerConfig>),
    /// Plain HTTP (the admin port).
    Plain,
}

/// One listener: its name (a metric label), its bounds and its metrics.
#[derive(Clone, Debug)]
pub struct Listener {
    /// `webhook`, `extender` or `admin`.
    pub name: &'static str,
    pub limits: Limits,
    pub metrics: ConnMetrics,
}

/// What the requests of one connection are doing, for its deadlines.
#[derive(Debug)]
struct ConnActivity {
    opened: Instant,
    /// Milliseconds after `opened` of the last event: the handshake's end,
    /// a request's start, an answer's start or end.
    last: AtomicU64,
    /// The TLS handshake is done (at once for plain connections).
    ready: AtomicBool,
    in_flight: AtomicUsize,
    /// Answers being written.
    writing: AtomicUsize,
    requests: AtomicU64,
    evicted: AtomicBool,
    changed: Notify,
}

impl ConnActivity {
    fn new() -> Self {
        Self {
            opened: Instant::now(),
            last: AtomicU64::new(0),
            ready: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            writing: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
            evicted: AtomicBool::new(false),
            changed: Notify::new(),
        }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(ms, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.opened + Duration::from_millis(self.last.load(Ordering::Relaxed))
    }

    fn handshake_done(&self) {
        self.touch();
        self.ready.store(true, Ordering::Release);
    }

    /// A request starts. The watchdog need not wake: a deadline it sleeps
    /// towards is checked again when it comes.
    fn started(self: &Arc<Self>, gauge: &Gauge) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.touch();
        gauge.inc();
        InFlight(self.clone(), gauge.clone())
    }

    /// An answer starts to be written; taken before its request's
    /// [`InFlight`] ends, so that the connection is never seen idle
    /// between the two.
    fn writing(self: &Arc<Self>) -> Writing {
        self.writing.fetch_add(1, Ordering::AcqRel);
        Writing(self.clone())
    }

    /// When the connection is due to be closed, and by which rule: none
    /// while a request is in flight (its body and handler have deadlines
    /// of their own) or its TLS handshake runs (it has its own).
    fn deadline(&self, limits: &Limits) -> Option<(Instant, Rule)> {
        if self.in_flight.load(Ordering::Acquire) > 0 || !self.ready.load(Ordering::Acquire) {
            return None;
        }
        let last = self.last();
        if self.writing.load(Ordering::Acquire) > 0 {
            // No piece of an answer taken for this long.
            return Some((last + limits.body, Rule::WriteTimeout));
        }
        if self.requests.load(Ordering::Relaxed) == 0 {
            return Some((last + limits.header, Rule::HeaderTimeout));
        }
        Some((last + limits.idle, Rule::IdleTimeout))
    }

    /// Whether the connection can be closed to make room: nothing in
    /// flight and no answer being written (a handshake or a wait for the
    /// first request counts as idle).
    fn evictable(&self) -> bool {
        !self.evicted.load(Ordering::Acquire)
            && self.in_flight.load(Ordering::Acquire) == 0
            && self.writing.load(Ordering::Acquire) == 0
    }

    fn evict(&self) {
        self.evicted.store(true, Ordering::Release);
        self.changed.notify_one();
    }

    fn is_evicted(&self) -> bool {
        self.evicted.load(Ordering::Acquire)
    }

    /// Resolves once the connection is evicted.
    async fn eviction(&self) {
        while !self.is_evicted() {
            self.changed.notified().await;
        }
    }
}

/// A request in flight on a connection; its end counts as activity.
struct InFlight(Arc<ConnActivity>, Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        // The last request ends: the watchdog, which had no deadline while
        // requests were in flight, sets the next one.
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.changed.notify_one();
        }
        self.1.dec();
    }
}

/// An answer being written; dropped when it is sent, or dropped unsent.
struct Writing(Arc<ConnActivity>);

impl super::body::Guard for Writing {
    /// The client takes the answer: the write deadline runs from here.
    fn progress(&self) {
        self.0.touch();
    }
}

impl Drop for Writing {
    fn drop(&mut self) {
        self.0.touch();
        if self.0.writing.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.changed.notify_one();
        }
    }
}

/// The open connections of a listener, for eviction at the cap.
#[derive(Debug, Default)]
struct OpenConns {
    next: u64,
    conns: HashMap<u64, Arc<ConnActivity>>,
}

impl OpenConns {
    fn insert(&mut self, activity: Arc<ConnActivity>) -> u64 {
        self.next += 1;
        self.conns.insert(self.next, activity);
        self.next
    }

    /// Evicts the connection idle the longest; whether there was one.
    fn evict_longest_idle(&self) -> bool {
        match self
            .conns
            .values()
            .filter(|a| a.evictable())
            .min_by_key(|a| a.last())
        {
            Some(a) => {
                a.evict();
                true
            }
            None => false,
        }
    }
}

/// The router of one connection: each request carries the connection's
/// [`BodyBudget`] and counts as the connection's activity until its
/// answer has been written.
#[derive(Clone)]
struct ConnService {
    router: Router,
    activity: Arc<ConnActivity>,
    budget: BodyBudget,
    /// The listener's `gpugate_requests_in_flight`.
    in_flight: Gauge,
}

impl tower::Service<Request<hyper::body::Incoming>> for ConnService {
    type Response = axum::response::Response;
    type Error = std::convert::Infallible;
    type Future = std::pin::Pin<
        Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send + 'static>,
    >;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<hyper::body::Incoming>) -> Self::Future {
        let in_flight = self.activity.started(&self.in_flight);
        let activity = self.activity.clone();
        let mut req = req.map(Body::new);
        req.extensions_mut().insert(self.budget.clone());
        let call = tower::ServiceExt::oneshot(self.router.clone(), req);
        Box::pin(async move {
            let response = call.await;
            let writing = activity.writing();
            drop(in_flight);
            response.map(|r| r.map(|body| Body::new(Guarded::new(body, writing))))
        })
    }
}

/// How long the accept loop waits for an evicted connection's slot.
const EVICTION_WAIT: Duration = Duration::from_millis(200);

/// Serves `router` on `listener` until `stop` resolves; then stops
/// accepting, lets requests in flight finish for up to `limits.drain`, and
/// closes what is left.
pub async fn serve(
    tcp: TcpListener,
    transport: Transport,
    router: Router,
    listener: Listener,
    stop: impl Future<Output = ()>,
) {
    let limits = listener.limits;
    let name = listener.name;
    let builder = Arc::new(http_builder(&limits));
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let budget = Arc::new(Semaphore::new(limits.body_budget));
    let registry = Arc::new(std::sync::Mutex::new(OpenConns::default()));
    let (phase_tx, phase) = watch::channel(Phase::Serving);
    let acceptor = match &transport {
        Transport::Tls(config) => Some(TlsAcceptor::from(config.clone())),
        Transport::Plain => None,
    };
    let labels = ListenerLabels { listener: name };
    let open = listener.metrics.open.get_or_create(&labels).clone();
    let accepted = listener.metrics.accepted.get_or_create(&labels).clone();
    let in_flight = listener.metrics.in_flight.get_or_create(&labels).clone();
    tokio::pin!(stop);
    loop {
        let (tcp, peer) = tokio::select! {
            _ = &mut stop => break,
            accepted = tcp.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: back off, keep serving.
                    tracing::warn!(listener = name, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                let evicted = lock(&registry).evict_longest_idle();
                let slot = if evicted {
                    listener.metrics.closed(name, Rule::Evicted);
                    tokio::time::timeout(EVICTION_WAIT, slots.clone().acquire_owned())
                        .await
                        .ok()
                        .and_then(Result::ok)
                } else {
                    None
                };
                match slot {
                    Some(slot) => slot,
                    None => {
                        // Every connection is busy: closed at once, so the
                        // client learns now and the backlog does not fill.
                        listener.metrics.closed(name, Rule::MaxConnections);
                        tracing::debug!(listener = name, %peer, "connection refused: maxConnections");
                        continue;
                    }
                }
            }
        };
        accepted.inc();
        // Answers are written in several pieces (TLS records, a large
        // /filter answer is hundreds of KiB): with Nagle's algorithm the
        // last piece can wait for the client's delayed ACK, about 40 ms.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "cannot set TCP_NODELAY");
        }
        let activity = Arc::new(ConnActivity::new());
        let id = lock(&registry).insert(activity.clone());
        let conn = Conn {
            listener: listener.clone(),
            builder: builder.clone(),
            router: router.clone(),
            budget: BodyBudget::new(
                limits.connection_body,
                budget.clone(),
                limits,
                listener.metrics.clone(),
                name,
            ),
            phase: phase.clone(),
            activity,
            in_flight: in_flight.clone(),
        };
        let acceptor = acceptor.clone();
        let (open, registry) = (open.clone(), registry.clone());
        open.inc();
        // Every event of the connection (handshake, requests, close)
        // carries its listener and peer.
        let span = tracing::info_span!("connection", listener = name, %peer);
        tokio::spawn(
            async move {
                conn.run(tcp, acceptor).await;
                lock(&registry).conns.remove(&id);
                open.dec();
                drop(slot);
            }
            .instrument(span),
        );
    }
    drop(tcp);
    let _ = phase_tx.send(Phase::Draining);
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let drained = tokio::time::timeout(limits.drain, slots.acquire_many(all)).await;
    if drained.is_err() {
        let _ = phase_tx.send(Phase::Closing);
        tracing::warn!(
            listener = name,
            "stopped with requests still in flight after the drain timeout"
        );
        // Give the tasks a moment to drop their connections.
        let _ = tokio::time::timeout(Duration::from_secs(1), slots.acquire_many(all)).await;
    }
}

fn lock(registry: &std::sync::Mutex<OpenConns>) -> std::sync::MutexGuard<'_, OpenConns> {
    registry.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the listener asks of its connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Serving,
    /// Finish the requests in flight, take no new ones.
    Draining,
    /// Close now.
    Closing,
}

fn http_builder(limits: &Limits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        // Not hyper's: it also ends kept-alive connections that wait for
        // their next request, after `header` rather than `idle`, and a Go
        // client that reuses one at that moment fails its request. The
        // watchdog in `Conn::http` closes a connection whose first request
        // does not arrive within `header` and an idle one after `idle`;
        // headers in between wait at most that long in the read buffer.
        .header_read_timeout(None)
        .keep_alive(true)
        // Headers and the body data not yet read are held here (hyper's
        // default grows to 400 KiB); 16 KiB is far above any request head
        // kube-apiserver or kube-scheduler sends.
        .max_buf_size(16 * 1024);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.http2_max_streams)
        // Data a client may send before gpugate reads it: per stream and
        // for the whole connection. Bodies are read as they come and
        // refused when the budget is full, never left unread.
        .initial_stream_window_size(64 * 1024)
        .initial_connection_window_size(64 * 1024)
        .max_send_buf_size(64 * 1024)
        .max_header_list_size(16 * 1024)
        .keep_alive_interval(limits.http2_keep_alive_interval)
        .keep_alive_timeout(limits.http2_keep_alive_timeout);
    builder
}

/// One accepted connection.
struct Conn {
    listener: Listener,
    builder: Arc<auto::Builder<TokioExecutor>>,
    router: Router,
    budget: BodyBudget,
    phase: watch::Receiver<Phase>,
    activity: Arc<ConnActivity>,
    /// The listener's `gpugate_requests_in_flight`.
    in_flight: Gauge,
}

impl Conn {
    async fn run(self, tcp: TcpStream, acceptor: Option<TlsAcceptor>) {
        let Some(acceptor) = acceptor else {
            self.activity.handshake_done();
            return self.http(tcp).await;
        };
        let name = self.listener.name;
        let handshake = tokio::time::timeout(self.listener.limits.handshake, acceptor.accept(tcp));
        let done = tokio::select! {
            done = handshake => done,
            () = self.activity.eviction() => return,
        };
        match done {
            Ok(Ok(tls)) => {
                self.activity.handshake_done();
                self.http(tls).await;
            }
            Ok(Err(e)) => {
                tracing::debug!(listener = name, error = %e, "TLS handshake failed");
                self.listener.metrics.closed(name, Rule::HandshakeFailed);
            }
            Err(_) => {
                tracing::debug!(listener = name, "TLS handshake timed out");
                self.listener.metrics.closed(name, Rule::HandshakeTimeout);
            }
        }
    }

    async fn http<IO>(mut self, io: IO)
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let activity = self.activity.clone();
        let service = hyper_util::service::TowerToHyperService::new(ConnService {
            router: self.router.clone(),
            activity: activity.clone(),
            budget: self.budget.clone(),
            in_flight: self.in_flight.clone(),
        });
        let conn = self.builder.serve_connection(TokioIo::new(io), service);
        tokio::pin!(conn);
        let limits = self.listener.limits;
        let name = self.listener.name;
        let mut draining = false;
        loop {
            if activity.is_evicted() {
                return;
            }
            let deadline = activity.deadline(&limits);
            let sleep = async {
                match deadline {
                    Some((at, _)) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(listener = name, error = %e, "connection ended with an error");
                    }
                    return;
                }
                () = sleep => {
                    // Re-checked: a request may have started just now.
                    if let Some((at, rule)) = activity.deadline(&limits)
                        && at <= Instant::now()
                    {
                        self.listener.metrics.closed(name, rule);
                        tracing::debug!(listener = name, rule = rule.as_str(), "closing connection");
                        return;
                    }
                }
                () = activity.changed.notified() => {}
                changed = self.phase.changed() => {
                    let phase = if changed.is_ok() { *self.phase.borrow() } else { Phase::Closing };
                    match phase {
                        Phase::Serving => {}
                        // The deadlines still hold while draining: an idle
                        // or stalled connection does not hold the drain up.
                        Phase::Draining if !draining => {
                            draining = true;
                            conn.as_mut().graceful_shutdown();
                        }
                        Phase::Draining => {}
                        Phase::Closing => {
                            self.listener.metrics.closed(name, Rule::DrainTimeout);
                            return;
                        }
                    }
                }
            }
        }
    }
}
