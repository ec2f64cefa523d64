//! What an operator sees of the gateway: each request's S3 operation, counted and
//! timed in Prometheus metrics (`somnus_s3_requests_total`, `somnus_s3_errors_total`
//! by code, `somnus_s3_request_seconds`), and one line per request in an access log
//! that rotates by size.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use http::Method;
use metrics::{counter, histogram};
use tokio::sync::mpsc;

/// The S3 operation a request is, by its method, path and query (the protocol crate's
/// own names for them): for metrics and the access log.
pub fn operation(
    method: &Method,
    path: &str,
    query: &str,
    headers: &http::HeaderMap,
) -> &'static str {
    let path = path.trim_start_matches('/');
    let (bucket, key) = match path.split_once('/') {
        Some((bucket, key)) => (bucket, key),
        None => (path, ""),
    };
    let has = |name: &str| {
        query.split('&').any(|pair| pair == name || pair.starts_with(&format!("{name}=")))
    };
    let copy = headers.contains_key("x-amz-copy-source");
    match (method.as_str(), bucket.is_empty(), key.is_empty()) {
        ("GET", true, _) => "ListBuckets",
        ("GET", false, true) if has("uploads") => "ListMultipartUploads",
        ("GET", false, true) if has("location") => "GetBucketLocation",
        ("GET", false, true) if has("list-type") => "ListObjectsV2",
        ("GET", false, true) => "ListObjects",
        ("PUT", false, true) => "CreateBucket",
        ("DELETE", false, true) => "DeleteBucket",
        ("HEAD", false, true) => "HeadBucket",
        ("POST", false, true) if has("delete") => "DeleteObjects",
        ("GET", false, false) if has("uploadId") => "ListParts",
        ("GET", false, false) => "GetObject",
        ("HEAD", false, false) => "HeadObject",
        ("PUT", false, false) if has("uploadId") && copy => "UploadPartCopy",
        ("PUT", false, false) if has("uploadId") => "UploadPart",
        ("PUT", false, false) if copy => "CopyObject",
        ("PUT", false, false) => "PutObject",
        ("DELETE", false, false) if has("uploadId") => "AbortMultipartUpload",
        ("DELETE", false, false) => "DeleteObject",
        ("POST", false, false) if has("uploads") => "CreateMultipartUpload",
        ("POST", false, false) if has("uploadId") => "CompleteMultipartUpload",
        _ => "Other",
    }
}

/// The bucket and key of a request's path (still percent-encoded, as sent).
pub fn bucket_and_key(path: &str) -> (&str, &str) {
    let path = path.trim_start_matches('/');
    match path.split_once('/') {
        Some((bucket, key)) => (bucket, key),
        None => (path, ""),
    }
}

/// A request answered: recorded in the metrics, and in the access log if there is one.
pub struct Answered<'a> {
    pub id: &'a str,
    pub operation: &'static str,
    pub path: &'a str,
    pub status: u16,
    /// The error's S3 code, for an error.
    pub code: Option<&'a str>,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub seconds: f64,
}

pub fn record(answered: &Answered<'_>, log: Option<&AccessLog>) {
    let op = answered.operation;
    counter!("somnus_s3_requests_total", "op" => op).increment(1);
    histogram!("somnus_s3_request_seconds", "op" => op).record(answered.seconds);
    counter!("somnus_s3_bytes_in_total").increment(answered.bytes_in);
    counter!("somnus_s3_bytes_out_total").increment(answered.bytes_out);
    if answered.status >= 400 {
        let code = answered.code.unwrap_or("Unknown").to_owned();
        counter!("somnus_s3_errors_total", "op" => op, "code" => code).increment(1);
    }
    if let Some(log) = log {
        log.write(answered);
    }
}

/// The error code of an S3 error document (`<Code>...</Code>`), if `body` is one.
pub fn error_code(body: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(body).ok()?;
    let start = text.find("<Code>")? + "<Code>".len();
    let end = start + text[start..].find("</Code>")?;
    Some(&text[start..end])
}

/// Lines queued for the access log's writer at most; past it a line is dropped (and
/// counted): a slow disk never slows requests.
const QUEUED_MAX: usize = 4096;

/// The access log: one line per request, `time id operation bucket key status bytes_in
/// bytes_out seconds`, written by a thread of its own, the file rotated when it passes
/// its size (`path.1` .. `path.N`, the oldest dropped).
#[derive(Clone)]
pub struct AccessLog {
    lines: mpsc::Sender<String>,
    dropped: Arc<AtomicU64>,
    path: PathBuf,
}

