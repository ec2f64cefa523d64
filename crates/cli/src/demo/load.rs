//! The demo's S3 load: a day of PUTs and GETs whose rate follows a diurnal curve,
//! sent open loop (each request at its time, whatever the earlier ones are doing) by
//! a bounded pool of signed connections, and the read-back of every object stored.
//! Each object's bytes follow from the seed and its number, so nothing is kept to
//! check a GET against.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use rand::{Rng, RngCore, SeedableRng};
use rand_pcg::Pcg64Mcg;
use somnus_s3::client::{Connection, Endpoint};
use somnus_s3::sigv4::Signer;
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// The share of the day's requests that are PUTs of new objects (the rest GET one
/// already stored).
const PUT_SHARE: f64 = 0.5;
/// Requests in flight at most: more wait their turn (and their latency shows it).
const CONNECTIONS: usize = 32;

/// The S3 bucket the demo stores in.
pub(crate) const BUCKET: &str = "somnus-demo";

/// The day's request rate at `hour` (0 to 24) as a share of the peak: a night of
/// 1/12 of the peak from 21:00 to 7:00, and a day rising to the peak at 14:00.
pub(crate) fn diurnal_share(hour: f64) -> f64 {
    const NIGHT: f64 = 1.0 / 12.0;
    let day = if (7.0..21.0).contains(&hour) {
        (std::f64::consts::PI * (hour - 7.0) / 14.0).sin().powi(2)
    } else {
        0.0
    };
    NIGHT + (1.0 - NIGHT) * day
}

/// What one interval of the day saw.
#[derive(Clone, Debug, Default)]
pub(crate) struct IntervalStats {
    pub(crate) puts: u64,
    pub(crate) gets: u64,
    /// Requests refused or failed (a GET of wrong bytes among them).
    pub(crate) errors: u64,
    /// Service times of the requests that succeeded, microseconds.
    pub(crate) latencies_us: Vec<u64>,
    pub(crate) first_error: Option<String>,
}

impl IntervalStats {
    fn failed(&mut self, what: String) {
        self.errors += 1;
        self.first_error.get_or_insert(what);
    }
}

/// The load's knobs.
#[derive(Clone)]
pub(crate) struct LoadConfig {
    pub(crate) address: SocketAddr,
    pub(crate) signer: Arc<Signer>,
    pub(crate) seed: u64,
    /// Requests per (real) second at the peak.
    pub(crate) peak_rate: f64,
    pub(crate) object_size: u64,
    /// The day's length in real time, and its intervals.
    pub(crate) day: Duration,
    pub(crate) intervals: usize,
}

/// The objects stored so far (their numbers) and each interval's figures.
#[derive(Default)]
pub(crate) struct Ledger {
    pub(crate) stored: Mutex<Vec<u64>>,
    pub(crate) intervals: Mutex<Vec<IntervalStats>>,
}

pub(crate) fn key(number: u64) -> String {
    format!("day/{number:07}")
}

