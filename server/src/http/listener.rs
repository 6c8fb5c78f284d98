//! The HTTP listener: hyper's HTTP/1.1 connections driving the poem endpoint,
//! with the limits poem's own `Server` does not have (ARCHITECTURE.md, "HTTP
//! connections"). poem's idle timeout only notices a socket with no traffic at
//! all, so a head or body trickled a byte at a time kept a connection forever;
//! and it has no cap on connections.
//!
//! Each connection is either *waiting* for a request (new, or kept alive
//! after a response) or *busy* (a request's response not yet finished). While
//! waiting, it is closed when no byte arrives for the idle timeout, or when the
//! head that began arriving is not complete within the header-read timeout.
//! While busy, the request's body has its own deadline (`http::body_limit`),
//! and the handler's work is bounded by its own limits, not here: a live
//! stream is busy for as long as it is open. In either phase, a write that
//! makes no progress (the client stopped reading and the socket's send
//! buffer is full) for the write timeout closes the connection, so a client
//! that asks and never reads cannot hold a response, a connection slot and
//! their memory for longer.

use std::{
    convert::Infallible,
    future::Future,
    io,
    net::SocketAddr,
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard},
    task::{Context, Poll},
    time::Duration,
};

use poem::{
    endpoint::BoxEndpoint,
    http,
    web::{LocalAddr, RemoteAddr},
    Addr, Endpoint, EndpointExt, IntoEndpoint,
};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::{watch, Semaphore},
    task::JoinSet,
    time::Instant,
};

use crate::app::instruments;

/// The connection limits; `config::HttpConfig` reads them from the command line.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// From a request's first byte to the end of its head.
    pub header_read: Duration,
    /// Waiting for a request with no byte received.
    pub idle: Duration,
    /// Connections served at once; one more is closed as soon as it is accepted.
    pub max_connections: usize,
    /// A write that has taken no byte for this long closes the connection.
    pub write: Duration,
}

