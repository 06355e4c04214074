//! The server's connections: at most [`Limits::max_connections`] at once (more wait to be
//! accepted), each closed when its client takes longer than [`Limits::client_timeout`] to send
//! a request's headers (a slow or idle client: the wait between keep-alive requests counts
//! too) or to take the bytes of an answer (a stalled reader). A client can therefore hold
//! neither a connection nor the memory behind it for ever; memory per connection is bounded by
//! hyper's buffer and one piece of a body in flight.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How many clients a server takes, and how long it waits for each.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once; more wait to be accepted. Default 1,024.
    pub max_connections: usize,
    /// Longest wait for a request's headers (or the next request on a kept-alive connection),
    /// and for a client to take bytes of an answer. Default 60 s.
    pub client_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 1024,
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
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => p.map_err(io::Error::other)?,
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                // Out of descriptors, a connection reset before it was accepted…: the
                // listener itself is fine; a moment's pause lets descriptors be freed.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let io = TokioIo::new(Timed::new(stream, limits.client_timeout, permit));
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
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

/// A client's connection: writes that make no progress for `timeout` fail (the client stopped
/// reading), and its permit is returned when it closes.
struct Timed {
    stream: TcpStream,
    timeout: Duration,
    /// Armed while a write waits for the client.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
    _permit: OwnedSemaphorePermit,
}

impl Timed {
    fn new(stream: TcpStream, timeout: Duration, permit: OwnedSemaphorePermit) -> Timed {
        Timed {
            stream,
            timeout,
            stalled: None,
            _permit: permit,
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
        // Reads are bounded by hyper's header timeout; a client that sends nothing while its
        // answer streams is not at fault.
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
