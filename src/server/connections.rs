//! Connections: accepting them, bounding them, timing them out, and closing them on shutdown.
//!
//! `axum::serve` has no header timeout, no limit on connections and a graceful shutdown that
//! waits forever for a request that is never finished, so one slow-loris client could keep the
//! server from answering or from exiting. This loop serves each connection with hyper's HTTP/1
//! server directly, with:
//! - at most `max_connections` open: a connection past it is answered 503 and closed at once,
//!   so a flood of idle sockets costs a file descriptor each for a moment, never a slot;
//! - `header_timeout` to send a request's headers, which is also how long a kept-alive
//!   connection may sit idle before hyper closes it;
//! - on shutdown: stop accepting, ask every connection to finish its request in flight, and
//!   after `shutdown_grace` return anyway: half-sent requests are dropped with the runtime.

use super::ConnectionLimits;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

/// Serves `app` on `listener` until `shutdown` completes, then waits at most
/// `limits.shutdown_grace` for the connections still open.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    limits: &ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    // Semaphore permits are counted in u32 when taken all at once (below); no server needs more.
    let max_connections = limits.max_connections.clamp(1, u32::MAX as usize);
    let connection_slots = Arc::new(Semaphore::new(max_connections));
    let (stopping, stop_requested) = watch::channel(false);
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
        let Ok(slot) = connection_slots.clone().try_acquire_owned() else {
            tokio::spawn(refuse_connection(stream));
            continue;
        };
        let _ = stream.set_nodelay(true);
        // Each request knows its peer (the access layer trusts the user header by it).
        let service = TowerToHyperService::new(tower_http::add_extension::AddExtension::new(
            app.clone(),
            axum::extract::ConnectInfo(peer),
        ));
        let mut stop_requested = stop_requested.clone();
        let header_timeout = limits.header_timeout;
        tokio::spawn(async move {
            let _slot = slot;
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            let result = tokio::select! {
                result = connection.as_mut() => result,
                () = async { drop(stop_requested.wait_for(|stop| *stop).await) } => {
                    // Finish the request in flight (if any), then close; the grace period
                    // below bounds how long that may take.
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(error) = result {
                // Timeouts and clients that hang up are routine; they are not the server's fault.
                tracing::debug!(%error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    let _ = stopping.send(true);
    let open = max_connections - connection_slots.available_permits();
    if open > 0 {
        tracing::info!(open, "waiting for requests in flight");
    }
    let every_slot = u32::try_from(max_connections).unwrap_or(u32::MAX);
    match tokio::time::timeout(
        limits.shutdown_grace,
        connection_slots.acquire_many(every_slot),
    )
    .await
    {
        Ok(_) => tracing::info!("stopped"),
        Err(_) => {
            let open = max_connections - connection_slots.available_permits();
            tracing::warn!(
                open,
                grace_s = limits.shutdown_grace.as_secs_f64(),
                "stopped with requests still in flight after the grace period"
            );
        }
    }
    Ok(())
}

/// Seconds a client refused for lack of connection slots is told to wait.
const CONNECTION_RETRY_AFTER_SECONDS: u64 = 5;

/// Answers 503 on a connection over the limit without reading its request, and closes it.
async fn refuse_connection(mut stream: TcpStream) {
    let body = r#"{"error":{"code":"busy","message":"the server has too many open connections (--max-connections); retry in a few seconds"}}"#;
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
