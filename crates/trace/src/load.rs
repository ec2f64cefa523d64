//! Per-window load counts of real traces (`load-timeseries/cloudphysics_30min_load.csv`),
//! used as a measured daily load curve for the synthetic generator.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use crate::synthetic::{RateCurve, SyntheticConfigError};

/// The columns every load file starts with; further columns are ignored.
pub(crate) const HEADER_PREFIX: &str = "workload,window_index,window_end_us,block_req_count,read_block_req_count,write_block_req_count";
/// Bounds on what one load file may hold.
const ROWS_MAX: u64 = 10_000_000;
const LINE_BYTES_MAX: usize = 4096;

/// One window of one workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LoadWindow {
    pub window_index: u32,
    /// The end of the window, in microseconds from the start of the trace.
    pub window_end_us: u64,
    pub request_count: u64,
    pub read_request_count: u64,
    pub write_request_count: u64,
    /// Bytes read and written in the window, where the file has the columns
    /// `read_io_request_size_sum` and `write_io_request_size_sum`.
    pub read_bytes: Option<u64>,
    pub write_bytes: Option<u64>,
}

/// How many workload names an error lists before "...".
const KNOWN_SHOWN_MAX: usize = 8;

/// Why a load file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LoadSeriesError {
    #[error("{}: {source}", .path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{}:{line}: field {field}: {message}", .path.display())]
    Parse { path: PathBuf, line: u64, field: &'static str, message: String },
    #[error("workload {name:?} is not in the load file (it has {known})")]
    UnknownWorkload { name: String, known: String },
    #[error("load curve: {0}")]
    Curve(#[from] SyntheticConfigError),
}

/// Load windows per workload, in file order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadSeries {
    workloads: BTreeMap<String, Vec<LoadWindow>>,
}

impl LoadSeries {
    /// The window length of the shipped load file, in seconds (30 minutes).
    pub const WINDOW_S: f64 = 1_800.0;

    /// Reads a load file.
    pub fn open(path: &Path) -> Result<LoadSeries, LoadSeriesError> {
        let file = File::open(path)
            .map_err(|source| LoadSeriesError::Io { path: path.to_owned(), source })?;
        LoadSeries::parse(BufReader::new(file), path)
    }

    /// Parses a load file from `source`; `path` names it in errors.
    pub fn parse(source: impl BufRead, path: &Path) -> Result<LoadSeries, LoadSeriesError> {
        let mut series = LoadSeries::default();
        let error = |line: u64, field: &'static str, message: String| LoadSeriesError::Parse {
            path: path.to_owned(),
            line,
            field,
            message,
        };
        let mut line_number = 0_u64;
        // Where the optional byte columns are, once the header is read.
        let mut byte_columns: Option<(usize, usize)> = None;
        for line in source.lines() {
            line_number += 1;
            let line =
                line.map_err(|source| LoadSeriesError::Io { path: path.to_owned(), source })?;
            if line_number > ROWS_MAX || line.len() > LINE_BYTES_MAX {
                return Err(error(
                    line_number,
                    "line",
                    format!("beyond {ROWS_MAX} rows or {LINE_BYTES_MAX} bytes"),
                ));
            }
            let line = line.trim_end_matches('\r');
            if line_number == 1 {
                if !line.starts_with(HEADER_PREFIX) {
                    return Err(error(
                        1,
                        "header",
                        format!("expected a header starting with {HEADER_PREFIX:?}"),
                    ));
                }
                let names: Vec<&str> = line.split(',').map(str::trim).collect();
                let find = |name: &str| names.iter().position(|n| *n == name);
                byte_columns =
                    find("read_io_request_size_sum").zip(find("write_io_request_size_sum"));
                continue;
            }
            if line.trim().is_empty() {
                continue;
            }
            let (name, window) = parse_row(line, byte_columns)
                .map_err(|(field, message)| error(line_number, field, message))?;
            let windows = series.workloads.entry(name.to_owned()).or_default();
            if window.window_index as usize != windows.len() {
                let message = format!(
                    "window {} of {name} follows {} windows; expected consecutive indexes from 0",
                    window.window_index,
                    windows.len()
                );
                return Err(error(line_number, "window_index", message));
            }
            windows.push(window);
        }
        if line_number == 0 {
            return Err(error(1, "header", "the file is empty".to_owned()));
        }
        Ok(series)
    }

    /// Appends a window to `workload` (the generator's way in; `parse` checks order).
    pub(crate) fn push(&mut self, workload: &str, window: LoadWindow) {
        self.workloads.entry(workload.to_owned()).or_default().push(window);
    }

    /// The workload names, sorted.
    pub fn workloads(&self) -> impl Iterator<Item = &str> {
        self.workloads.keys().map(String::as_str)
    }

    /// The windows of `workload`, in index order.
    pub fn windows(&self, workload: &str) -> Option<&[LoadWindow]> {
        self.workloads.get(workload).map(Vec::as_slice)
    }

    /// The request counts of `workload` as a rate curve with 30-minute steps.
    pub fn rate_curve(&self, workload: &str) -> Result<RateCurve, LoadSeriesError> {
        let windows = self.windows(workload).ok_or_else(|| LoadSeriesError::UnknownWorkload {
            name: workload.to_owned(),
            known: {
                let shown: Vec<&str> = self.workloads().take(KNOWN_SHOWN_MAX).collect();
                let more = if self.workloads.len() > shown.len() { ", ..." } else { "" };
                format!("{} workloads: {}{more}", self.workloads.len(), shown.join(", "))
            },
        })?;
        let loads: Vec<f64> = windows.iter().map(|window| window.request_count as f64).collect();
        Ok(RateCurve::new(LoadSeries::WINDOW_S, &loads)?)
    }
}

