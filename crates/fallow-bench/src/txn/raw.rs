//! Claret §6.1, the raw operation mix: every transaction does `ops_per_txn` operations on sets, each an
//! add (`SADD key x`) with probability `add_fraction`, else a size (`SCARD key`); keys are zipf-distributed.
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
        (0..self.params.ops_per_txn)
            .map(|_| {
                let key = self.keys.next_key(&mut self.rng);
                if self.rng.gen_bool(self.params.add_fraction) {
                    let element = self.rng.gen_range(0..ELEMENTS);
                    RawOp::Add { key, element }
                } else {
                    RawOp::Size { key }
                }
            })
            .collect()
    }
}

pub fn set_key(key: u64) -> String {
    format!("raw:set:{key}")
}

impl Actor for RawActor {
    fn act(&mut self, txns: &mut dyn TxnRunner) -> anyhow::Result<()> {
        let ops = self.next_ops();
        txns.run("raw", &mut |c| {
            for (index, op) in ops.iter().enumerate() {
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