/// Serves `endpoint` on `listener` until `signal`, then stops accepting, lets
/// requests in flight finish for up to `grace` and closes what remains.
pub async fn serve<E>(
    listener: TcpListener,
    endpoint: E,
    limits: Limits,
    signal: impl Future<Output = ()>,
    grace: Duration,
) -> io::Result<()>
where
    E: IntoEndpoint,
    E::Endpoint: 'static,
{
    let endpoint: Arc<BoxEndpoint<'static>> =
        Arc::new(endpoint.into_endpoint().map_to_response().boxed());
    let local = listener.local_addr()?;
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let (stop, stopped) = watch::channel(false);
    let mut connections = JoinSet::new();
    tokio::pin!(signal);
    loop {
        tokio::select! {
            _ = &mut signal => break,
            accepted = listener.accept() => {
                let (socket, remote) = match accepted {
                    Ok(accepted) => accepted,
                    Err(err) => {
                        // Out of file descriptors, mostly: pause rather than spin.
                        tracing::warn!(error = %err, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                // Over the cap the connection is closed at once: it costs
                // nothing to hold, and the client (or its load balancer) can
                // go elsewhere instead of queueing behind slow connections.
                let Ok(permit) = permits.clone().try_acquire_owned() else {
                    instruments::http_connection_refused();
                    drop(socket);
                    continue;
                };
                let endpoint = endpoint.clone();
                let stopped = stopped.clone();
                connections.spawn(async move {
                    let _permit = permit;
                    let _open = instruments::http_connection_opened();
                    connection(socket, local, remote, endpoint, limits, stopped).await;
                });
            }
            Some(done) = connections.join_next(), if !connections.is_empty() => log_panic(done),
        }
    }
    drop(listener);
    stop.send_replace(true);
    let drained = tokio::time::timeout(grace, async {
        while let Some(done) = connections.join_next().await {
            log_panic(done);
        }
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            connections = connections.len(),
            "shutdown grace over; closing connections still busy"
        );
        connections.shutdown().await;
    }
    Ok(())
}

fn log_panic(done: Result<(), tokio::task::JoinError>) {
    if let Err(err) = done {
        if err.is_panic() {
            tracing::error!(error = %err, "a connection's task panicked");
        }
    }
}

/// Where a connection stands, for its supervisor.
///
/// Shared by the connection's socket, its requests and its supervisor, all
/// on the connection's own task, so the lock is never contended. Changes do
/// not wake the supervisor: a request's start, its end and the first byte
/// of the next head each happen several times per request, and a wake-up,
/// a timer set and a timer cancelled for each of them cost more than the
/// rest of the listener. The supervisor looks instead at times it chose so
/// that no deadline can pass unseen ([`Phase::next_check`]).
#[derive(Debug, Clone, Copy)]
struct Phase {
    /// Requests whose response is not finished.
    busy: usize,
    /// When the connection began waiting for its next request.
    waiting_since: Instant,
    /// The first byte read while waiting: a request's head has begun.
    head_started: Option<Instant>,
    /// Since when a write has been waiting for room in the socket's send
    /// buffer, no byte taken.
    write_blocked_since: Option<Instant>,
}

impl Phase {
    /// When the connection is to be closed if nothing changes, and why.
    fn deadline(&self, limits: &Limits) -> Option<(Instant, &'static str)> {
        if let Some(blocked) = self.write_blocked_since {
            Some((blocked + limits.write, "write_timeout"))
        } else if self.busy > 0 {
            None
        } else if let Some(started) = self.head_started {
            Some((started + limits.header_read, "header_read_timeout"))
        } else {
            Some((self.waiting_since + limits.idle, "idle_timeout"))
        }
    }

    /// When the supervisor, looking at `now`, looks next: at the deadline,
    /// but no later than the shortest limit from now. Every change after
    /// `now` (a request starts; one ends, and the idle time starts; a head
    /// begins; a write blocks) sets a deadline at least the shortest limit
    /// after the change, so never before this check: the check sees each
    /// deadline on time.
    fn next_check(&self, limits: &Limits, now: Instant) -> Instant {
        let bound = now + limits.header_read.min(limits.idle).min(limits.write);
        match self.deadline(limits) {
            Some((at, _)) => at.min(bound),
            None => bound,
        }
    }
}

type SharedPhase = Arc<Mutex<Phase>>;

fn lock(phase: &Mutex<Phase>) -> MutexGuard<'_, Phase> {
    // A panic while holding it left a plain value behind: use it.
    phase.lock().unwrap_or_else(|e| e.into_inner())
}

async fn connection(
    socket: TcpStream,
    local: SocketAddr,
    remote: SocketAddr,
    endpoint: Arc<BoxEndpoint<'static>>,
    limits: Limits,
    mut stopped: watch::Receiver<bool>,
) {
    socket.set_nodelay(true).ok();
    let opened = Instant::now();
    let phase: SharedPhase = Arc::new(Mutex::new(Phase {
        busy: 0,
        waiting_since: opened,
        head_started: None,
        write_blocked_since: None,
    }));
    let check = tokio::time::sleep_until(lock(&phase).next_check(&limits, opened));
    let io = hyper_util::rt::TokioIo::new(Watched {
        inner: socket,
        phase: phase.clone(),
    });
    let supervised = phase.clone();
    let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
        let endpoint = endpoint.clone();
        let busy = Busy::start(phase.clone());
        async move {
            let req = poem::Request::from((
                req,
                LocalAddr(Addr::SocketAddr(local)),
                RemoteAddr(Addr::SocketAddr(remote)),
                poem::http::uri::Scheme::HTTP,
            ));
            let response: http::Response<_> = endpoint.get_response(req).await.into();
            // Busy until the body is sent (or dropped): a stream stays busy.
            Ok::<_, Infallible>(response.map(|body| {
                http_body_util::combinators::BoxBody::new(Finishing { body, _busy: busy })
            }))
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        // Our own supervisor below times the head, from its first byte.
        .header_read_timeout(None)
        // No read while a response is under way: hyper's check for the
        // client hanging up mid-response reserves an 8 KiB read buffer per
        // connection, a quarter of what an open stream held (heap profile:
        // bench/findings/stream.md). A client gone is noticed at the next
        // write instead (a stream's heartbeat or item, a handler's answer),
        // and a handler is never cancelled halfway by a hang-up.
        .half_close(true)
        .serve_connection(io, service)
        .with_upgrades();
    tokio::pin!(conn, check);
    let stop = stopped.wait_for(|stop| *stop);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = check.as_mut() => {
                let now = Instant::now();
                let phase = *lock(&supervised);
                match phase.deadline(&limits) {
                    Some((at, reason)) if at <= now => {
                        tracing::debug!(%remote, reason, "closing connection");
                        instruments::http_connection_timed_out(reason);
                        // Waiting, so no request is lost; or a client that
                        // takes nothing of its answer: just close.
                        return;
                    }
                    _ => check.as_mut().reset(phase.next_check(&limits, now)),
                }
            }
            _ = stop.as_mut() => break,
        }
    }
    // Shutdown: hyper closes the connection if it is waiting, or after the
    // response in flight; the server's grace bounds the wait.
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}

/// Marks a connection busy from a request's head to the end of its response.
struct Busy(SharedPhase);

impl Busy {
    fn start(phase: SharedPhase) -> Self {
        {
            let mut p = lock(&phase);
            p.busy += 1;
            p.head_started = None;
        }
        Busy(phase)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let mut p = lock(&self.0);
        p.busy -= 1;
        if p.busy == 0 {
            p.waiting_since = Instant::now();
            p.head_started = None;
        }
    }
}

/// A response body that keeps its connection busy while it lives.
struct Finishing<B> {
    body: B,
    _busy: Busy,
}

impl<B> http_body::Body for Finishing<B>
where
    B: http_body::Body + Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The socket, noting the first byte that arrives while the connection
/// waits, and since when a write has been blocked.
struct Watched {
    inner: TcpStream,
    phase: SharedPhase,
}

impl Watched {
    /// Notes whether a write took bytes (`Ready`) or waits for room
    /// (`Pending`). A slow reader that takes a byte now and then resets the
    /// clock: only a client that takes nothing is cut off.
    fn note_write<T>(&self, polled: Poll<T>) -> Poll<T> {
        let blocked = polled.is_pending();
        let mut p = lock(&self.phase);
        match (blocked, p.write_blocked_since) {
            (true, None) => p.write_blocked_since = Some(Instant::now()),
            (false, Some(_)) => p.write_blocked_since = None,
            _ => {}
        }
        polled
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            let mut p = lock(&self.phase);
            if p.busy == 0 && p.head_started.is_none() {
                p.head_started = Some(Instant::now());
            }
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.note_write(polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.note_write(polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        header_read: Duration::from_secs(2),
        idle: Duration::from_secs(30),
        max_connections: 1,
        write: Duration::from_secs(5),
    };

    #[test]
    fn a_waiting_connection_is_timed_by_idleness_until_a_head_begins() {
        let now = Instant::now();
        let mut phase = Phase {
            busy: 0,
            waiting_since: now,
            head_started: None,
            write_blocked_since: None,
        };
        assert_eq!(
            phase.deadline(&LIMITS),
            Some((now + LIMITS.idle, "idle_timeout"))
        );
        let started = now + Duration::from_secs(1);
        phase.head_started = Some(started);
        assert_eq!(
            phase.deadline(&LIMITS),
            Some((started + LIMITS.header_read, "header_read_timeout"))
        );
        phase.busy = 1;
        assert_eq!(phase.deadline(&LIMITS), None);
    }

    #[test]
    fn a_blocked_write_is_timed_whether_the_connection_is_busy_or_waiting() {
        let now = Instant::now();
        let blocked = now + Duration::from_secs(1);
        for busy in [0, 1] {
            let phase = Phase {
                busy,
                waiting_since: now,
                head_started: None,
                write_blocked_since: Some(blocked),
            };
            assert_eq!(
                phase.deadline(&LIMITS),
                Some((blocked + LIMITS.write, "write_timeout"))
            );
        }
        // A write may block at any moment: look again within the write limit.
        let busy = Phase {
            busy: 1,
            waiting_since: now,
            head_started: None,
            write_blocked_since: None,
        };
        let limits = Limits {
            write: Duration::from_secs(1),
            ..LIMITS
        };
        assert_eq!(busy.next_check(&limits, now), now + limits.write);
    }

    #[test]
    fn the_supervisor_looks_again_before_any_deadline_a_change_could_set() {
        let now = Instant::now();
        let waiting = Phase {
            busy: 0,
            waiting_since: now,
            head_started: None,
            write_blocked_since: None,
        };
        // The idle deadline is 30 s away, but a head beginning at once would
        // be due in 2 s: look again then.
        assert_eq!(waiting.next_check(&LIMITS, now), now + LIMITS.header_read);
        // A head begun 1 s ago is due in 1 s: look then.
        let later = now + Duration::from_secs(1);
        let heading = Phase {
            head_started: Some(now),
            ..waiting
        };
        assert_eq!(heading.next_check(&LIMITS, later), now + LIMITS.header_read);
        // Busy: no deadline, but the request may end at once.
        let busy = Phase { busy: 1, ..waiting };
        assert_eq!(busy.next_check(&LIMITS, now), now + LIMITS.header_read);
        // An idle deadline closer than that is looked at on time.
        let late = now + Duration::from_millis(29_500);
        assert_eq!(waiting.next_check(&LIMITS, late), now + LIMITS.idle);
    }
}
