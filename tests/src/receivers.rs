//! Real receivers (Python, `tests/receivers/`) that record what arrived: a
//! webhook receiver verifying with the reference Standard Webhooks library, and
//! an SMTP server.

use std::{
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{bail, Context};
use serde_json::Value;
use uuid::Uuid;

fn receivers_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("receivers")
}

/// A Python receiver process that prints "listening on PORT" and appends
/// JSON lines to a record file.
pub struct Receiver {
    child: Child,
    pub port: u16,
    record: PathBuf,
}

impl Receiver {
    async fn spawn(script: &str, args: &[String]) -> anyhow::Result<Receiver> {
        let record = std::env::temp_dir().join(format!(
            "tidings-receiver-{}.jsonl",
            Uuid::new_v4().simple()
        ));
        std::fs::write(&record, "")?;
        let mut child = Command::new("python3")
            .arg(receivers_dir().join(script))
            .arg("--record")
            .arg(&record)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("starting python3 (tests/receivers/requirements.txt must be installed)")?;
        let stdout = child.stdout.take().context("receiver stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            while let Some(Ok(line)) = lines.next() {
                if let Some(port) = line.strip_prefix("listening on ") {
                    let _ = tx.send(port.trim().parse::<u16>().ok());
                    break;
                }
            }
            for _ in lines {}
        });
        match tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(30))).await? {
            Ok(Some(port)) => Ok(Receiver {
                child,
                port,
                record,
            }),
            _ => {
                let _ = child.kill();
                bail!("{script} did not start (is `pip install -r tests/receivers/requirements.txt` done?)")
            }
        }
    }

    /// Webhook receiver verifying with each of `secrets` (indexes in
    /// `verified_with`), then with each secret [`Receiver::trust`]ed later.
    pub async fn webhooks(secrets: &[&str]) -> Receiver {
        let args: Vec<String> = secrets
            .iter()
            .flat_map(|s| ["--secret".to_owned(), (*s).to_owned()])
            .collect();
        Receiver::spawn("webhook_receiver.py", &args)
            .await
            .expect("webhook receiver")
    }

    /// Makes the webhook receiver verify with `secret` too; its index in
    /// `verified_with` is the number of secrets trusted before it.
    pub async fn trust(&self, secret: &str) {
        let resp = reqwest::Client::new()
            .post(self.url("/_control/secrets"))
            .json(&[secret])
            .send()
            .await
            .expect("webhook receiver control");
        assert_eq!(resp.status(), 200, "the receiver refused the secret");
    }

    /// SMTP server answering 451 to the first `fail_first` tries of each Message-ID.
    pub async fn smtp(fail_first: u32) -> Receiver {
        Receiver::spawn(
            "smtp_receiver.py",
            &["--fail-first".to_owned(), fail_first.to_string()],
        )
        .await
        .expect("smtp receiver")
    }

    /// `http://127.0.0.1:PORT{path_and_query}`
    pub fn url(&self, path_and_query: &str) -> String {
        format!("http://127.0.0.1:{}{path_and_query}", self.port)
    }

    pub fn smtp_url(&self) -> String {
        format!("smtp://127.0.0.1:{}", self.port)
    }

    /// Everything recorded so far.
    pub fn received(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.record)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("record is JSON"))
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.record);
    }
}
