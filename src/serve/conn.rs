//! The server's connections: at most [`Limits::max_connections`] at once (more wait to be
//! accepted), at most [`Limits::max_per_client`] of them from one client address (a connection
//! past that share is closed as soon as it is accepted, without a byte read or written, and
//! the place it would have taken goes to the next one accepted), each closed when its client
//! takes longer than [`Limits::client_timeout`] to send a request's headers (a slow or idle
//! client: the wait between keep-alive requests counts too) or to take the bytes of an answer
//! (a stalled reader). A request's body must arrive whole within the client timeout of its
//! headers (a total, which a trickle of bytes does not reset: past it, 408 and the connection
//! closed) and is at most [`MAX_BODY`] bytes (413 past it, at once when its `Content-Length`
//! says so); a body sent to a route that takes none is not read. A client can therefore hold
//! neither a connection nor the memory behind it for ever, nor one address more than its
//! share; memory per connection is bounded by hyper's buffer, one piece of a body in flight
//! and [`MAX_BODY`].

use axum::response::IntoResponse as _;
use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{header, Request, Response, StatusCode};
use hyper::body::{Bytes, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower_http::limit::RequestBodyLimit;

/// The most bytes a request's body may have: the only route that takes one, paths-info, takes
/// a form of paths. Past it the answer is 413.
pub(crate) const MAX_BODY: usize = 1 << 20;

/// How many clients a server takes, and how long it waits for each.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once; more wait to be accepted. Default 1,024.
    pub max_connections: usize,
    /// Connections open at once from one client address (taken as at most
    /// `max_connections`); one more from that address is closed as soon as it is accepted.
    /// Default 32.
    pub max_per_client: usize,
    /// Longest wait for a request's headers (or the next request on a kept-alive connection),
    /// for its whole body once the headers have come, and for a client to take bytes of an
    /// answer. Default 60 s.
    pub client_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 1024,
            max_per_client: 32,
            client_timeout: Duration::from_secs(60),
        }
    }
}

/// Serves `app` on `listener` within `limits` until `shutdown` resolves; connections still
/// open then finish their answer (at most `limits.client_timeout` more).
pub(crate) async fn run(
    listener: TcpListener,
    app: axum::Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let max = limits.max_connections.max(1);
    let per_client = limits.max_per_client.clamp(1, max);
    let permits = Arc::new(Semaphore::new(max));
    let clients = Arc::new(Clients::default());
    let app = TowerToHyperService::new(RequestBodyLimit::new(app, MAX_BODY));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    'serve: loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => p.map_err(io::Error::other)?,
            () = &mut shutdown => break,
        };
        // The permit goes to the first connection whose address has room: one from an
        // address holding its share is closed at once, and the next is accepted.
        let (stream, slot) = loop {
            let (stream, peer) = tokio::select! {
                r = listener.accept() => match r {
                    Ok(accepted) => accepted,
                    // Out of descriptors, a connection reset before it was accepted…: the
                    // listener itself is fine; a moment's pause lets descriptors be freed.
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                () = &mut shutdown => break 'serve,
            };
            if let Some(slot) = clients.take(peer.ip(), per_client) {
                break (stream, slot);
            }
        };
        let _ = stream.set_nodelay(true);
        let held = Held {
            _permit: permit,
            _slot: slot,
        };
        let io = TokioIo::new(Timed::new(stream, limits.client_timeout, held));
        let service = Requests {
            app: app.clone(),
            timeout: limits.client_timeout,
        };
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.client_timeout)
            .keep_alive(true)
            .serve_connection(io, service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            // (A connection's error is its client's: a reset, a timeout.)
            let _ = conn.await;
        });
    }
    drop(listener);
    // Answers in flight finish, within the time a client is given anyway.
    let _ = tokio::time::timeout(limits.client_timeout, graceful.shutdown()).await;
    Ok(())
}

/// The routes for one connection's requests: each body bounded by [`MAX_BODY`] (`app`'s own
/// layer) and given `timeout` from its request's headers to arrive whole; a request whose body
/// did not is answered 408 and its connection closed.
#[derive(Clone)]
struct Requests {
    app: TowerToHyperService<RequestBodyLimit<axum::Router>>,
    timeout: Duration,
}

