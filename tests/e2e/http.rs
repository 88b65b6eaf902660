//! Plain HTTP/1.1 GET to gpugate's admin port (health and metrics).

use std::time::Duration;

use anyhow::{Context as _, anyhow};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// Status and body of `GET path` on 127.0.0.1:port.
pub async fn get(port: u16, path: &str) -> anyhow::Result<(u16, String)> {
    let run = async {
        let mut s = TcpStream::connect(("127.0.0.1", port)).await?;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await?;
        anyhow::Ok(raw)
    };
    let raw = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .context("timed out")??;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow!("no HTTP header"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("no status in {head:?}"))?;
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok((status, body))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// One sample of a Prometheus text exposition: labels and value.
pub struct Sample {
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, key: &str) -> &str {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map_or("", |(_, v)| v.as_str())
    }
}

/// The samples of metric `name` in a scrape.
pub fn samples(text: &str, name: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let (labels, value) = if let Some(rest) = rest.strip_prefix('{') {
            let Some((labels, value)) = rest.rsplit_once('}') else {
                continue;
            };
            (labels, value)
        } else if rest.starts_with(' ') {
            ("", rest)
        } else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let labels = labels
            .split("\",")
            .filter(|p| !p.is_empty())
            .filter_map(|p| {
                let (k, v) = p.split_once("=\"")?;
                Some((k.trim().to_string(), v.trim_end_matches('"').to_string()))
            })
            .collect();
        out.push(Sample { labels, value });
    }
    out
}

/// The value of an unlabelled gauge in a scrape.
pub fn gauge(text: &str, name: &str) -> Option<f64> {
    samples(text, name).first().map(|s| s.value)
}

/// gpugate's metrics.
pub async fn metrics(port: u16) -> anyhow::Result<String> {
    match get(port, "/metrics").await? {
        (200, body) => Ok(body),
        (status, body) => Err(anyhow!("/metrics: {status} {body}")),
    }
}
