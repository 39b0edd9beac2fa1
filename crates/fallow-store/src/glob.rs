//! Glob-style pattern matching with Redis's rules (KEYS, SCAN MATCH, PSUBSCRIBE, HSCAN...):
//! `*`, `?`, `[abc]`, `[^a-z]`, and `\` to escape.

/// True when `text` matches `pattern`.
pub fn matches(pattern: &[u8], text: &[u8]) -> bool {
    match_from(pattern, text, 0)
}

/// Recursion depth at which matching gives up (Redis does the same against pathological patterns).
const DEPTH_MAX: usize = 1000;

fn match_from(pattern: &[u8], text: &[u8], depth: usize) -> bool {
    if depth > DEPTH_MAX {
        return false;
    }
    let (mut p, mut t) = (0, 0);
    while p < pattern.len() {
        match pattern[p] {
            b'*' => {
                while p + 1 < pattern.len() && pattern[p + 1] == b'*' {
                    p += 1;
                }
                if p + 1 == pattern.len() {
                    return true;
                }
                return (t..=text.len())
                    .any(|start| match_from(&pattern[p + 1..], &text[start..], depth + 1));
            }
            b'?' => {
                if t >= text.len() {
                    return false;
                }
                t += 1;
            }
            b'[' => {
                if t >= text.len() {
                    return false;
                }
                let (matched, next) = match_class(pattern, p + 1, text[t]);
                if !matched {
                    return false;
                }
                p = next;
                t += 1;
                continue;
            }
            b'\\' if p + 1 < pattern.len() => {
                p += 1;
                if t >= text.len() || pattern[p] != text[t] {
                    return false;
                }
                t += 1;
            }
            literal => {
                if t >= text.len() || literal != text[t] {
                    return false;
                }
                t += 1;
            }
        }
        p += 1;
    }
    t == text.len()
}

/// Matches one byte against a `[...]` class starting after `[`; returns (matched, index after `]`).
fn match_class(pattern: &[u8], mut p: usize, byte: u8) -> (bool, usize) {
    let negate = pattern.get(p) == Some(&b'^');
    if negate {
        p += 1;
    }
    let mut matched = false;
    while p < pattern.len() && pattern[p] != b']' {
        if pattern[p] == b'\\' && p + 1 < pattern.len() {
            p += 1;
            matched |= pattern[p] == byte;
        } else if p + 2 < pattern.len() && pattern[p + 1] == b'-' && pattern[p + 2] != b']' {
            let (low, high) = (
                pattern[p].min(pattern[p + 2]),
                pattern[p].max(pattern[p + 2]),
            );
            matched |= low <= byte && byte <= high;
            p += 2;
        } else {
            matched |= pattern[p] == byte;
        }
        p += 1;
    }
    (matched != negate, p + 1)
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn redis_glob_rules() {
        assert!(matches(b"*", b"anything"));
        assert!(matches(b"h?llo", b"hello"));
        assert!(matches(b"h*llo", b"heeeello"));
        assert!(matches(b"h[ae]llo", b"hallo"));
        assert!(!matches(b"h[^e]llo", b"hello"));
        assert!(matches(b"h[a-b]llo", b"hbllo"));
        assert!(matches(b"user:\\*", b"user:*"));
        assert!(!matches(b"user:\\*", b"user:x"));
        assert!(!matches(b"a*b", b"acbd"));
        assert!(matches(b"", b""));
    }
}
