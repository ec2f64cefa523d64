//! Text-format parsing: every malformed field of every format is an error naming the
//! file, the line and the field; `skip_bad` skips and counts; gzip and plain files read
//! the same; detection recognises each format from a small file.
// Test helpers outside #[test] functions may panic: a failure is the test's result.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use somnus_trace::{Format, Location, ReadOptions, TraceError, TraceReader, TraceSet};

/// Reads `lines` (the bad line third) as `format` and returns the first error.
fn first_error(dir: &Path, name: &str, format: Format, lines: [&str; 3]) -> TraceError {
    let path = common::write_file(dir, name, lines.join("\n").as_bytes());
    let reader = TraceReader::open(&path, Some(format), false).unwrap();
    let errors: Vec<TraceError> = reader.filter_map(Result::err).collect();
    assert_eq!(errors.len(), 1, "{format} {lines:?}: the reader stops after one error");
    errors.into_iter().next().unwrap()
}

/// Checks that each bad line gives a Parse error at line 3 naming `field` with a
/// message containing `needle`.
fn check_cases(format: Format, name: &str, prefix: [&str; 2], cases: &[(&str, &str, &str)]) {
    let dir = common::scratch_dir(&format!("errors-{format}"));
    for &(line, field, needle) in cases {
        let error = first_error(&dir, name, format, [prefix[0], prefix[1], line]);
        let text = error.to_string();
        match &error {
            TraceError::Parse { path, location, field: named, message } => {
                assert_eq!(path, &dir.join(name), "{line}");
                assert_eq!(*location, Location::Line(3), "{line}");
                assert_eq!(*named, field, "{line}: {text}");
                assert!(message.contains(needle), "{line}: {text}");
            }
            other => panic!("{line}: expected a parse error, got {other}"),
        }
        let expected_prefix = format!("{}:3: field {field}: ", dir.join(name).display());
        assert!(text.starts_with(&expected_prefix), "{text}");
    }
}

#[test]
fn msr_field_errors() {
    // Goal: each MSR field has its own error. Method: a valid line mutated one field
    // at a time, after two good lines.
    let good = "128166372003061629,hm,0,Read,383496192,32768,41286";
    let cases = [
        (
            "x128166372003061629,hm,0,Read,383496192,32768,41286",
            "Timestamp",
            "not an unsigned integer",
        ),
        ("5,hm,0,Read,383496192,32768,41286", "Timestamp", "before 1970"),
        ("128166372003061629,,0,Read,383496192,32768,41286", "Hostname", "is empty"),
        (
            "128166372003061629,hm,zero,Read,383496192,32768,41286",
            "DiskNumber",
            "not an unsigned integer",
        ),
        ("128166372003061629,hm,0,Erase,383496192,32768,41286", "Type", "is not Read or Write"),
        ("128166372003061629,hm,0,Read,-5,32768,41286", "Offset", "not an unsigned integer"),
        (
            "128166372003061629,hm,0,Read,18446744073709551615,32768,41286",
            "Offset",
            "overflows u64",
        ),
        (
            "128166372003061629,hm,0,Read,383496192,4k,41286",
            "Size",
            "\"4k\" is not an unsigned integer",
        ),
        ("128166372003061629,hm,0,Read,383496192,0,41286", "Size", "is zero"),
        ("128166372003061629,hm,0,Read,383496192,4294967296,41286", "Size", "exceeds"),
        (
            "128166372003061629,hm,0,Read,383496192,32768,fast",
            "ResponseTime",
            "not an unsigned integer",
        ),
        (
            "128166372003061629,hm,0,Read,383496192,32768",
            "ResponseTime",
            "missing: the line has 6 of 7",
        ),
        ("128166372003061629,hm", "DiskNumber", "missing: the line has 2 of 7"),
        ("128166372003061629,hm,0,Read,383496192,32768,41286,9,9", "ResponseTime", "2 extra field"),
    ];
    check_cases(Format::Msr, "hm_0.csv", [good, good], &cases);
}