impl AccessLog {
    /// Opens (appending) the log at `path`, rotated at `max_bytes`, `keep` old files.
    pub fn open(path: &Path, max_bytes: u64, keep: u32) -> std::io::Result<AccessLog> {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        let size = file.metadata()?.len();
        let (lines, incoming) = mpsc::channel(QUEUED_MAX);
        let writer = Writer { path: path.to_owned(), file, size, max_bytes, keep };
        // A thread: the writes block, and the gateway's tasks never wait for them.
        std::thread::Builder::new()
            .name("access-log".to_owned())
            .spawn(move || writer.run(incoming))?;
        Ok(AccessLog { lines, dropped: Arc::default(), path: path.to_owned() })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Lines dropped because the writer was behind.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    fn write(&self, a: &Answered<'_>) {
        let (bucket, key) = bucket_and_key(a.path);
        let line = format!(
            "{} {} {} {} {} {} {} {} {:.6}\n",
            timestamp(),
            a.id,
            a.operation,
            dash(bucket),
            dash(key),
            a.status,
            a.bytes_in,
            a.bytes_out,
            a.seconds
        );
        if self.lines.try_send(line).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A field of the log: `-` when empty (a key is percent-encoded as the client sent
/// it, so it holds no space or newline).
fn dash(text: &str) -> &str {
    if text.is_empty() { "-" } else { text }
}

/// The time of day, UTC, to the millisecond (RFC 3339).
#[allow(clippy::disallowed_methods, reason = "an access log's lines carry the time of day")]
fn timestamp() -> String {
    let now = time::OffsetDateTime::now_utc();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second(),
        now.millisecond()
    )
}

struct Writer {
    path: PathBuf,
    file: std::fs::File,
    size: u64,
    max_bytes: u64,
    keep: u32,
}

impl Writer {
    /// Writes the lines as they come, in batches, until every sender is gone.
    fn run(mut self, mut incoming: mpsc::Receiver<String>) {
        while let Some(line) = incoming.blocking_recv() {
            let mut batch = line;
            while batch.len() < 1 << 16 {
                match incoming.try_recv() {
                    Ok(line) => batch.push_str(&line),
                    Err(_) => break,
                }
            }
            let written = self.append(batch.as_bytes());
            if let Err(error) = written {
                eprintln!("somnus s3: the access log {}: {error}", self.path.display());
            }
        }
    }

    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        if self.size > 0 && self.size + bytes.len() as u64 > self.max_bytes {
            self.rotate()?;
        }
        self.file.write_all(bytes)?;
        self.size += bytes.len() as u64;
        Ok(())
    }

    /// `path` becomes `path.1`, `path.1` becomes `path.2`, ..., the oldest goes.
    fn rotate(&mut self) -> std::io::Result<()> {
        somnus_runtime::files::durable::rotate_log(&self.path, self.keep)?;
        self.file = std::fs::OpenOptions::new().create(true).append(true).open(&self.path)?;
        self.size = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(method: &str, path: &str, query: &str) -> &'static str {
        operation(&method.parse().unwrap(), path, query, &http::HeaderMap::new())
    }

    #[test]
    fn requests_are_named_by_their_operation() {
        assert_eq!(op("GET", "/", ""), "ListBuckets");
        assert_eq!(op("GET", "/b", "list-type=2&prefix=a"), "ListObjectsV2");
        assert_eq!(op("GET", "/b/", ""), "ListObjects");
        assert_eq!(op("GET", "/b", "uploads"), "ListMultipartUploads");
        assert_eq!(op("PUT", "/b", ""), "CreateBucket");
        assert_eq!(op("POST", "/b", "delete"), "DeleteObjects");
        assert_eq!(op("PUT", "/b/k/x", ""), "PutObject");
        assert_eq!(op("PUT", "/b/k", "partNumber=1&uploadId=u"), "UploadPart");
        assert_eq!(op("POST", "/b/k", "uploads"), "CreateMultipartUpload");
        assert_eq!(op("POST", "/b/k", "uploadId=u"), "CompleteMultipartUpload");
        assert_eq!(op("DELETE", "/b/k", "uploadId=u"), "AbortMultipartUpload");
        assert_eq!(op("GET", "/b/k", "uploadId=u"), "ListParts");
        assert_eq!(op("HEAD", "/b/k", ""), "HeadObject");
        let mut copy = http::HeaderMap::new();
        copy.insert("x-amz-copy-source", "/a/b".parse().unwrap());
        assert_eq!(operation(&Method::PUT, "/b/k", "", &copy), "CopyObject");
        assert_eq!(bucket_and_key("/b/a%20b/c"), ("b", "a%20b/c"));
    }

    #[test]
    fn an_error_documents_code_is_read() {
        let body =
            b"<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code><Message>m</Message></Error>";
        assert_eq!(error_code(body), Some("NoSuchKey"));
        assert_eq!(error_code(b"plain"), None);
    }

    /// Goal: the log takes a line per request and rotates by size, keeping `keep` old
    /// files. Method: a tiny bound, many lines.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_access_log_rotates_by_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        let log = AccessLog::open(&path, 400, 2).unwrap();
        for n in 0..20 {
            let id = format!("{n:016X}");
            let answered = Answered {
                id: &id,
                operation: "PutObject",
                path: "/bucket/some%20key",
                status: 200,
                code: None,
                bytes_in: 4096,
                bytes_out: 0,
                seconds: 0.001,
            };
            log.write(&answered);
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let text = std::fs::read_to_string(&path).unwrap();
        let line = text.lines().last().unwrap();
        let fields: Vec<&str> = line.split(' ').collect();
        assert_eq!(fields.len(), 9, "{line}");
        assert_eq!(&fields[2..6], ["PutObject", "bucket", "some%20key", "200"]);
        assert!(text.len() <= 400);
        assert!(
            dir.path().join("access.log.1").exists() && dir.path().join("access.log.2").exists()
        );
        assert!(!dir.path().join("access.log.3").exists(), "only two old files are kept");
    }
}
