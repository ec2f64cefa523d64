//! No input bytes make a reader panic (STYLE.md rule 5). Method: random bytes, and
//! random mutations of valid lines, read as every format and as undetected input.
// Test helpers outside #[test] functions may panic: a failure is the test's result.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use proptest::prelude::*;
use somnus_trace::{Format, TraceReader};

fn read_everything(test: &str, bytes: &[u8]) {
    let dir = common::scratch_dir(test);
    let path = common::write_file(&dir, "input.trace", bytes);
    let formats = Format::ALL.iter().copied().map(Some).chain([None]);
    for format in formats {
        if let Ok(reader) = TraceReader::open(&path, format, true) {
            // Bounded: a reader ends at the end of the file or at its first fatal error.
            for _ in reader {}
        }
    }
}

const SEEDS: [&[u8]; 4] = [
    b"128166372003061629,hm,0,Read,383496192,32768,41286\n",
    b"0,20941264,8192,W,0.551706\n",
    b"0.221 5 162947904 16 1\n",
    b"timestamp_us,op,lbn_512B,size_bytes\n5633898368802,W,42932745,512\n",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        read_everything("random", &bytes);
    }

    #[test]
    fn mutated_lines_never_panic(seed in 0..SEEDS.len(), edits in prop::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
        let mut bytes = SEEDS[seed].repeat(3);
        for (position, byte) in edits {
            let position = position % bytes.len();
            bytes[position] = byte;
        }
        read_everything("mutated", &bytes);
    }
}
