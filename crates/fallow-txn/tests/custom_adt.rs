//! The worked example of docs/transactions.md ("Adding a data type"): a max register, written the way a
//! user adds an ADT, with the property test that proves its specification and the server's lock-mode row
//! for its write. This file is the source of truth: every Rust snippet of that section appears in it
//! (`the_guide_quotes_this_file` checks it), so the example always compiles and passes.
use fallow_txn::lock::{Acquire, LockConfig, LockTable};
use fallow_txn::types::summary_bag;
use fallow_txn::{check_spec, Mode};
use max_register::{MaxOp, MaxRegister, OFFER, READ};
use proptest::prelude::*;
use smallvec::{smallvec, SmallVec};

/// The specification, as `crates/fallow-txn/src/types/max_register.rs` would hold it.
mod max_register {
    use fallow_txn::{Access, Adt, Mode};

    /// Operations of a max register: `offer(x)` keeps the larger of x and the value; `get()` reads it.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum MaxOp {
        Offer(i64),
        Get,
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum MaxOutput {
        Done,
        Value(Option<i64>),
    }

    pub struct MaxRegister;

    impl Adt for MaxRegister {
        type State = Option<i64>;
        type Op = MaxOp;
        type Output = MaxOutput;

        const NAME: &'static str = "max-register";

        fn apply(state: &mut Option<i64>, op: &MaxOp) -> MaxOutput {
            match *op {
                MaxOp::Offer(x) => {
                    *state = Some(state.map_or(x, |value| value.max(x)));
                    MaxOutput::Done
                }
                MaxOp::Get => MaxOutput::Value(*state),
            }
        }

        fn access(op: &MaxOp) -> Access {
            match op {
                MaxOp::Offer(_) => Access::Mutate,
                MaxOp::Get => Access::Read,
            }
        }

        fn mode(op: &MaxOp) -> Mode {
            match op {
                MaxOp::Offer(_) => OFFER,
                MaxOp::Get => READ,
            }
        }

        /// offer/offer always; get/get always; offer(x)/get when the offer changes nothing (x ≤ value).
        fn commutes(a: &MaxOp, b: &MaxOp, state: &Option<i64>) -> bool {
            match (*a, *b) {
                (MaxOp::Offer(x), MaxOp::Get) | (MaxOp::Get, MaxOp::Offer(x)) => {
                    state.is_some_and(|value| x <= value)
                }
                _ => true,
            }
        }

        /// Concurrent offers merge into one offer of their maximum.
        fn combinable(op: &MaxOp) -> bool {
            matches!(op, MaxOp::Offer(_))
        }
    }

    /// Every offer shares the lock with every other offer: max is commutative.
    pub const OFFER: Mode = Mode::shared("max.offer");
    /// All reads of every type share one mode name.
    pub const READ: Mode = Mode::shared("read");
}

