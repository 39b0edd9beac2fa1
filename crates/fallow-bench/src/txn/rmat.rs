//! The follower graph of Retwis: R-MAT (the Kronecker generator of Graph 500) with its parameters
//! A=0.57, B=C=0.19, D=0.05. Every edge picks one quadrant of the adjacency matrix per level, so a few
//! users gather most followers (a power-law degree distribution).
use std::collections::HashSet;

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const A: f64 = 0.57;
const B: f64 = 0.19;
const C: f64 = 0.19;

/// Who follows whom.
pub struct Graph {
    /// `followers[u]`: the users who follow u (and so receive u's posts), sorted.
    pub followers: Vec<Vec<u32>>,
    /// Every edge as (followed, follower), for picking a user to follow in proportion to followers.
    pub edges: Vec<(u32, u32)>,
}

impl Graph {
    pub fn users(&self) -> u32 {
        self.followers.len() as u32
    }

    pub fn mean_followers(&self) -> f64 {
        self.edges.len() as f64 / self.followers.len() as f64
    }
}

/// One R-MAT edge over 2^scale vertices: (row, column).
fn rmat_edge(scale: u32, rng: &mut SmallRng) -> (u32, u32) {
    let (mut row, mut column) = (0u32, 0u32);
    for _ in 0..scale {
        let p: f64 = rng.gen();
        let (down, right) = match p {
            p if p < A => (0, 0),
            p if p < A + B => (0, 1),
            p if p < A + B + C => (1, 0),
            _ => (1, 1),
        };
        row = (row << 1) | down;
        column = (column << 1) | right;
    }
    (row, column)
}

/// 2^scale users and `edge_factor` followers per user on average: distinct edges without self-loops,
/// drawn until there are enough; vertex numbers are shuffled (as Graph 500 does) so the popular users
/// are not the low numbers.
pub fn generate(scale: u32, edge_factor: u32, seed: u64) -> Graph {
    assert!((1..=30).contains(&scale), "scale {scale}");
    let users = 1u32 << scale;
    let target = users as usize * edge_factor as usize;
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut permutation: Vec<u32> = (0..users).collect();
    permutation.shuffle(&mut rng);
    let mut seen = HashSet::with_capacity(target);
    let mut edges = Vec::with_capacity(target);
    while edges.len() < target {
        let (row, column) = rmat_edge(scale, &mut rng);
        if row != column && seen.insert((u64::from(row) << 32) | u64::from(column)) {
            edges.push((permutation[row as usize], permutation[column as usize]));
        }
    }
    let mut followers = vec![Vec::new(); users as usize];
    for &(followed, follower) in &edges {
        followers[followed as usize].push(follower);
    }
    followers.iter_mut().for_each(|f| f.sort_unstable());
    Graph { followers, edges }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graph500_degrees_have_mean_16_and_a_heavy_tail() {
        let graph = generate(16, 16, 42);
        assert_eq!(graph.users(), 65_536);
        assert!((graph.mean_followers() - 16.0).abs() < 1e-9);
        let mut degrees: Vec<usize> = graph.followers.iter().map(Vec::len).collect();
        degrees.sort_unstable_by(|a, b| b.cmp(a));
        // A heavy tail: the most-followed user has hundreds of times the mean, the top 1% of users have
        // a large share of all follows, and many users have almost none.
        assert!(degrees[0] > 100 * 16, "max {}", degrees[0]);
        let top_share = degrees[..655].iter().sum::<usize>() as f64 / graph.edges.len() as f64;
        assert!(top_share > 0.2, "top 1% share {top_share}");
        let median = degrees[degrees.len() / 2];
        assert!(median < 16, "median {median}");
        // Log-binned counts fall with degree (power law) across the tail.
        let bin = |lo: usize, hi: usize| degrees.iter().filter(|&&d| d >= lo && d < hi).count();
        assert!(bin(16, 64) > bin(64, 256) && bin(64, 256) > bin(256, 1024));
    }

    #[test]
    fn the_same_seed_gives_the_same_graph() {
        let (a, b) = (generate(10, 8, 7), generate(10, 8, 7));
        assert_eq!(a.edges, b.edges);
        assert_ne!(a.edges, generate(10, 8, 8).edges);
        assert!(a.edges.iter().all(|(x, y)| x != y));
    }
}
