//! What each connection asks for next: the operation (SET or GET), the key and the value size. One
//! [`Workload`] per connection, so choices need no locks and a run is reproducible from its seed.
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::Zipf;

use crate::options::{Distribution, Ratio, ValueSizes};

/// A request kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Get,
    Set,
}

/// One request to send: the operation, the key number and, for SETs, the value length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub op: Op,
    pub key: u64,
    pub value_bytes: usize,
}

/// Draws key numbers in `0..keys`.
#[derive(Clone, Debug)]
pub enum KeyChooser {
    Uniform {
        keys: u64,
    },
    Zipf {
        zipf: Zipf<f64>,
        keys: u64,
    },
    Sequential {
        next: u64,
        keys: u64,
    },
    HotSet {
        hot_keys: u64,
        keys: u64,
        /// Probability of a hot key scaled to 2^32, so the choice is one integer compare.
        hot_threshold: u64,
    },
}

impl KeyChooser {
    /// A chooser for `distribution`; `start` is where a sequential walk begins (ignored otherwise).
    pub fn new(distribution: Distribution, keys: u64, start: u64) -> anyhow::Result<KeyChooser> {
        Ok(match distribution {
            Distribution::Uniform => KeyChooser::Uniform { keys },
            Distribution::Sequential => KeyChooser::Sequential {
                next: start % keys,
                keys,
            },
            Distribution::Zipf { alpha } => KeyChooser::Zipf {
                zipf: Zipf::new(keys, alpha)
                    .map_err(|e| anyhow::anyhow!("zipf:{alpha} over {keys} keys: {e}"))?,
                keys,
            },
            Distribution::HotSet {
                key_fraction,
                request_fraction,
            } => {
                let hot_keys = ((key_fraction * keys as f64).round() as u64).clamp(1, keys);
                KeyChooser::HotSet {
                    hot_keys,
                    keys,
                    hot_threshold: (request_fraction * (1u64 << 32) as f64) as u64,
                }
            }
        })
    }

    /// The next key number.
    pub fn next_key(&mut self, rng: &mut SmallRng) -> u64 {
        match self {
            KeyChooser::Uniform { keys } => rng.gen_range(0..*keys),
            // Zipf yields ranks 1..=keys as floats; rank 1 becomes key 0.
            KeyChooser::Zipf { zipf, keys } => (rng.sample(*zipf) as u64).clamp(1, *keys) - 1,
            KeyChooser::Sequential { next, keys } => {
                let key = *next;
                *next = if key + 1 == *keys { 0 } else { key + 1 };
                key
            }
            KeyChooser::HotSet {
                hot_keys,
                keys,
                hot_threshold,
            } => {
                let hot = u64::from(rng.gen::<u32>()) < *hot_threshold;
                if hot || *hot_keys == *keys {
                    rng.gen_range(0..*hot_keys)
                } else {
                    rng.gen_range(*hot_keys..*keys)
                }
            }
        }
    }
}

/// Draws value sizes.
#[derive(Clone, Debug)]
pub struct SizeChooser(ValueSizes);

impl SizeChooser {
    pub fn new(sizes: ValueSizes) -> SizeChooser {
        SizeChooser(sizes)
    }

    pub fn next_size(&self, rng: &mut SmallRng) -> usize {
        match &self.0 {
            ValueSizes::Fixed(n) => *n,
            ValueSizes::Range { min, max } => rng.gen_range(*min..=*max),
            ValueSizes::List(sizes) => sizes[rng.gen_range(0..sizes.len())],
        }
    }
}

/// The choices of one connection.
#[derive(Clone, Debug)]
pub struct Workload {
    rng: SmallRng,
    keys: KeyChooser,
    sizes: SizeChooser,
    ratio: Ratio,
}

impl Workload {
    pub fn new(seed: u64, keys: KeyChooser, sizes: SizeChooser, ratio: Ratio) -> Workload {
        Workload {
            rng: SmallRng::seed_from_u64(seed),
            keys,
            sizes,
            ratio,
        }
    }

    /// The next request.
    pub fn next_request(&mut self) -> Request {
        let op = self.next_op();
        let key = self.keys.next_key(&mut self.rng);
        let value_bytes = match op {
            Op::Set => self.sizes.next_size(&mut self.rng),
            Op::Get => 0,
        };
        Request {
            op,
            key,
            value_bytes,
        }
    }

    fn next_op(&mut self) -> Op {
        // Pure mixes draw nothing, so a GET-only run spends no time here.
        match (self.ratio.sets, self.ratio.gets) {
            (0, _) => Op::Get,
            (_, 0) => Op::Set,
            (s, g) if self.rng.gen_range(0..u64::from(s) + u64::from(g)) < u64::from(s) => Op::Set,
            _ => Op::Get,
        }
    }
}