#[test]
fn spc_field_errors() {
    // Goal: each SPC field has its own error; extra fields are allowed.
    let good = "0,20941264,8192,W,0.551706,extra,fields";
    let cases = [
        ("a,20941264,8192,W,0.551706", "ASU", "not an unsigned integer"),
        ("0,x,8192,W,0.551706", "LBA", "not an unsigned integer"),
        ("0,36028797018963968,8192,W,0.551706", "LBA", "overflows u64"),
        ("0,20941264,0,W,0.551706", "Size", "is zero"),
        ("0,20941264,8192,X,0.551706", "Opcode", "is not r or w"),
        ("0,20941264,8192,w,1e5", "Timestamp", "not a non-negative decimal"),
        ("0,20941264,8192,r,-0.5", "Timestamp", "not a non-negative decimal"),
        ("0,20941264,8192,W", "Timestamp", "missing: the line has 4 of 5"),
    ];
    check_cases(Format::Spc, "Financial1.spc", [good, "1,5,512,r,0.6"], &cases);
}

#[test]
fn disksim_and_mqsim_field_errors() {
    // Goal: each field of the two sector-addressed whitespace formats has its own
    // error, including too few and too many fields and a bad type code.
    let cases = [
        ("abc 5 162947904 16 1", "ArrivalTime", "not a non-negative decimal"),
        ("0.3 x 162947904 16 1", "DeviceNumber", "not an unsigned integer"),
        ("0.3 5 1.5 16 1", "StartLBA", "not an unsigned integer"),
        ("0.3 5 36028797018963968 16 1", "StartLBA", "overflows u64"),
        ("0.3 5 162947904 0 1", "Size", "is zero"),
        ("0.3 5 162947904 8388608 1", "Size", "exceeds"),
        ("0.3 5 162947904 16 2", "Type", "is not 1 (read) or 0 (write)"),
        ("0.3 5 162947904 16", "Type", "missing: the line has 4 of 5"),
        ("0.3 5 162947904 16 1 7", "Type", "1 extra field"),
    ];
    check_cases(
        Format::Disksim,
        "MSN.trace",
        ["0.000 5 174224064 16 1", "0.221 5 162947904 16 1"],
        &cases,
    );
    let cases = [
        ("11413000.5 0 657728 16 1", "ArrivalTime", "not an unsigned integer"),
        ("11413001 0 657728 16 r", "Type", "is not 1 (read) or 0 (write)"),
        ("11413001 0 657728 x 1", "Size", "not an unsigned integer"),
    ];
    check_cases(
        Format::Mqsim,
        "wsrch.trace",
        ["11413000 0 657728 16 1", "11413000 1 657728 16 0"],
        &cases,
    );
}

#[test]
fn replayer_and_cloudphysics_field_errors() {
    // Goal: each field of the replayer and CloudPhysics CSV formats has its own error.
    let cases = [
        ("x 0 3159347200 36864 0", "Timestamp", "not a non-negative decimal"),
        ("224 -1 3159347200 36864 0", "DeviceID", "not an unsigned integer"),
        ("224 0 0x10 36864 0", "Offset", "not an unsigned integer"),
        ("224 0 3159347200 0 0", "Size", "is zero"),
        ("224 0 3159347200 36864 w", "Type", "is not 1 (read) or 0 (write)"),
        ("224 0 3159347200", "Size", "missing: the line has 3 of 5"),
    ];
    check_cases(
        Format::Replayer,
        "msr.cut.trace",
        ["0.000 0 200626176 4096 0", "223.412 0 3159347200 36864 0"],
        &cases,
    );
    let cases = [
        ("5633898368900x,W,42932745,512", "timestamp_us", "not an unsigned integer"),
        ("5633898368900,D,42932745,512", "op", "is not R or W"),
        ("5633898368900,W,,512", "lbn_512B", "is empty"),
        ("5633898368900,W,42932745,0", "size_bytes", "is zero"),
        ("5633898368900,W,42932745,512,1", "size_bytes", "1 extra field"),
    ];
    check_cases(
        Format::CloudphysicsCsv,
        "cp.csv",
        ["timestamp_us,op,lbn_512B,size_bytes", "5633898368802,W,42932745,512"],
        &cases,
    );
}

#[test]
fn backwards_time_is_an_error_naming_the_line() {
    // Goal: a timestamp earlier than the previous line's is OutOfOrder at its line;
    // equal timestamps are fine.
    let dir = common::scratch_dir("order");
    let path =
        common::write_file(&dir, "r.trace", b"1.0 0 0 512 1\n1.0 0 0 512 1\n0.5 0 0 512 1\n");
    let error = TraceReader::open(&path, None, false).unwrap().find_map(Result::err).unwrap();
    assert!(
        matches!(
            error,
            TraceError::OutOfOrder {
                location: Location::Line(3),
                timestamp_ns: 500_000,
                previous_ns: 1_000_000,
                ..
            }
        ),
        "{error}"
    );
    assert!(error.to_string().contains("r.trace:3: field Timestamp"), "{error}");
}