fn parse_row(
    line: &str,
    byte_columns: Option<(usize, usize)>,
) -> Result<(&str, LoadWindow), (&'static str, String)> {
    const FIELDS: [&str; 6] = [
        "workload",
        "window_index",
        "window_end_us",
        "block_req_count",
        "read_block_req_count",
        "write_block_req_count",
    ];
    let all: Vec<&str> = line.split(',').map(str::trim).collect();
    let mut parts = all.iter().copied();
    let mut fields = [""; 6];
    for (index, slot) in fields.iter_mut().enumerate() {
        *slot = parts
            .next()
            .ok_or((FIELDS[index], format!("missing: the line has {index} of at least 6 fields")))?
            .trim();
    }
    if fields[0].is_empty() {
        return Err(("workload", "is empty".to_owned()));
    }
    let number = |index: usize| -> Result<u64, (&'static str, String)> {
        fields[index]
            .parse::<u64>()
            .map_err(|_| (FIELDS[index], format!("{:?} is not an unsigned integer", fields[index])))
    };
    let window_index =
        u32::try_from(number(1)?).map_err(|_| ("window_index", "exceeds u32".to_owned()))?;
    let bytes =
        |index: usize, field: &'static str| -> Result<Option<u64>, (&'static str, String)> {
            let text = all.get(index).ok_or((field, "missing".to_owned()))?;
            text.parse::<u64>()
                .map(Some)
                .map_err(|_| (field, format!("{text:?} is not an unsigned integer")))
        };
    let (read_bytes, write_bytes) = match byte_columns {
        Some((read, write)) => {
            (bytes(read, "read_io_request_size_sum")?, bytes(write, "write_io_request_size_sum")?)
        }
        None => (None, None),
    };
    let window = LoadWindow {
        window_index,
        window_end_us: number(2)?,
        request_count: number(3)?,
        read_request_count: number(4)?,
        write_request_count: number(5)?,
        read_bytes,
        write_bytes,
    };
    Ok((fields[0], window))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_windows_and_builds_a_curve() {
        // Goal: rows become windows per workload and a normalized curve; bad rows name
        // their line and field.
        let text = format!(
            "{HEADER_PREFIX},io_request_size_sum\nw01,0,1800000000,100,10,90,5\nw01,1,3600000000,300,30,270,5\n"
        );
        let series = LoadSeries::parse(text.as_bytes(), Path::new("load.csv")).unwrap();
        assert_eq!(series.workloads().collect::<Vec<_>>(), ["w01"]);
        let curve = series.rate_curve("w01").unwrap();
        assert_eq!(curve.multipliers(), [0.5, 1.5]);
        assert!(matches!(series.rate_curve("w02"), Err(LoadSeriesError::UnknownWorkload { .. })));
        let bad = format!("{HEADER_PREFIX}\nw01,0,1,x,1,1\n");
        let error =
            LoadSeries::parse(bad.as_bytes(), Path::new("load.csv")).unwrap_err().to_string();
        assert_eq!(error, "load.csv:2: field block_req_count: \"x\" is not an unsigned integer");
        let gap = format!("{HEADER_PREFIX}\nw01,1,1,1,1,1\n");
        assert!(
            LoadSeries::parse(gap.as_bytes(), Path::new("l"))
                .unwrap_err()
                .to_string()
                .contains("window_index")
        );
    }

    #[test]
    fn an_unknown_workload_lists_some_names_and_says_there_are_more() {
        // Goal: the error names the count, the first names and an ellipsis when it
        // does not list them all, and no ellipsis when it does.
        let rows: String = (1..=10).map(|w| format!("w{w:02},0,1800000000,1,1,0,5\n")).collect();
        let many = format!("{HEADER_PREFIX},io_request_size_sum\n{rows}");
        let series = LoadSeries::parse(many.as_bytes(), Path::new("l")).unwrap();
        let error = series.rate_curve("w99").unwrap_err().to_string();
        assert!(error.contains("10 workloads: w01, w02"), "{error}");
        assert!(error.ends_with("w08, ...)"), "{error}");
        let one = format!("{HEADER_PREFIX},io_request_size_sum\nw01,0,1800000000,1,1,0,5\n");
        let series = LoadSeries::parse(one.as_bytes(), Path::new("l")).unwrap();
        let error = series.rate_curve("w99").unwrap_err().to_string();
        assert!(error.ends_with("1 workloads: w01)"), "{error}");
    }
}
