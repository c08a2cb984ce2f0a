//! Connections: accepting them, bounding them, timing them out, and closing them on shutdown.
//!
//! `axum::serve` has no header timeout, no limit on connections and a graceful shutdown that
//! waits forever for a request that is never finished, so one slow-loris client could keep the
//! server from answering or from exiting. This loop serves each connection with hyper's HTTP/1
//! server directly, with:
//! - at most `max_connections` open, and at most `max_connections_per_client` from one client
//!   address (the TCP peer: behind a proxy that is the proxy). Past a limit, a connection that
//!   is *waiting on its client* (no request yet, idle between requests, or a response its
//!   client has accepted nothing of) is closed to make room: at the client's own limit one of
//!   its own that has waited [`QUIET_BEFORE_EVICTABLE`], at the server's limit one of the
//!   client address holding the most connections (at once if that address holds more than the
//!   newcomer's, else after the same wait). Only when none is waiting on its client is the
//!   newcomer answered 503 and closed at once, so a flood of idle sockets costs a file
//!   descriptor each for a moment, and a few addresses cannot lock out a new one;
//! - `header_timeout` to send a request's headers, which is also how long a kept-alive
//!   connection may sit idle before hyper closes it;
//! - `send_timeout` for the client to accept any bytes of a response, and after
//!   [`SEND_RATE_GRACE`] of waiting on it, `min_send_rate` bytes per second of that wait: a
//!   client that never reads its download is dropped, not waited for;
//! - on shutdown: stop accepting, ask every connection to finish its request in flight
//!   (hyper-util's [`GracefulShutdown`]), and after `shutdown_grace` return anyway: half-sent
//!   requests are dropped with the runtime.

use super::ConnectionLimits;
use axum::extract::ConnectInfo;
use hyper::server::conn::http1;
use hyper::service::Service as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// How long a connection must have waited on its client before a newcomer may take its slot:
/// long enough that a client's fresh connection is not closed before it could send its
/// request, short enough that sockets opened faster than this are needed to hold the server.
pub const QUIET_BEFORE_EVICTABLE: Duration = Duration::from_secs(1);

/// Waiting on a client that reads slowly that is forgiven before `min_send_rate` applies (TCP's
/// own slow start and a browser busy drawing must not count).
pub const SEND_RATE_GRACE: Duration = Duration::from_secs(10);

