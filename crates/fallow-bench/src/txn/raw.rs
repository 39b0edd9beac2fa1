//! Claret §6.1, the raw operation mix: every transaction does `ops_per_txn` operations on sets, each an
//! add (`SADD key x`) with probability `add_fraction`, else a size (`SCARD key`); keys are zipf-distributed.
//! Under skew one transaction often sizes and adds to the same hot set, and its order of operations
//! decides whether transactions deadlock (`Discipline`).
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::commands::{call, call_last, write};
use super::driver::{Actor, TxnRunner, Workload};
use crate::options::Distribution;
use crate::workload::KeyChooser;

/// Elements are drawn from this many values, so sets grow but adds keep finding new elements.
const ELEMENTS: u64 = 1 << 20;

/// One point of the raw sweep.
#[derive(Clone, Copy, Debug)]
pub struct RawParams {
    pub keys: u64,
    pub ops_per_txn: usize,
    pub add_fraction: f64,
    pub zipf: f64,
    pub discipline: Discipline,
}

/// How a raw transaction orders its operations and takes its locks. The order inside a fallow
/// transaction changes none of its results (reads see the state before it, writes apply at commit), so
/// an application is free to choose it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Discipline {
    /// Claret's mix as it is: operations in the order drawn, each set locked in the mode of its first
    /// operation. Two transactions that size and then add to one set deadlock on the upgrade, and
    /// transactions that meet on two sets in opposite orders deadlock across them.
    Claret,
    /// As drawn, but a set the transaction both sizes and adds to is locked for both up front
    /// (`TXN.LOCK`), so upgrades never deadlock.
    Declared,
    /// Declared, and operations in one global order of sets, so no cycle of waits can form: descending
    /// set number. Sets are numbered by zipf rank, so the hottest are locked last and held shortest (the
    /// usual advice for hot rows); any fixed order would prevent the cycles.
    Ordered,
}

impl Discipline {
    pub fn name(self) -> &'static str {
        match self {
            Discipline::Claret => "claret",
            Discipline::Declared => "declared",
            Discipline::Ordered => "ordered",
        }
    }
}

pub struct Raw {
    pub params: RawParams,
}

/// One operation of a raw transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RawOp {
    Add { key: u64, element: u64 },
    Size { key: u64 },
}

struct RawActor {
    params: RawParams,
    keys: KeyChooser,
    rng: SmallRng,
}

impl Workload for Raw {
    fn actor(&self, index: usize, seed: u64) -> Box<dyn Actor + '_> {
        Box::new(RawActor {
            params: self.params,
            keys: KeyChooser::new(
                Distribution::Zipf {
                    alpha: self.params.zipf,
                },
                self.params.keys,
                0,
            )
            .expect("a valid zipf"),
            rng: SmallRng::seed_from_u64(seed ^ (index as u64).wrapping_mul(0x9E37_79B9)),
        })
    }
}

impl RawActor {
    fn next_ops(&mut self) -> Vec<RawOp> {
        let mut ops: Vec<RawOp> = (0..self.params.ops_per_txn)
            .map(|_| {
                let key = self.keys.next_key(&mut self.rng);
                if self.rng.gen_bool(self.params.add_fraction) {
                    let element = self.rng.gen_range(0..ELEMENTS);
                    RawOp::Add { key, element }
                } else {
                    RawOp::Size { key }
                }
            })
            .collect();
        if self.params.discipline == Discipline::Ordered {
            // stable: operations on one set keep their drawn order
            ops.sort_by_key(|op| std::cmp::Reverse(op.key()));
        }
        ops
    }
}

impl RawOp {
    fn key(&self) -> u64 {
        match *self {
            RawOp::Add { key, .. } | RawOp::Size { key } => key,
        }
    }
}

