//! Checks the codec against payloads recorded from a real Redis 7.0.15
//! (`tools/gen_fixtures.py` -> `fixtures/dump_cases.txt`), and that
//! Redis accepted our own payloads (`tools/check_restore.py` ->
//! `fixtures/restore_checks.txt`). Needs no running Redis.

use super::common::{hex, load_cases, normalized, Case, Mode, Subject};
use fallow_store::rdb::{decode_dump, decode_function_dump, encode_dump, encode_function_dump};

fn our_payload(case: &Case) -> Vec<u8> {
    match &case.subject {
        Subject::Value(value) => encode_dump(value, &case.limits),
        Subject::Functions(libraries) => {
            let refs: Vec<&[u8]> = libraries.iter().map(Vec::as_slice).collect();
            encode_function_dump(&refs)
        }
    }
}

/// Runs `check` on every case of `mode`; fails listing every failing case.
fn check_all(mode: Mode, check: impl Fn(&Case) -> Result<(), String>) -> usize {
    let cases: Vec<Case> = load_cases()
        .into_iter()
        .filter(|c| c.mode == mode)
        .collect();
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|case| check(case).err().map(|why| format!("{}: {why}", case.name)))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    cases.len()
}

fn decodes_to_subject(case: &Case) -> Result<(), String> {
    match &case.subject {
        Subject::Value(expected) => {
            let decoded = decode_dump(&case.payload).map_err(|e| format!("decode failed: {e}"))?;
            if normalized(&decoded) != normalized(expected) {
                return Err("decoded value differs".to_string());
            }
        }
        Subject::Functions(expected) => {
            let mut decoded =
                decode_function_dump(&case.payload).map_err(|e| format!("decode failed: {e}"))?;
            let mut expected = expected.clone();
            decoded.sort();
            expected.sort();
            if decoded != expected {
                return Err("decoded libraries differ".to_string());
            }
        }
    }
    Ok(())
}

#[test]
fn exact_cases_encode_byte_identically() {
    let count = check_all(Mode::Exact, |case| {
        let ours = our_payload(case);
        if ours == case.payload {
            return Ok(());
        }
        let at = ours.iter().zip(&case.payload).position(|(a, b)| a != b);
        Err(format!(
            "bytes differ at {at:?} (ours {} bytes, redis {} bytes); ours {}",
            ours.len(),
            case.payload.len(),
            hex(&ours[..ours.len().min(64)])
        ))
    });
    assert!(count >= 150, "only {count} exact cases");
}

#[test]
fn exact_cases_decode() {
    check_all(Mode::Exact, decodes_to_subject);
}

#[test]
fn hashtable_cases_decode() {
    let count = check_all(Mode::Decode, decodes_to_subject);
    assert!(count >= 8, "only {count} decode cases");
}

#[test]
fn legacy_encodings_decode_as_redis_reads_them() {
    let count = check_all(Mode::Legacy, decodes_to_subject);
    assert!(count >= 13, "only {count} legacy cases");
}

#[test]
fn redis_restored_our_payloads() {
    let text =
        std::fs::read_to_string(super::common::RESTORE_CHECKS_PATH).expect("restore_checks.txt");
    let records: std::collections::HashMap<&str, (&str, &str)> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|line| {
            let mut words = line.split(' ');
            let name = words.next().unwrap();
            (name, (words.next().unwrap(), words.next().unwrap()))
        })
        .collect();
    let mut checked = 0;
    for case in load_cases().iter().filter(|c| c.mode != Mode::Legacy) {
        let (crc_hex, verdict) = records
            .get(case.name.as_str())
            .unwrap_or_else(|| panic!("{}: no restore check recorded", case.name));
        let ours = our_payload(case);
        let trailer = hex(&ours[ours.len() - 8..]);
        assert_eq!(
            &trailer, crc_hex,
            "{}: payload changed since Redis checked it; rerun tools/check_restore.py",
            case.name
        );
        assert_eq!(
            *verdict, "ok",
            "{}: Redis did not accept our payload",
            case.name
        );
        checked += 1;
    }
    assert!(checked >= 150);
}