/// Serves `app` on `listener` until `shutdown` completes, then waits at most
/// `limits.shutdown_grace` for the connections still open.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    limits: &ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let registry = Arc::new(Registry::new(limits));
    let graceful = GracefulShutdown::new();
    let service = TowerToHyperService::new(app);
    let sending = SendLimits {
        timeout: limits.send_timeout,
        min_bytes_per_second: limits.min_send_rate,
    };
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors, or a connection reset before it was accepted:
                    // the listener is fine, and retrying at once would spin on the same error.
                    tracing::warn!(%error, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let slot = match registry.admit(client_of(peer.ip())) {
            Ok(slot) => slot,
            Err(refusal) => {
                tokio::spawn(refuse_connection(stream, refusal));
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let service = service.clone();
        let watcher = graceful.watcher();
        let header_timeout = limits.header_timeout;
        tokio::spawn(async move {
            let activity = slot.activity.clone();
            let io = Watched::new(stream, activity.clone(), sending);
            // Each request knows its client's address (per-client upload slots; the access
            // layer trusts the user header by it), and the connection counts as busy, never evictable, while a request is being answered.
            let busy = activity.clone();
            let per_connection = hyper::service::service_fn(move |mut request| {
                request.extensions_mut().insert(ConnectInfo(peer));
                let serving = Serving::start(&busy);
                let answer = service.call(request);
                async move {
                    let answer = answer.await;
                    drop(serving);
                    answer
                }
            });
            // On shutdown the watcher has the connection finish its request in flight (if
            // any), then close; the grace period below bounds how long that may take.
            let connection = watcher.watch(
                http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(header_timeout)
                    .serve_connection(TokioIo::new(io), per_connection),
            );
            let result = tokio::select! {
                result = connection => result,
                () = activity.evicted.notified() => {
                    tracing::debug!(%peer, "closed a connection waiting on its client to make room");
                    Ok(())
                }
            };
            if let Err(error) = result {
                // Timeouts and clients that hang up are routine; they are not the server's fault.
                tracing::debug!(%error, "connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    let open = graceful.count();
    if open > 0 {
        tracing::info!(open, "waiting for requests in flight");
    }
    match tokio::time::timeout(limits.shutdown_grace, graceful.shutdown()).await {
        Ok(_) => tracing::info!("stopped"),
        Err(_) => {
            let open = registry.open.load(Ordering::Relaxed);
            tracing::warn!(
                open,
                grace_s = limits.shutdown_grace.as_secs_f64(),
                "stopped with requests still in flight after the grace period"
            );
        }
    }
    Ok(())
}

/// The client address the per-client limits count for the TCP peer `peer`: an IPv4 address
/// (an IPv4-mapped IPv6 one included) as it is, an IPv6 address by its /64, since one host is
/// commonly given a whole /64 and could otherwise be as many clients as it likes.
pub fn client_of(peer: IpAddr) -> IpAddr {
    match peer {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(
                v6.to_bits() & !u128::from(u64::MAX),
            )),
        },
    }
}

/// What one connection is doing, as far as choosing which to close to make room is concerned.
struct Activity {
    /// When bytes of a response were last accepted by the client, or a request last began or
    /// ended: milliseconds since the registry's epoch.
    last_progress_ms: AtomicU64,
    /// Requests being answered (a handler running, an upload arriving).
    serving: AtomicUsize,
    /// Told when the registry took this connection's slot for a newcomer.
    evicted: Notify,
    epoch: Instant,
}

impl Activity {
    fn new(epoch: Instant) -> Self {
        let activity = Self {
            last_progress_ms: AtomicU64::new(0),
            serving: AtomicUsize::new(0),
            evicted: Notify::new(),
            epoch,
        };
        activity.progress();
        activity
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn progress(&self) {
        self.last_progress_ms
            .store(self.now_ms(), Ordering::Relaxed);
    }

    /// How long the connection has been waiting on its client, if it is (no request being
    /// answered); `None` while the server is answering one of its requests.
    fn waiting_on_client_for(&self, now_ms: u64) -> Option<Duration> {
        if self.serving.load(Ordering::Relaxed) > 0 {
            return None;
        }
        let since = self.last_progress_ms.load(Ordering::Relaxed);
        Some(Duration::from_millis(now_ms.saturating_sub(since)))
    }
}

/// A request being answered on a connection, from its call until its response is ready; a
/// dropped (cancelled) request ends too.
struct Serving(Arc<Activity>);

impl Serving {
    fn start(activity: &Arc<Activity>) -> Self {
        activity.serving.fetch_add(1, Ordering::Relaxed);
        activity.progress();
        Self(activity.clone())
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.serving.fetch_sub(1, Ordering::Relaxed);
        self.0.progress();
    }
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    /// `--max-connections` are open and none is waiting on its client.
    ServerFull,
    /// This client address holds `--max-connections-per-client`, none waiting on it.
    ClientFull,
}

/// The open connections: how many, from whom, and what each is doing.
struct Registry {
    max_connections: usize,
    /// 0: no limit per client.
    max_per_client: usize,
    epoch: Instant,
    held: Mutex<Held>,
    /// Connections whose task is still running (an evicted one until it has closed), for the
    /// shutdown's log of those it stopped waiting for.
    open: AtomicUsize,
}

#[derive(Default)]
struct Held {
    connections: HashMap<u64, HeldConnection>,
    by_client: HashMap<IpAddr, usize>,
    next_id: u64,
}

struct HeldConnection {
    client: IpAddr,
    activity: Arc<Activity>,
}

impl Held {
    fn release(&mut self, id: u64) -> Option<HeldConnection> {
        let connection = self.connections.remove(&id)?;
        if let Some(count) = self.by_client.get_mut(&connection.client) {
            *count -= 1;
            if *count == 0 {
                self.by_client.remove(&connection.client);
            }
        }
        Some(connection)
    }

    /// The connection to close for a newcomer from `client` (which holds `holds` connections)
    /// among those `eligible`: one waiting on its client for at least
    /// [`QUIET_BEFORE_EVICTABLE`], or for any time at all if its client holds more connections
    /// than the newcomer's would (so that sockets opened faster than that cannot keep a lighter
    /// client out); of those, one of the client holding the most, and the one waiting longest.
    fn victim(&self, now_ms: u64, holds: usize, eligible: impl Fn(IpAddr) -> bool) -> Option<u64> {
        self.connections
            .iter()
            .filter(|(_, held)| eligible(held.client))
            .filter_map(|(id, held)| {
                let waiting = held.activity.waiting_on_client_for(now_ms)?;
                let its_holds = self.by_client.get(&held.client).copied().unwrap_or(0);
                let gives_way = waiting >= QUIET_BEFORE_EVICTABLE || its_holds > holds + 1;
                gives_way.then_some(((its_holds, waiting), *id))
            })
            .max_by_key(|(key, _)| *key)
            .map(|(_, id)| id)
    }
}

impl Registry {
    fn new(limits: &ConnectionLimits) -> Self {
        Self {
            max_connections: limits.max_connections.max(1),
            max_per_client: limits.max_connections_per_client,
            epoch: Instant::now(),
            held: Mutex::default(),
            open: AtomicUsize::new(0),
        }
    }

    fn held(&self) -> MutexGuard<'_, Held> {
        // The counts stay consistent through a panic elsewhere: each change is one statement.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A slot for a new connection from `client`, closing one waiting on its client to make
    /// room if a limit is reached.
    fn admit(self: &Arc<Self>, client: IpAddr) -> Result<Slot, Refusal> {
        let now_ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        let mut held = self.held();
        let holds = held.by_client.get(&client).copied().unwrap_or(0);
        if self.max_per_client > 0 && holds >= self.max_per_client {
            let own = held
                .victim(now_ms, holds, |other| other == client)
                .ok_or(Refusal::ClientFull)?;
            evict(&mut held, own);
        } else if held.connections.len() >= self.max_connections {
            let any = held
                .victim(now_ms, holds, |_| true)
                .ok_or(Refusal::ServerFull)?;
            evict(&mut held, any);
        }
        let id = held.next_id;
        held.next_id += 1;
        let activity = Arc::new(Activity::new(self.epoch));
        held.connections.insert(
            id,
            HeldConnection {
                client,
                activity: activity.clone(),
            },
        );
        *held.by_client.entry(client).or_insert(0) += 1;
        drop(held);
        self.open.fetch_add(1, Ordering::Relaxed);
        Ok(Slot {
            registry: self.clone(),
            id,
            activity,
        })
    }
}

/// Frees `id`'s slot now and tells its task to close the connection.
fn evict(held: &mut Held, id: u64) {
    if let Some(connection) = held.release(id) {
        tracing::debug!(client = %connection.client, "closing a connection waiting on its client to make room");
        connection.activity.evicted.notify_one();
    }
}

/// One connection's place in the registry, given back on drop.
struct Slot {
    registry: Arc<Registry>,
    id: u64,
    activity: Arc<Activity>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.registry.held().release(self.id);
        self.registry.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How long a response may wait on its client.
#[derive(Debug, Clone, Copy)]
struct SendLimits {
    timeout: Duration,
    /// 0: no minimum rate.
    min_bytes_per_second: u64,
}

/// A client's TCP stream that fails a write its client does not accept in time (hyper then
/// drops the connection and its slot), and reports progress to the connection's [`Activity`].
struct Watched {
    stream: TcpStream,
    activity: Arc<Activity>,
    limits: SendLimits,
    /// When the write now pending started to wait on the client.
    waiting_since: Option<Instant>,
    /// When that write fails.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Time writes have spent waiting on the client, the one pending excluded.
    waited: Duration,
    /// Bytes the client accepted since its first wait: a client that never made a write wait
    /// is not measured at all.
    sent_since_first_wait: u64,
}

impl Watched {
    fn new(stream: TcpStream, activity: Arc<Activity>, limits: SendLimits) -> Self {
        Self {
            stream,
            activity,
            limits,
            waiting_since: None,
            deadline: None,
            waited: Duration::ZERO,
            sent_since_first_wait: 0,
        }
    }

    /// How long the write that starts waiting now may wait: `send_timeout`, and no longer than
    /// keeps the bytes accepted since the first wait at `min_send_rate` per second waited
    /// (after [`SEND_RATE_GRACE`]).
    fn allowed_wait(&self) -> Duration {
        let mut allowed = self.limits.timeout;
        if self.limits.min_bytes_per_second > 0 {
            let earned = Duration::from_secs_f64(
                self.sent_since_first_wait as f64 / self.limits.min_bytes_per_second as f64,
            )
            .max(SEND_RATE_GRACE);
            allowed = allowed.min(earned.saturating_sub(self.waited));
        }
        allowed
    }

    fn after_write(
        &mut self,
        cx: &mut Context<'_>,
        written: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match written {
            Poll::Ready(Ok(n)) => {
                if let Some(since) = self.waiting_since.take() {
                    self.waited += since.elapsed();
                }
                if self.deadline.is_some() {
                    self.sent_since_first_wait += n as u64;
                }
                if n > 0 {
                    self.activity.progress();
                }
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Pending => {
                if self.waiting_since.is_none() {
                    let now = Instant::now();
                    self.waiting_since = Some(now);
                    let deadline = tokio::time::Instant::from_std(now + self.allowed_wait());
                    match &mut self.deadline {
                        Some(sleep) => sleep.as_mut().reset(deadline),
                        None => self.deadline = Some(Box::pin(tokio::time::sleep_until(deadline))),
                    }
                }
                match self.deadline.as_mut().map(|sleep| sleep.as_mut().poll(cx)) {
                    Some(Poll::Ready(())) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client did not accept the response's bytes in time (--send-timeout, --min-send-rate)",
                    ))),
                    _ => Poll::Pending,
                }
            }
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.after_write(cx, written)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.after_write(cx, written)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Seconds a client refused for lack of connection slots is told to wait.
const CONNECTION_RETRY_AFTER_SECONDS: u64 = 5;

/// Answers 503 on a connection over a limit without reading its request, and closes it.
async fn refuse_connection(mut stream: TcpStream, refusal: Refusal) {
    let body = match refusal {
        Refusal::ServerFull => {
            r#"{"error":{"code":"busy","message":"the server has too many open connections (--max-connections); retry in a few seconds"}}"#
        }
        Refusal::ClientFull => {
            r#"{"error":{"code":"busy","message":"this client address has too many open connections to the server (--max-connections-per-client); close some, or retry in a few seconds"}}"#
        }
    };
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\nRetry-After: {CONNECTION_RETRY_AFTER_SECONDS}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    // A client that does not read even this is not waited for.
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_client_is_its_64_and_ipv4_is_itself() {
        let v6 = |text: &str| IpAddr::V6(text.parse().expect("an IPv6 address"));
        assert_eq!(client_of(v6("2001:db8:1:2:aaaa::1")), v6("2001:db8:1:2::"));
        assert_eq!(
            client_of(v6("2001:db8:1:2:bbbb::9")),
            client_of(v6("2001:db8:1:2:cccc::7"))
        );
        assert_ne!(
            client_of(v6("2001:db8:1:2::1")),
            client_of(v6("2001:db8:1:3::1"))
        );
        let v4 = IpAddr::V4(std::net::Ipv4Addr::new(10, 1, 2, 3));
        assert_eq!(client_of(v4), v4);
        assert_eq!(client_of(v6("::ffff:10.1.2.3")), v4);
    }
}
