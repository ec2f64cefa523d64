//! `cargo bench -p somnus-ec --features compare`: the comparison of `somnus bench ec`
//! with its default options (RS(6,3) and RS(10,4), 64 KiB and 1 MiB shards, one core),
//! printed as a table with each figure's ratio to a plain XOR of the same data buffers.

fn main() {
    let options = somnus_ec::bench::Options {
        backends: somnus_ec::Backend::available(),
        ..somnus_ec::bench::Options::default()
    };
    println!("backend detected: {}", somnus_ec::Backend::detect().name());
    let measurements = somnus_ec::bench::run(&options, |group| {
        eprint!("{}", somnus_ec::bench::table(group));
    });
    println!("{}", somnus_ec::bench::table(&measurements));
}
