//! LCS of two strings (Redis 7.0's lcsCommand in t_string.c): the longest common subsequence by the
//! textbook dynamic program over a `(len_a + 1) x (len_b + 1)` table of u32 lengths, then a walk back from
//! the last cell that yields the subsequence and its matching ranges, last range first, exactly as Redis
//! reports them. The table is transient and can be large (4 bytes per cell): the caller bounds it with
//! `table_bytes` before asking for it (Redis refuses past proto-max-bulk-len), and its allocation is
//! fallible.

/// A run of consecutive matching bytes: inclusive positions in each string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Match {
    pub a: (u32, u32),
    pub b: (u32, u32),
    pub len: u32,
}

/// What LCS computes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lcs {
    pub len: u32,
    /// The subsequence (empty when not asked for).
    pub sequence: Vec<u8>,
    /// The matching runs of at least the minimum length, in Redis's order (from the strings' ends).
    pub matches: Vec<Match>,
}

/// What to compute besides the length.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wanted {
    pub sequence: bool,
    pub matches: bool,
    /// Runs shorter than this are not reported (0: all).
    pub min_match_len: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LcsError {
    /// A string of 2^32 - 2 bytes or more (Redis's positions are 32-bit).
    TooLong,
    /// The table could not be allocated.
    NoMemory,
}

/// Bytes of the table for strings of these lengths; None when the count overflows.
pub fn table_bytes(len_a: usize, len_b: usize) -> Option<u64> {
    let rows = (len_a as u64).checked_add(1)?;
    let columns = (len_b as u64).checked_add(1)?;
    let cells = rows.checked_mul(columns)?;
    cells.checked_mul(4)
}

/// Whether a string is too long for LCS's 32-bit positions.
pub fn too_long(len: usize) -> bool {
    len as u64 >= u64::from(u32::MAX) - 1
}

/// Computes the LCS of `a` and `b`. The caller has checked `table_bytes` against its limit.
pub fn lcs(a: &[u8], b: &[u8], wanted: Wanted) -> Result<Lcs, LcsError> {
    if too_long(a.len()) || too_long(b.len()) {
        return Err(LcsError::TooLong);
    }
    if !wanted.sequence && !wanted.matches {
        return Ok(Lcs {
            len: length_only(a, b)?,
            ..Lcs::default()
        });
    }
    let table = Table::fill(a, b)?;
    Ok(table.walk_back(a, b, wanted))
}

/// The length alone needs only two rows of the table (the refusal by table size is the caller's, as for a
/// full walk: Redis allocates the whole table either way).
fn length_only(a: &[u8], b: &[u8]) -> Result<u32, LcsError> {
    let mut previous = zeroed(b.len() + 1)?;
    let mut current = zeroed(b.len() + 1)?;
    for &byte_a in a {
        for (j, &byte_b) in b.iter().enumerate() {
            current[j + 1] = if byte_a == byte_b {
                previous[j] + 1
            } else {
                previous[j + 1].max(current[j])
            };
        }
        std::mem::swap(&mut previous, &mut current);
    }
    Ok(previous[b.len()])
}

fn zeroed(len: usize) -> Result<Vec<u32>, LcsError> {
    let mut cells = Vec::new();
    cells
        .try_reserve_exact(len)
        .map_err(|_| LcsError::NoMemory)?;
    cells.resize(len, 0);
    Ok(cells)
}

/// LCS(i, j): the LCS length of a[..i] and b[..j], row-major.
struct Table {
    cells: Vec<u32>,
    width: usize,
}

impl Table {
    fn fill(a: &[u8], b: &[u8]) -> Result<Table, LcsError> {
        let width = b.len() + 1;
        let cells_len = (a.len() + 1).checked_mul(width).ok_or(LcsError::NoMemory)?;
        let mut table = Table {
            cells: zeroed(cells_len)?,
            width,
        };
        for i in 1..=a.len() {
            for j in 1..=b.len() {
                let value = if a[i - 1] == b[j - 1] {
                    table.at(i - 1, j - 1) + 1
                } else {
                    table.at(i - 1, j).max(table.at(i, j - 1))
                };
                table.cells[i * width + j] = value;
            }
        }
        Ok(table)
    }

    fn at(&self, i: usize, j: usize) -> u32 {
        self.cells[i * self.width + j]
    }