fn max_op() -> impl Strategy<Value = MaxOp> {
    prop_oneof![(-3i64..4).prop_map(MaxOp::Offer), Just(MaxOp::Get)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// Declared-commuting pairs commute, the declaration is symmetric, the modes are sound, and the
    /// specification is exact (it declares every pair whose orders agree).
    #[test]
    fn max_register_specification_holds_and_is_exact(
        state in proptest::option::of(-3i64..4),
        a in max_op(),
        b in max_op(),
    ) {
        check_spec::<MaxRegister>(&state, &a, &b, true).map_err(TestCaseError::fail)?;
    }
}

#[test]
fn offers_share_the_lock_and_a_read_waits_for_them() {
    let now = std::time::Instant::now();
    let mut locks = LockTable::new(LockConfig::default());
    let best_bid = "auction:7:best";
    assert_eq!(locks.acquire(&best_bid, 1, OFFER, now), Acquire::Granted);
    assert_eq!(locks.acquire(&best_bid, 2, OFFER, now), Acquire::Granted);
    assert_eq!(locks.acquire(&best_bid, 3, READ, now), Acquire::Waiting);
    locks.release(&[best_bid], 1, now);
    assert_eq!(locks.release(&[best_bid], 2, now), vec![(best_bid, 3)]);
}

// ----- the server's row (crates/fallow-server/src/txn/modes.rs), against the same types ------------

/// `fallow_server::txn::Modes`: the modes one command takes on one key.
type Modes = SmallVec<[Mode; 2]>;
/// `ModeRule` of the server's lock-mode table: a write's modes on its first key, from its arguments.
type ModeRule = fn(&[&[u8]]) -> Modes;

/// The server's `ABSTRACT_WRITES` cut down to the bag's row, as it is there, and the example's row.
const ABSTRACT_WRITES: &[(&str, ModeRule)] = &[
    ("bag.add", |_| smallvec![summary_bag::ADD]),
    ("max.offer", |_| smallvec![max_register::OFFER]),
];

#[test]
fn each_write_takes_the_mode_of_its_type() {
    let modes = |command: &str, args: &[&[u8]]| {
        let (_, rule) = ABSTRACT_WRITES
            .iter()
            .find(|(name, _)| *name == command)
            .unwrap();
        rule(args)
    };
    let offer = modes("max.offer", &[b"max.offer", b"auction:7:best", b"120"]);
    assert_eq!(offer.as_slice(), [OFFER]);
    assert_eq!(
        modes("bag.add", &[b"bag.add", b"b", b"1"]).as_slice(),
        [summary_bag::ADD]
    );
}

// ----- the guide quotes this file ---------------------------------------------------------------------

const GUIDE: &str = include_str!("../../../docs/transactions.md");
const GUIDE_SECTION: &str = "## Adding a data type (worked example)";

/// The ```rust blocks of the guide's section, each without the indentation its fence has.
fn guide_snippets() -> Vec<String> {
    let start = GUIDE
        .find(GUIDE_SECTION)
        .expect("the guide has the section");
    let section = &GUIDE[start + GUIDE_SECTION.len()..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    let mut snippets = Vec::new();
    let mut open: Option<(usize, Vec<&str>)> = None;
    for line in section.lines() {
        let fence = line.trim_start();
        let indent = line.len() - fence.len();
        match open.take() {
            None if fence == "```rust" => open = Some((indent, Vec::new())),
            None => {}
            Some((_, lines)) if fence == "```" => snippets.push(lines.join("\n")),
            Some((width, mut lines)) => {
                lines.push(line.get(width..).unwrap_or("").trim_end());
                open = Some((width, lines));
            }
        }
    }
    assert!(
        open.is_none(),
        "a ```rust block of the section is not closed"
    );
    snippets
}

/// Whether `snippet`'s lines are consecutive lines of `source`, all indented alike (a snippet may quote
/// the inside of a module or an impl without its indentation).
fn quotes(source: &str, snippet: &str) -> bool {
    let source: Vec<&str> = source.lines().map(str::trim_end).collect();
    let snippet: Vec<&str> = snippet.lines().collect();
    let first = snippet[0];
    (0..source.len().saturating_sub(snippet.len() - 1)).any(|start| {
        let Some(indent) = source[start].strip_suffix(first) else {
            return false;
        };
        indent.bytes().all(|byte| byte == b' ')
            && snippet.iter().zip(&source[start..]).all(|(line, quoted)| {
                if line.is_empty() {
                    quoted.is_empty()
                } else {
                    quoted.strip_prefix(indent) == Some(line)
                }
            })
    })
}

#[test]
fn the_guide_quotes_this_file() {
    let snippets = guide_snippets();
    assert!(snippets.len() >= 4, "{} snippets", snippets.len());
    let source = include_str!("custom_adt.rs");
    for snippet in snippets {
        assert!(!snippet.trim().is_empty(), "an empty ```rust block");
        assert!(
            quotes(source, &snippet),
            "docs/transactions.md quotes code that is not in crates/fallow-txn/tests/custom_adt.rs:\n{snippet}"
        );
    }
}

#[test]
fn quoting_is_exact() {
    let source = "mod m {\n    fn f() {\n        g();\n    }\n}\n";
    assert!(quotes(source, "fn f() {\n    g();\n}"));
    assert!(quotes(source, "g();"));
    assert!(!quotes(source, "fn f() {\n        g();\n}"));
    assert!(!quotes(source, "fn f() {\n    h();\n}"));
    assert!(!quotes(source, "fn g() {"));
    assert!(!quotes(source, "f();"));
}
