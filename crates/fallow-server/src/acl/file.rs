//! The ACL file (`aclfile`): ACL LIST lines, read at start and by ACL LOAD (all or nothing, with Redis
//! 7.0's error texts naming the line), written by ACL SAVE (temporary file, fsync, rename).
use super::{merge_selectors, Acl, RuleError, User};
use std::collections::BTreeMap;
use std::path::Path;

/// Largest ACL file read: a user line is rarely over a few kilobytes and users are bounded.
pub const FILE_BYTES_MAX: u64 = 64 << 20;

const ROLLBACK_WARNING: &str =
    "WARNING: ACL errors detected, no change to the previously active ACL rules was performed";

/// Reads the users of `path`. Err is the error reply's text (after `ERR `).
pub fn load(path: &str) -> Result<BTreeMap<String, User>, String> {
    let opened = std::fs::File::open(path).and_then(|file| {
        let size = file.metadata()?.len();
        if size > FILE_BYTES_MAX {
            return Err(std::io::Error::other(format!(
                "larger than {FILE_BYTES_MAX} bytes"
            )));
        }
        std::io::read_to_string(file)
    });
    let text = opened.map_err(|error| {
        format!(
            "Error loading ACLs, opening file '{path}': {}",
            io_error_text(&error)
        )
    })?;
    parse(path, &text)
}

/// strerror's text, as Redis prints it (Rust adds " (os error N)").
fn io_error_text(error: &std::io::Error) -> String {
    let text = error.to_string();
    match text.find(" (os error") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// The users of an ACL file's text; a file without `default` gets a new default user. Err lists every
/// error as Redis's ACLLoadFromFile does.
pub fn parse(path: &str, text: &str) -> Result<BTreeMap<String, User>, String> {
    let mut users = BTreeMap::new();
    let mut seen = std::collections::HashSet::new();
    let mut errors = String::new();
    for (index, line) in text.split('\n').enumerate() {
        let number = index + 1;
        let line = line.trim_matches([' ', '\t', '\r', '\n']);
        if line.is_empty() {
            continue;
        }
        let words: Vec<&str> = line.split(' ').collect();
        if words[0] != "user" || words.len() < 2 {
            errors.push_str(&format!(
                "{path}:{number} should start with user keyword followed by the username. "
            ));
            continue;
        }
        let name = words[1];
        if name.is_empty() || name.bytes().any(|byte| byte.is_ascii_control()) {
            errors.push_str(&format!(
                "'{path}:{number}: username '{name}' contains invalid characters. "
            ));
            continue;
        }
        if !seen.insert(name.to_string()) {
            errors.push_str(&format!(
                "WARNING: Duplicate user '{name}' found on line {number}. "
            ));
            continue;
        }
        let Ok(rules) = merge_selectors(&words[2..]) else {
            errors.push_str(&format!(
                "{path}:{number}: Unmatched parenthesis in selector definition."
            ));
            continue;
        };
        let mut user = User::new(name);
        let mut reported_syntax = false;
        for rule in &rules {
            let rule = rule.trim_matches(['\t', '\r', '\n']);
            match user.apply(rule) {
                Ok(()) => {}
                Err(RuleError::UnknownCommand) => errors.push_str(&format!(
                    "{path}:{number}: Error in applying operation '{rule}': {}. ",
                    RuleError::UnknownCommand.message()
                )),
                // Only the first other error: it may explain the ones after it.
                Err(error) if !reported_syntax => {
                    reported_syntax = true;
                    errors.push_str(&format!("{path}:{number}: {}. ", error.message()));
                }
                Err(_) => {}
            }
        }
        if errors.is_empty() {
            users.insert(name.to_string(), user);
        }
    }
    if !errors.is_empty() {
        return Err(errors + ROLLBACK_WARNING);
    }
    users
        .entry("default".to_string())
        .or_insert_with(User::default_user);
    Ok(users)
}

/// The file's text: one ACL LIST line per user, in name order.
pub fn text(acl: &Acl) -> String {
    acl.users
        .values()
        .map(|user| user.describe() + "\n")
        .collect()
}

/// Writes the users to `path` atomically: a temporary file beside it, synced, renamed over it, and the
/// directory synced, so a crash leaves the old file or the new one.
pub fn save(path: &str, acl: &Acl) -> std::io::Result<()> {
    crate::atomic_file::replace(Path::new(path), text(acl).as_bytes())
}