/// The seed of connection `index` (0-based over the whole run): the run's seed, or with
/// `distinct` a different well-mixed seed per connection.
pub fn connection_seed(seed: u64, index: usize, distinct: bool) -> u64 {
    if !distinct {
        return seed;
    }
    // splitmix64 of seed and index: neighbouring indices give unrelated streams.
    let mut z = seed ^ (index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Where connection `index` of `total` starts a sequential walk (and how many requests it sends when
/// `requests` are split over connections): contiguous, as equal as possible, covering `0..requests`.
pub fn share(requests: u64, index: usize, total: usize) -> (u64, u64) {
    let (index, total) = (index as u64, total as u64);
    let base = requests / total;
    let extra = requests % total;
    let start = index * base + index.min(extra);
    (start, base + u64::from(index < extra))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rng() -> SmallRng {
        SmallRng::seed_from_u64(7)
    }

    fn counts(chooser: &mut KeyChooser, keys: u64, draws: usize) -> Vec<u64> {
        let mut rng = rng();
        let mut counts = vec![0u64; keys as usize];
        for _ in 0..draws {
            let key = chooser.next_key(&mut rng);
            assert!(key < keys, "key {key} out of range");
            counts[key as usize] += 1;
        }
        counts
    }

    /// Generalised harmonic number H(n, s) = sum over k of 1/k^s.
    fn harmonic(n: u64, s: f64) -> f64 {
        (1..=n).map(|k| (k as f64).powf(-s)).sum()
    }

    #[test]
    fn zipf_rank_one_frequency_matches_theory() {
        let (keys, draws) = (1000u64, 400_000usize);
        for alpha in [0.5, 0.99, 1.2] {
            let mut chooser = KeyChooser::new(Distribution::Zipf { alpha }, keys, 0).unwrap();
            let counts = counts(&mut chooser, keys, draws);
            let expected_top = 1.0 / harmonic(keys, alpha);
            let expected_second = 2f64.powf(-alpha) / harmonic(keys, alpha);
            let observed_top = counts[0] as f64 / draws as f64;
            let observed_second = counts[1] as f64 / draws as f64;
            assert!(
                (observed_top / expected_top - 1.0).abs() < 0.05,
                "alpha {alpha}: rank 1 frequency {observed_top} vs {expected_top}"
            );
            assert!(
                (observed_second / expected_second - 1.0).abs() < 0.08,
                "alpha {alpha}: rank 2 frequency {observed_second} vs {expected_second}"
            );
            assert!(counts[0] > counts[9] && counts[9] > counts[99]);
        }
    }

    #[test]
    fn uniform_covers_the_key_space_evenly() {
        let (keys, draws) = (100u64, 200_000usize);
        let mut chooser = KeyChooser::new(Distribution::Uniform, keys, 0).unwrap();
        let counts = counts(&mut chooser, keys, draws);
        let expected = draws as f64 / keys as f64;
        for (key, &count) in counts.iter().enumerate() {
            assert!(
                (count as f64 / expected - 1.0).abs() < 0.1,
                "key {key}: {count} draws vs {expected}"
            );
        }
    }

    #[test]
    fn sequential_wraps_at_the_end_of_the_key_space() {
        let mut chooser = KeyChooser::new(Distribution::Sequential, 5, 3).unwrap();
        let mut rng = rng();
        let keys: Vec<u64> = (0..7).map(|_| chooser.next_key(&mut rng)).collect();
        assert_eq!(keys, vec![3, 4, 0, 1, 2, 3, 4]);
    }

    #[test]
    fn hotset_sends_the_requested_fraction_to_the_hot_keys() {
        let (keys, draws) = (1000u64, 200_000usize);
        let distribution = Distribution::HotSet {
            key_fraction: 0.1,
            request_fraction: 0.9,
        };
        let mut chooser = KeyChooser::new(distribution, keys, 0).unwrap();
        let counts = counts(&mut chooser, keys, draws);
        let hot: u64 = counts[..100].iter().sum();
        let hot_fraction = hot as f64 / draws as f64;
        assert!(
            (hot_fraction - 0.9).abs() < 0.01,
            "hot fraction {hot_fraction}"
        );
        // Within the cold set every key is drawn, roughly equally.
        assert!(counts[100..].iter().all(|&c| c > 0));
    }

    #[test]
    fn hotset_of_all_keys_never_leaves_the_range() {
        let distribution = Distribution::HotSet {
            key_fraction: 1.0,
            request_fraction: 0.2,
        };
        let mut chooser = KeyChooser::new(distribution, 10, 0).unwrap();
        let counts = counts(&mut chooser, 10, 10_000);
        assert_eq!(counts.iter().sum::<u64>(), 10_000);
    }

    #[test]
    fn ratio_mixes_sets_and_gets() {
        let sizes = SizeChooser::new(ValueSizes::Range { min: 10, max: 20 });
        let keys = KeyChooser::new(Distribution::Uniform, 10, 0).unwrap();
        let ratio = Ratio { sets: 1, gets: 3 };
        let mut workload = Workload::new(1, keys, sizes, ratio);
        let draws = 40_000;
        let mut sets = 0;
        for _ in 0..draws {
            let request = workload.next_request();
            match request.op {
                Op::Set => {
                    sets += 1;
                    assert!((10..=20).contains(&request.value_bytes));
                }
                Op::Get => assert_eq!(request.value_bytes, 0),
            }
        }
        let set_fraction = sets as f64 / draws as f64;
        assert!((set_fraction - 0.25).abs() < 0.01, "{set_fraction}");
    }

    #[test]
    fn value_size_lists_use_every_entry() {
        let sizes = SizeChooser::new(ValueSizes::List(vec![1, 5, 9]));
        let mut rng = rng();
        let mut seen = [false; 10];
        for _ in 0..1000 {
            seen[sizes.next_size(&mut rng)] = true;
        }
        assert!(seen[1] && seen[5] && seen[9]);
        assert_eq!(seen.iter().filter(|&&s| s).count(), 3);
    }

    #[test]
    fn shares_cover_the_requests_exactly() {
        let total = 7;
        let mut next_start = 0;
        let mut sum = 0;
        for i in 0..total {
            let (start, count) = share(100, i, total);
            assert_eq!(start, next_start);
            next_start = start + count;
            sum += count;
        }
        assert_eq!(sum, 100);
    }

    #[test]
    fn distinct_seeds_differ_and_shared_seeds_agree() {
        assert_eq!(connection_seed(5, 0, false), connection_seed(5, 9, false));
        assert_ne!(connection_seed(5, 0, true), connection_seed(5, 1, true));
    }
}
