//! Bounded resources per connection and per request (issue 11: slowloris,
//! connection cap, caps on stored work, paged answers, fair expansion).

use std::time::Duration;

use tidings_tests::{AppOptions, TestApp};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// How long a test waits for the server to close a connection: several times
/// the 1–2 s limits the servers below run with.
const CLOSED_WITHIN: Duration = Duration::from_secs(10);

async fn connect(app: &TestApp) -> TcpStream {
    let addr = app.base_url().trim_start_matches("http://").to_string();
    TcpStream::connect(addr).await.expect("connect")
}

/// Sends `first`, then `drip` every half second (each comes well before the
/// idle limit, so only a limit on the whole head or body can end it), and
/// reads everything until the server closes. Returns what it read, or `None`
/// when the connection was still open after [`CLOSED_WITHIN`].
async fn trickle_until_closed(mut socket: TcpStream, first: &[u8], drip: &[u8]) -> Option<String> {
    socket.write_all(first).await.expect("write");
    let (mut reader, mut writer) = socket.into_split();
    let drip = drip.to_vec();
    let writing = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            if writer.write_all(&drip).await.is_err() {
                return;
            }
        }
    });
    let read = tokio::time::timeout(CLOSED_WITHIN, async {
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match reader.read(&mut buf).await {
                Ok(0) | Err(_) => return String::from_utf8_lossy(&answer).into_owned(),
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    writing.abort();
    read.ok()
}

fn short_limits() -> AppOptions {
    AppOptions::env([
        ("TIDINGS_HTTP_HEADER_READ_TIMEOUT_SECS", "1"),
        ("TIDINGS_HTTP_IDLE_TIMEOUT_SECS", "2"),
        ("TIDINGS_HTTP_BODY_TIMEOUT_SECS", "2"),
    ])
}

#[tokio::test]
async fn a_head_trickled_a_header_at_a_time_is_cut_off() {
    let (app, _db) = TestApp::spawn_with(short_limits()).await.unwrap();
    let mut slow = Vec::new();
    for _ in 0..20 {
        let socket = connect(&app).await;
        slow.push(tokio::spawn(trickle_until_closed(
            socket,
            b"GET /healthz HTTP/1.1\r\nHost: tidings\r\n",
            b"X-Slow: 1\r\n",
        )));
    }
    for connection in slow {
        let answer = connection.await.unwrap();
        assert!(answer.is_some(), "a slow head kept its connection open");
    }
    // The server still answers.
    app.public().live().expect(200).await;
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_when_idle() {
    let (app, _db) = TestApp::spawn_with(short_limits()).await.unwrap();
    let socket = connect(&app).await;
    let answer = trickle_until_closed(socket, b"", b"").await;
    assert_eq!(answer.as_deref(), Some(""), "idle connection stayed open");
}

#[tokio::test]
async fn a_body_trickled_a_byte_at_a_time_is_cut_off_with_408() {
    let (app, _db) = TestApp::spawn_with(short_limits()).await.unwrap();
    let socket = connect(&app).await;
    let head = b"POST /v1/alerts HTTP/1.1\r\nHost: tidings\r\nContent-Type: application/json\r\n\
                 Content-Length: 1000\r\n\r\n{";
    let answer = trickle_until_closed(socket, head, b" ").await;
    let answer = answer.expect("a trickled body kept its connection open");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("body_timeout"), "{answer}");
}

#[tokio::test]
async fn connections_over_the_cap_are_closed_and_the_cap_frees_up() {
    let (app, _db) = TestApp::spawn_with(AppOptions::env([
        ("TIDINGS_HTTP_MAX_CONNECTIONS", "4"),
        ("TIDINGS_HTTP_IDLE_TIMEOUT_SECS", "60"),
    ]))
    .await
    .unwrap();
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(connect(&app).await);
    }
    // Give the server the moment to accept all four (they are accepted in order).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut extra = connect(&app).await;
    extra
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: tidings\r\n\r\n")
        .await
        .ok();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(CLOSED_WITHIN, extra.read(&mut buf))
        .await
        .expect("the connection over the cap was neither answered nor closed");
    assert!(
        matches!(read, Ok(0) | Err(_)),
        "over the cap, yet answered: {:?}",
        read.map(|n| String::from_utf8_lossy(&buf[..n]).into_owned())
    );
    // A held connection is served.
    for socket in &mut held[..1] {
        socket
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: tidings\r\n\r\n")
            .await
            .unwrap();
        let n = socket.read(&mut buf).await.unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    }
    // Closing one frees its place.
    drop(held.pop());
    let deadline = tokio::time::Instant::now() + CLOSED_WITHIN;
    loop {
        let mut socket = connect(&app).await;
        socket
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: tidings\r\nConnection: close\r\n\r\n")
            .await
            .ok();
        let mut answer = String::new();
        socket.read_to_string(&mut answer).await.ok();
        if answer.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "a freed place was never reused"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