/// Object `number`'s bytes, the same for every run with the seed.
pub(crate) fn object_bytes(seed: u64, number: u64, size: u64) -> Bytes {
    let mut rng = Pcg64Mcg::seed_from_u64(seed ^ number.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut data = vec![0u8; size as usize];
    rng.fill_bytes(&mut data);
    Bytes::from(data)
}

enum Op {
    Put(u64),
    /// A GET of a stored object chosen by this number when it is sent.
    Get(u64),
}

/// Sends the day's requests, from `start` for `config.day`, and returns when every
/// one has been answered.
pub(crate) async fn run_day(config: LoadConfig, ledger: Arc<Ledger>, start: Instant) {
    ledger
        .intervals
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .resize(config.intervals, IntervalStats::default());
    let mut rng = Pcg64Mcg::seed_from_u64(config.seed);
    let slots = Arc::new(Semaphore::new(CONNECTIONS));
    let idle: Arc<Mutex<Vec<Connection>>> = Arc::default();
    let day = config.day.as_secs_f64();
    let (mut at, mut puts) = (0.0_f64, 0u64);
    let mut tasks = tokio::task::JoinSet::new();
    while at < day {
        let hour = 24.0 * at / day;
        let interval = ((at / day) * config.intervals as f64) as usize;
        // A GET waits for a first object acknowledged.
        let any_stored = !ledger.stored.lock().unwrap_or_else(PoisonError::into_inner).is_empty();
        let op = if !any_stored || rng.random_bool(PUT_SHARE) {
            puts += 1;
            Op::Put(puts - 1)
        } else {
            Op::Get(rng.next_u64())
        };
        tokio::time::sleep_until(start + Duration::from_secs_f64(at)).await;
        let Ok(permit) = slots.clone().acquire_owned().await else { break };
        let (task_config, ledger, idle) = (config.clone(), ledger.clone(), idle.clone());
        tasks.spawn(async move {
            let config = task_config;
            let connection = idle.lock().unwrap_or_else(PoisonError::into_inner).pop();
            let connection = match connection {
                Some(connection) => Some(connection),
                None => Connection::open(&Endpoint::http(config.address)).await.ok(),
            };
            let outcome = match connection {
                Some(mut connection) => {
                    let outcome = send(&config, &ledger, &mut connection, op).await;
                    if outcome.is_ok() {
                        idle.lock().unwrap_or_else(PoisonError::into_inner).push(connection);
                    }
                    outcome
                }
                None => Err(format!("cannot connect to {}", config.address)),
            };
            let mut intervals = ledger.intervals.lock().unwrap_or_else(PoisonError::into_inner);
            let stats = &mut intervals[interval.min(config.intervals - 1)];
            match outcome {
                Ok((is_put, took)) => {
                    if is_put {
                        stats.puts += 1
                    } else {
                        stats.gets += 1
                    }
                    stats.latencies_us.push(took.as_micros() as u64);
                }
                Err(what) => stats.failed(what),
            }
            drop(permit);
        });
        // Reap what has finished, so that a long day holds no finished tasks.
        while tasks.try_join_next().is_some() {}
        at += 1.0 / (config.peak_rate * diurnal_share(hour));
    }
    while tasks.join_next().await.is_some() {}
}

/// One request: whether it was a PUT and how long it took, or what went wrong.
async fn send(
    config: &LoadConfig,
    ledger: &Ledger,
    connection: &mut Connection,
    op: Op,
) -> Result<(bool, Duration), String> {
    let begun = Instant::now();
    match op {
        Op::Put(number) => {
            let path = format!("/{BUCKET}/{}", key(number));
            let data = object_bytes(config.seed, number, config.object_size);
            let (status, body) = connection
                .send(&config.signer, "PUT", &path, data)
                .await
                .map_err(|e| format!("PUT {path}: {e}"))?;
            if status != 200 {
                return Err(refused("PUT", &path, status, &body));
            }
            // Stored once acknowledged: only then may a GET ask for it.
            ledger.stored.lock().unwrap_or_else(PoisonError::into_inner).push(number);
            Ok((true, begun.elapsed()))
        }
        Op::Get(choice) => {
            let number = {
                let stored = ledger.stored.lock().unwrap_or_else(PoisonError::into_inner);
                stored[(choice % stored.len() as u64) as usize]
            };
            get_and_check(config, connection, number).await?;
            Ok((false, begun.elapsed()))
        }
    }
}

fn refused(method: &str, path: &str, status: u16, body: &Bytes) -> String {
    let body = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
    format!("{method} {path}: HTTP {status}: {body}")
}

/// GETs object `number` and compares it with what was PUT.
async fn get_and_check(
    config: &LoadConfig,
    connection: &mut Connection,
    number: u64,
) -> Result<(), String> {
    let path = format!("/{BUCKET}/{}", key(number));
    let (status, body) = connection
        .send(&config.signer, "GET", &path, Bytes::new())
        .await
        .map_err(|e| format!("GET {path}: {e}"))?;
    if status != 200 {
        return Err(refused("GET", &path, status, &body));
    }
    if body != object_bytes(config.seed, number, config.object_size) {
        return Err(format!("GET {path}: {} bytes, not the bytes PUT", body.len()));
    }
    Ok(())
}

/// GETs every object stored, `workers` at once: how many read back as written, and
/// the first that did not.
pub(crate) async fn read_back(
    config: &LoadConfig,
    numbers: Vec<u64>,
    workers: usize,
) -> (u64, Vec<String>) {
    let queue = Arc::new(Mutex::new(numbers));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..workers {
        let (config, queue) = (config.clone(), queue.clone());
        tasks.spawn(async move {
            let (mut good, mut bad) = (0u64, Vec::new());
            let mut connection = None;
            loop {
                let Some(number) = queue.lock().unwrap_or_else(PoisonError::into_inner).pop()
                else {
                    break;
                };
                if connection.is_none() {
                    connection = Connection::open(&Endpoint::http(config.address)).await.ok();
                }
                let outcome = match connection.as_mut() {
                    Some(c) => get_and_check(&config, c, number).await,
                    None => Err(format!("cannot connect to {}", config.address)),
                };
                match outcome {
                    Ok(()) => good += 1,
                    Err(what) => {
                        connection = None;
                        bad.push(what);
                    }
                }
            }
            (good, bad)
        });
    }
    let (mut good, mut bad) = (0, Vec::new());
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((g, b)) => {
                good += g;
                bad.extend(b);
            }
            Err(error) => bad.push(format!("a read-back worker failed: {error}")),
        }
    }
    (good, bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_day_peaks_at_two_in_the_afternoon_and_rests_at_night() {
        assert!((diurnal_share(14.0) - 1.0).abs() < 1e-12);
        assert!((diurnal_share(3.0) - 1.0 / 12.0).abs() < 1e-12);
        assert!((diurnal_share(23.0) - 1.0 / 12.0).abs() < 1e-12);
        assert!(diurnal_share(10.0) > diurnal_share(8.0));
        assert!(diurnal_share(18.0) < diurnal_share(16.0));
    }

    #[test]
    fn an_object_has_the_same_bytes_every_time_and_others_differ() {
        assert_eq!(object_bytes(1, 5, 100), object_bytes(1, 5, 100));
        assert_ne!(object_bytes(1, 5, 100), object_bytes(1, 6, 100));
        assert_ne!(object_bytes(1, 5, 100), object_bytes(2, 5, 100));
        assert_eq!(object_bytes(1, 5, 100).len(), 100);
    }

    /// Answers every request on one connection with `body` (200), whatever it asked.
    async fn canned_server(body: Bytes) -> SocketAddr {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut buffer = [0u8; 4096];
            loop {
                let n = stream.read(&mut buffer).await.unwrap();
                if n == 0 {
                    return;
                }
                seen.extend_from_slice(&buffer[..n]);
                while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                    seen.drain(..end + 4);
                    let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
                    stream.write_all(head.as_bytes()).await.unwrap();
                    stream.write_all(&body).await.unwrap();
                }
            }
        });
        address
    }

    fn config(address: SocketAddr) -> LoadConfig {
        let signer = Signer { access_key: "a".into(), secret_key: "s".into(), region: "r".into() };
        LoadConfig {
            address,
            signer: Arc::new(signer),
            seed: 3,
            peak_rate: 1.0,
            object_size: 1000,
            day: Duration::from_secs(1),
            intervals: 1,
        }
    }

    /// The read-back's check passes the bytes PUT and catches others: one byte
    /// changed, or the right bytes of another object.
    #[tokio::test]
    async fn the_read_back_check_catches_wrong_bytes() {
        let right = object_bytes(3, 7, 1000);
        let address = canned_server(right.clone()).await;
        let mut connection = Connection::open(&Endpoint::http(address)).await.unwrap();
        assert_eq!(get_and_check(&config(address), &mut connection, 7).await, Ok(()));
        let mut flipped = right.to_vec();
        flipped[500] ^= 1;
        for wrong in [Bytes::from(flipped), object_bytes(3, 8, 1000)] {
            let address = canned_server(wrong).await;
            let mut connection = Connection::open(&Endpoint::http(address)).await.unwrap();
            let outcome = get_and_check(&config(address), &mut connection, 7).await;
            assert!(outcome.unwrap_err().contains("not the bytes PUT"));
        }
    }
}