    /// Redis's walk from (len_a, len_b): a match steps diagonally and extends the current run backwards;
    /// otherwise it steps towards the larger neighbour (up on ties going to j). A run is emitted when the
    /// walk leaves it or reaches the first byte of either string.
    fn walk_back(&self, a: &[u8], b: &[u8], wanted: Wanted) -> Lcs {
        let len = self.at(a.len(), b.len());
        let mut sequence = vec![0u8; len as usize];
        let mut matches = Vec::new();
        let mut written = len as usize;
        // Redis marks "no run yet" with a_start == len_a.
        let no_run = a.len();
        let (mut a_start, mut a_end, mut b_start, mut b_end) = (no_run, 0, 0, 0);
        let (mut i, mut j) = (a.len(), b.len());
        while i > 0 && j > 0 {
            let mut emit = false;
            if a[i - 1] == b[j - 1] {
                written -= 1;
                sequence[written] = a[i - 1];
                if a_start == no_run {
                    (a_start, a_end, b_start, b_end) = (i - 1, i - 1, j - 1, j - 1);
                } else if a_start == i && b_start == j {
                    a_start -= 1;
                    b_start -= 1;
                } else {
                    emit = true;
                }
                if a_start == 0 || b_start == 0 {
                    emit = true;
                }
                i -= 1;
                j -= 1;
            } else {
                if self.at(i - 1, j) > self.at(i, j - 1) {
                    i -= 1;
                } else {
                    j -= 1;
                }
                if a_start != no_run {
                    emit = true;
                }
            }
            if emit {
                let run_len = (a_end - a_start + 1) as u32;
                let long_enough =
                    wanted.min_match_len == 0 || u64::from(run_len) >= wanted.min_match_len;
                if wanted.matches && long_enough {
                    matches.push(Match {
                        a: (a_start as u32, a_end as u32),
                        b: (b_start as u32, b_end as u32),
                        len: run_len,
                    });
                }
                a_start = no_run;
            }
        }
        Lcs {
            len,
            sequence: if wanted.sequence {
                sequence
            } else {
                Vec::new()
            },
            matches,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: Wanted = Wanted {
        sequence: true,
        matches: true,
        min_match_len: 0,
    };

    /// The Redis documentation's example, with the replies of Redis 7.0.15.
    #[test]
    fn the_documented_example_matches_redis() {
        let found = lcs(b"ohmytext", b"mynewtext", ALL).unwrap();
        assert_eq!(found.sequence, b"mytext");
        assert_eq!(found.len, 6);
        assert_eq!(
            found.matches,
            [
                Match {
                    a: (4, 7),
                    b: (5, 8),
                    len: 4
                },
                Match {
                    a: (2, 3),
                    b: (0, 1),
                    len: 2
                },
            ]
        );
        let long_runs = Wanted {
            min_match_len: 4,
            ..ALL
        };
        assert_eq!(
            lcs(b"ohmytext", b"mynewtext", long_runs)
                .unwrap()
                .matches
                .len(),
            1
        );
    }

    #[test]
    fn length_only_agrees_with_the_table() {
        let samples: [(&[u8], &[u8]); 5] = [
            (b"", b""),
            (b"abc", b""),
            (b"abcbdab", b"bdcaba"),
            (b"aaaa", b"aa"),
            (b"xyz", b"abc"),
        ];
        for (a, b) in samples {
            let full = lcs(a, b, ALL).unwrap();
            let length = lcs(a, b, Wanted::default()).unwrap();
            assert_eq!(full.len, length.len);
            assert_eq!(full.sequence.len(), full.len as usize);
            assert!(length.sequence.is_empty() && length.matches.is_empty());
        }
    }

    #[test]
    fn ties_walk_as_redis_walks() {
        // Captured from Redis 7.0.15: of the equally long subsequences, the walk's step towards j on
        // ties picks these.
        assert_eq!(lcs(b"abcb", b"bacb", ALL).unwrap().sequence, b"bcb");
        assert_eq!(lcs(b"ab", b"ba", ALL).unwrap().sequence, b"b");
    }

    #[test]
    fn table_sizes_are_bounded() {
        assert_eq!(table_bytes(0, 0), Some(4));
        assert_eq!(table_bytes(9, 9), Some(400));
        assert_eq!(table_bytes(usize::MAX, usize::MAX), None);
        assert!(too_long(u32::MAX as usize - 1));
        assert!(!too_long(1 << 20));
    }
}
