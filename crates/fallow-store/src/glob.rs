//! Glob-style pattern matching with Redis's rules (KEYS, SCAN MATCH, PSUBSCRIBE, HSCAN...):
//! `*`, `?`, `[abc]`, `[^a-z]`, and `\` to escape.

/// True when `text` matches `pattern`.
///
/// Every token but `*` matches exactly one byte, so only the latest `*` ever needs to be retried: on a
/// mismatch it covers one more byte and matching resumes after it. That bounds the work by
/// `pattern.len() * text.len()` steps; the recursive form retried every earlier `*` too and took exponential
/// time on patterns such as `*a*a*a*a*a*b` (Redis's CVE-2022-36021), which a client can send to KEYS, SCAN
/// MATCH or PSUBSCRIBE.
pub fn matches(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    // The pattern index after the latest `*`, and the text index where what it covers ends.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() {
            if pattern[p] == b'*' {
                star = Some((p + 1, t));
                p += 1;
                continue;
            }
            if let Some(next) = match_one(pattern, p, text[t]) {
                p = next;
                t += 1;
                continue;
            }
        }
        let Some((after_star, covered_end)) = star else {
            return false;
        };
        star = Some((after_star, covered_end + 1));
        p = after_star;
        t = covered_end + 1;
    }
    while pattern.get(p) == Some(&b'*') {
        p += 1;
    }
    p >= pattern.len()
}

/// Matches one byte against the token at `pattern[p]` (not `*`); the index after the token when it matches.
fn match_one(pattern: &[u8], p: usize, byte: u8) -> Option<usize> {
    debug_assert!(pattern[p] != b'*', "a star is not a one-byte token");
    match pattern[p] {
        b'?' => Some(p + 1),
        b'[' => {
            let (matched, next) = match_class(pattern, p + 1, byte);
            matched.then_some(next.min(pattern.len()))
        }
        b'\\' if p + 1 < pattern.len() => (pattern[p + 1] == byte).then_some(p + 2),
        literal => (literal == byte).then_some(p + 1),
    }
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
    use super::{match_class, matches};
    use proptest::prelude::*;

    /// The recursive matcher this file had before, kept as the reference the fast one must agree with.
    fn reference(pattern: &[u8], text: &[u8]) -> bool {
        let (mut p, mut t) = (0, 0);
        while p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    return (t..=text.len())
                        .any(|start| reference(&pattern[p + 1..], &text[start..]))
                }
                b'?' if t < text.len() => t += 1,
                b'[' if t < text.len() => {
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
                literal if t < text.len() && literal == text[t] => t += 1,
                _ => return false,
            }
            p += 1;
        }
        t == text.len()
    }

    proptest! {
        #[test]
        fn agrees_with_the_recursive_matcher(
            pattern in proptest::collection::vec(prop::sample::select(b"ab*?[]^-\\".to_vec()), 0..10),
            text in proptest::collection::vec(prop::sample::select(b"ab*-]".to_vec()), 0..10),
        ) {
            prop_assert_eq!(matches(&pattern, &text), reference(&pattern, &text));
        }
    }

    #[test]
    fn many_stars_take_polynomial_time() {
        // Exponential in the recursive matcher: 2^30 retries; here at most 61 * 64 steps.
        let pattern = [&b"*a".repeat(30)[..], b"*b"].concat();
        assert!(!matches(&pattern, &[b'a'; 64]));
        assert!(matches(&pattern, &[&[b'a'; 64][..], b"b"].concat()));
    }

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