impl hyper::service::Service<Request<Incoming>> for Requests {
    type Response = Response<axum::body::Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let (timeout, expired) = (self.timeout, Arc::new(AtomicBool::new(false)));
        let answer = self
            .app
            .call(req.map(|body| Deadline::new(body, timeout, expired.clone())));
        Box::pin(async move {
            let answer = answer.await?;
            if expired.load(Ordering::Relaxed) {
                return Ok(too_slow(timeout));
            }
            if answer.status() == StatusCode::PAYLOAD_TOO_LARGE {
                // The limit's own answer, said as every other refusal is (JSON).
                return Ok(super::error::Refusal::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("a request's body is at most {MAX_BODY} bytes"),
                )
                .into_response());
            }
            Ok(answer.map(axum::body::Body::new))
        })
    }
}

/// The answer to a request whose body did not arrive in time: 408, and the connection closed.
fn too_slow(timeout: Duration) -> Response<axum::body::Body> {
    let text = serde_json::json!({
        "error": format!("the request's body did not arrive within {} s", timeout.as_secs_f64())
    })
    .to_string();
    let mut r = Response::new(axum::body::Body::from(text));
    *r.status_mut() = StatusCode::REQUEST_TIMEOUT;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    h.insert(
        header::CONNECTION,
        header::HeaderValue::from_static("close"),
    );
    r
}

/// Why a request's body ended early: it had not all arrived by its deadline.
#[derive(Debug, thiserror::Error)]
#[error("the request's body did not arrive within {0:?}")]
struct BodyTimedOut(Duration);

/// A request's body that fails once `timeout` has passed since the request's headers came,
/// however steadily its bytes arrive (a total for the body, not a wait per piece).
struct Deadline<B> {
    body: B,
    timeout: Duration,
    deadline: tokio::time::Instant,
    /// Armed when the body is first read (a body never read costs no timer).
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Set once the deadline has cut the body.
    expired: Arc<AtomicBool>,
}

impl<B> Deadline<B> {
    fn new(body: B, timeout: Duration, expired: Arc<AtomicBool>) -> Deadline<B> {
        Deadline {
            body,
            timeout,
            deadline: tokio::time::Instant::now() + timeout,
            sleep: None,
            expired,
        }
    }
}

impl<B> hyper::body::Body for Deadline<B>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::BoxError>>> {
        let deadline = self.deadline;
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        // The deadline first: a body that is always ready is cut too.
        if sleep.as_mut().poll(cx).is_ready() {
            self.expired.store(true, Ordering::Relaxed);
            return Poll::Ready(Some(Err(Box::new(BodyTimedOut(self.timeout)))));
        }
        Pin::new(&mut self.body)
            .poll_frame(cx)
            .map(|f| f.map(|r| r.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The connections open from each client address.
#[derive(Debug, Default)]
struct Clients {
    open: Mutex<HashMap<IpAddr, usize>>,
}

impl Clients {
    /// A place for one more connection from `ip`, unless it already holds `max`.
    fn take(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<ClientSlot> {
        // An IPv4 client of a dual-stack listener is the same client as over IPv4.
        let ip = ip.to_canonical();
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let n = open.entry(ip).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(ClientSlot {
            clients: self.clone(),
            ip,
        })
    }
}

/// One connection's place in its address's share, given back when it closes.
#[derive(Debug)]
struct ClientSlot {
    clients: Arc<Clients>,
    ip: IpAddr,
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self
            .clients
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = open.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// What an open connection holds until it closes: its place among all connections and among
/// its address's.
struct Held {
    _permit: OwnedSemaphorePermit,
    _slot: ClientSlot,
}

/// A client's connection: writes that make no progress for `timeout` fail (the client stopped
/// reading), and its places are given back when it closes.
struct Timed {
    stream: TcpStream,
    timeout: Duration,
    /// Armed while a write waits for the client.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
    _held: Held,
}

impl Timed {
    fn new(stream: TcpStream, timeout: Duration, held: Held) -> Timed {
        Timed {
            stream,
            timeout,
            stalled: None,
            _held: held,
        }
    }

    /// After a write returned `Pending`: an error once it has waited `timeout` in all.
    fn check_stall(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let timeout = self.timeout;
        let sleep = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took no bytes for too long",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn progressed<T>(
        &mut self,
        r: Poll<io::Result<T>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<T>> {
        match r {
            Poll::Ready(v) => {
                self.stalled = None;
                Poll::Ready(v)
            }
            Poll::Pending => match self.check_stall(cx) {
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                _ => Poll::Pending,
            },
        }
    }
}

impl AsyncRead for Timed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        // Reads are bounded by hyper's header timeout and each body's deadline; a client that
        // sends nothing while its answer streams is not at fault.
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Timed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.progressed(r, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.progressed(r, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.stream).poll_flush(cx);
        self.progressed(r, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
