//! `rdb::lzf::compress` against 250 vectors produced by the C liblzf 3.6
//! (`tools/lzf_crosscheck.c ... | awk 'length($2) <= 1200' | head -250`,
//! seed 77): same output bytes, and the same "does not fit" verdicts.

use super::common::unhex;
use fallow_store::rdb::lzf;

#[test]
fn compressor_matches_c_liblzf() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/rdb/fixtures/lzf_vectors.txt"
    );
    let text = std::fs::read_to_string(path).expect("lzf_vectors.txt");
    let mut checked = 0;
    for (line_no, line) in text.lines().enumerate() {
        let mut parts = line.split(' ');
        let out_len: usize = parts.next().unwrap().parse().unwrap();
        let input = unhex(parts.next().unwrap());
        let expected = match parts.next().unwrap() {
            "-" => None,
            hex => Some(unhex(hex)),
        };
        let ours = lzf::compress(&input, out_len);
        assert_eq!(ours, expected, "vector on line {}", line_no + 1);
        if let Some(packed) = ours {
            assert_eq!(lzf::decompress(&packed, input.len()).unwrap(), input);
        }
        checked += 1;
    }
    assert_eq!(checked, 250);
}
