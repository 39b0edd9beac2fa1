//! Prints our payload for every non-legacy fixture case as `<name> <hex>`,
//! for `tests/rdb/tools/check_restore.py` to RESTORE into a real Redis.

#[path = "../tests/rdb/common.rs"]
mod common;

use common::{hex, load_cases, Mode, Subject};
use fallow_store::rdb::{encode_dump, encode_function_dump};

fn main() {
    for case in load_cases().iter().filter(|c| c.mode != Mode::Legacy) {
        let payload = match &case.subject {
            Subject::Value(value) => encode_dump(value, &case.limits),
            Subject::Functions(libraries) => {
                let refs: Vec<&[u8]> = libraries.iter().map(Vec::as_slice).collect();
                encode_function_dump(&refs)
            }
        };
        println!("{} {}", case.name, hex(&payload));
    }
}