/// The sets a transaction both sizes and adds to: it locks them up front, or two such transactions would
/// each hold the set's read mode and deadlock when both ask for the add mode.
fn read_and_written(ops: &[RawOp]) -> Vec<u64> {
    let mut keys: Vec<u64> = ops
        .iter()
        .filter_map(|op| match *op {
            RawOp::Size { key } => Some(key),
            RawOp::Add { .. } => None,
        })
        .filter(|&read| {
            ops.iter()
                .any(|op| matches!(*op, RawOp::Add { key, .. } if key == read))
        })
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

pub fn set_key(key: u64) -> String {
    format!("raw:set:{key}")
}

impl Actor for RawActor {
    fn act(&mut self, txns: &mut dyn TxnRunner) -> anyhow::Result<()> {
        let ops = self.next_ops();
        let declared = match self.params.discipline {
            Discipline::Claret => Vec::new(),
            Discipline::Declared | Discipline::Ordered => read_and_written(&ops),
        };
        txns.run("raw", &mut |c| {
            for (index, op) in ops.iter().enumerate() {
                // Just before the set's first operation, so ordered transactions keep their key order.
                if declared.contains(&op.key()) && ops[..index].iter().all(|o| o.key() != op.key())
                {
                    c.lock(&[set_key(op.key()).as_bytes()])?;
                }
                match *op {
                    RawOp::Add { key, element } => write(c, &[&"SADD", &set_key(key), &element])?,
                    RawOp::Size { key } if index + 1 == ops.len() => {
                        call_last(c, &[&"SCARD", &set_key(key)]).map(drop)?
                    }
                    RawOp::Size { key } => call(c, &[&"SCARD", &set_key(key)]).map(drop)?,
                };
            }
            Ok(())
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::driver::testing::Recording;

    fn params(add_fraction: f64, zipf: f64) -> RawParams {
        RawParams {
            keys: 10_000,
            ops_per_txn: 4,
            add_fraction,
            zipf,
            discipline: Discipline::Claret,
        }
    }

    fn run(params: RawParams, actions: usize) -> Recording {
        let raw = Raw { params };
        let mut actor = raw.actor(0, 1);
        let mut recording = Recording::default();
        for _ in 0..actions {
            actor.act(&mut recording).unwrap();
        }
        recording
    }

    #[test]
    fn transactions_mix_adds_and_sizes_as_asked() {
        let recording = run(params(0.25, 0.6), 10_000);
        let commands: Vec<&Vec<Vec<u8>>> =
            recording.txns.iter().flat_map(|(_, c)| c.iter()).collect();
        assert!(recording.txns.iter().all(|(_, c)| c.len() == 4));
        let adds = commands.iter().filter(|c| c[0] == b"SADD").count();
        let fraction = adds as f64 / commands.len() as f64;
        assert!((fraction - 0.25).abs() < 0.01, "add fraction {fraction}");
    }

    #[test]
    fn sets_both_sized_and_added_to_are_locked_up_front() {
        use RawOp::{Add, Size};
        let ops = [
            Size { key: 3 },
            Add { key: 3, element: 1 },
            Add { key: 5, element: 1 },
            Size { key: 7 },
        ];
        assert_eq!(read_and_written(&ops), vec![3]);
        let ops = [Add { key: 1, element: 2 }, Size { key: 1 }, Size { key: 1 }];
        assert_eq!(read_and_written(&ops), vec![1]);
        assert!(read_and_written(&[Size { key: 2 }, Size { key: 2 }]).is_empty());
    }

    #[test]
    fn ordered_transactions_lock_hottest_last_and_declare_upgrades() {
        let mut ordered = params(0.5, 1.4);
        ordered.discipline = Discipline::Ordered;
        let recording = run(ordered, 2_000);
        let mut declared = 0;
        for (_, commands) in &recording.txns {
            let keys: Vec<&[u8]> = commands.iter().map(|c| c[1].as_slice()).collect();
            let numbers: Vec<u64> = keys
                .iter()
                .map(|key| {
                    std::str::from_utf8(&key[b"raw:set:".len()..])
                        .unwrap()
                        .parse()
                        .unwrap()
                })
                .collect();
            assert!(numbers.windows(2).all(|w| w[0] >= w[1]), "{numbers:?}");
            for (index, command) in commands.iter().enumerate() {
                let later = &commands[index..];
                let both = |name: &[u8]| later.iter().any(|c| c[0] == name && c[1] == command[1]);
                let first_touch = commands[..index].iter().all(|c| c[1] != command[1]);
                if first_touch && both(b"SADD") && both(b"SCARD") {
                    assert_eq!(command[0], b"TXN.LOCK", "{commands:?}");
                }
            }
            declared += commands.iter().filter(|c| c[0] == b"TXN.LOCK").count();
        }
        assert!(
            declared > 100,
            "zipf 1.4 often sizes and adds to one set: {declared}"
        );
    }

    #[test]
    fn keys_follow_the_zipf_law() {
        let recording = run(params(0.5, 1.0), 50_000);
        let mut counts = vec![0u64; 10_000];
        for (_, commands) in &recording.txns {
            for c in commands {
                let key: usize = std::str::from_utf8(&c[1]).unwrap()["raw:set:".len()..]
                    .parse()
                    .unwrap();
                counts[key] += 1;
            }
        }
        let draws: u64 = counts.iter().sum();
        let harmonic: f64 = (1..=10_000).map(|k| 1.0 / k as f64).sum();
        let top = counts[0] as f64 / draws as f64;
        assert!((top * harmonic - 1.0).abs() < 0.05, "rank-1 share {top}");
        // Rank 10 is drawn a tenth as often as rank 1 under zipf 1.
        let ratio = counts[0] as f64 / counts[9] as f64;
        assert!(
            (ratio / 10.0 - 1.0).abs() < 0.15,
            "rank 1 / rank 10 = {ratio}"
        );
    }
}
