//! A Server-Sent Events reader for `GET /v1/feed/stream`: the stream is read
//! as it arrives, event by event (the typed client reads whole answers).

use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

use crate::TestApp;

/// One event: its name, its `id:` if any, and its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: String,
    pub id: Option<String>,
    pub data: String,
}

impl SseEvent {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).expect("event data is JSON")
    }
}

/// How a stream authenticates.
pub enum StreamCredential<'a> {
    Token(&'a str),
    Ticket(&'a str),
}

/// An open stream.
pub struct SseStream {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    body: futures::stream::BoxStream<'static, reqwest::Result<Vec<u8>>>,
    buffer: String,
    /// Comment lines (heartbeats) seen so far.
    pub comments: usize,
}

impl TestApp {
    /// Opens `GET /v1/feed/stream{query}`; `query` is empty or starts with `?`.
    pub async fn open_stream(
        &self,
        credential: StreamCredential<'_>,
        query: &str,
        last_event_id: Option<&str>,
    ) -> SseStream {
        let mut url = format!("{}/v1/feed/stream{query}", self.base);
        let client = reqwest::Client::new();
        let mut request = client.get(&url);
        match credential {
            StreamCredential::Token(token) => request = request.bearer_auth(token),
            StreamCredential::Ticket(ticket) => {
                url.push_str(if query.is_empty() { "?" } else { "&" });
                url.push_str("ticket=");
                url.push_str(ticket);
                request = client.get(&url);
            }
        }
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id);
        }
        let response = request.send().await.expect("stream request");
        SseStream {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            body: response
                .bytes_stream()
                .map(|chunk| chunk.map(|b| b.to_vec()))
                .boxed(),
            buffer: String::new(),
            comments: 0,
        }
    }
}

impl SseStream {
    /// The next event within `within`; `None` when the stream ended or
    /// nothing came in time.
    pub async fn next_within(&mut self, within: Duration) -> Option<SseEvent> {
        tokio::time::timeout(within, self.next_event())
            .await
            .ok()
            .flatten()
    }

    /// The next event, waiting as long as it takes; `None` at the end.
    pub async fn next_event(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                if let Some(event) = self.parse(&block) {
                    return Some(event);
                }
                continue;
            }
            let chunk = self.body.next().await?.ok()?;
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// The whole body as text (for non-200 answers).
    pub async fn text(mut self) -> String {
        while let Some(Ok(chunk)) = self.body.next().await {
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
        self.buffer
    }

    fn parse(&mut self, block: &str) -> Option<SseEvent> {
        let mut event = "message".to_string();
        let mut id = None;
        let mut data: Vec<&str> = Vec::new();
        let mut fields = 0;
        for line in block.lines() {
            if line.starts_with(':') {
                self.comments += 1;
                continue;
            }
            // The blank line that ends the block is no field: without this a
            // heartbeat comment (`:\n\n`) would read as an empty message.
            if line.is_empty() {
                continue;
            }
            let (name, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            fields += 1;
            match name {
                "event" => event = value.to_string(),
                "id" => id = Some(value.to_string()),
                "data" => data.push(value),
                _ => {}
            }
        }
        (fields > 0).then(|| SseEvent {
            event,
            id,
            data: data.join("\n"),
        })
    }
}