#[test]
fn skip_bad_counts_per_file_and_keeps_the_first_errors() {
    // Goal: with skip_bad, bad and out-of-order lines are skipped and counted per
    // file, and the first few messages are kept. Method: 7 bad lines among 3 good.
    let dir = common::scratch_dir("skip");
    let mut text = String::from("Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n");
    text.push_str("128166372003061629,hm,0,Read,0,512,1\n");
    for bad in 0..6 {
        text.push_str(&format!("128166372003061629,hm,0,Read,0,{bad}x,1\n"));
    }
    text.push_str("128166372003061630,hm,0,Write,512,512,1\n128166372003061629,hm,0,Read,0,512,1\n128166372003061631,hm,1,Read,0,512,1\n");
    let path = common::write_file(&dir, "hm.csv", text.as_bytes());
    let options = ReadOptions { skip_bad: true, ..ReadOptions::default() };
    let set = TraceSet::open(std::slice::from_ref(&path), &options).unwrap();
    let file = &set.summary().files[0];
    assert_eq!(file.record_count, 3);
    assert_eq!(file.skipped.skipped_count, 7);
    assert_eq!(file.skipped.first_errors.len(), somnus_trace::reader::SKIPPED_ERRORS_KEPT);
    assert!(
        file.skipped.first_errors[0].contains("hm.csv:3: field Size"),
        "{:?}",
        file.skipped.first_errors
    );
    assert_eq!(set.summary().skipped_count, 7);
    assert_eq!(set.requests().filter(Result::is_ok).count(), 3);
    assert!(TraceSet::open(&[path], &ReadOptions::default()).is_err());
}

#[test]
fn gzip_and_plain_read_the_same() {
    // Goal: a gzip file (detected by its magic, whatever its name) reads exactly like
    // the plain file, for a text and a binary format.
    let dir = common::scratch_dir("gzip");
    let text = b"0.000 5 174224064 16 1\n0.221 5 162947904 16 0\n0.594 6 174933616 8 1\n";
    let plain = common::write_file(&dir, "a.trace", text);
    let packed = common::write_file(&dir, "b.trace", &common::gzip(text));
    let read = |path| {
        TraceReader::open(path, None, false).unwrap().map(Result::unwrap).collect::<Vec<_>>()
    };
    let records = read(&plain);
    assert_eq!(records.len(), 3);
    assert_eq!(records, read(&packed));
    assert_eq!(TraceReader::open(&packed, None, false).unwrap().format(), Format::Disksim);
}

#[test]
fn detection_from_files_and_its_failure() {
    // Goal: each format is detected from a small file; an undetectable file names the
    // formats tried and suggests --format.
    let dir = common::scratch_dir("detect");
    let samples: [(&str, &[u8], Format); 6] = [
        ("a.csv", b"128166372003061629,hm,0,Read,383496192,32768,41286\n", Format::Msr),
        ("b.spc", b"0,20941264,8192,W,0.551706\n", Format::Spc),
        ("c.trace", b"0.000 5 174224064 16 1\n", Format::Disksim),
        ("d.trace", b"11413000 0 657728 16 1\n", Format::Mqsim),
        ("e.trace", b"0.000 0 200626176 4096 0\n", Format::Replayer),
        (
            "f.csv",
            b"timestamp_us,op,lbn_512B,size_bytes\n5633898368802,W,42932745,512\n",
            Format::CloudphysicsCsv,
        ),
    ];
    for (name, content, format) in samples {
        let path = common::write_file(&dir, name, content);
        assert_eq!(somnus_trace::reader::detect_format(&path).unwrap(), format, "{name}");
    }
    let path = common::write_file(&dir, "junk.txt", b"hello\nworld\n");
    let error = TraceReader::open(&path, None, false).err().unwrap();
    assert!(matches!(error, TraceError::UnknownFormat { .. }));
    let text = error.to_string();
    assert!(text.contains("--format") && text.contains("msr, spc"), "{text}");
}
