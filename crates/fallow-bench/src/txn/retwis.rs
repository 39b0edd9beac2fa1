//! Claret §6.3, Retwis: a Twitter clone over an R-MAT follower graph. A post or a repost is one
//! transaction that reads the poster's followers and pushes the post onto every follower's timeline; a
//! timeline view reads the timeline, then loads each post in a transaction of its own (as Claret). Reposts
//! go to already-popular posts (ranked by reposts, the rank drawn from a geometric distribution), so
//! reposts follow a power law.
use std::time::{SystemTime, UNIX_EPOCH};

use rand::distributions::{Distribution as _, WeightedIndex};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::Geometric;

use super::backend::{reply_items, CallError, Calls};
use super::commands::{call, call_last, command, write, Arg, Dialect, Uids};
use super::driver::{Actor, TxnRunner, Workload};
use super::rmat::Graph;

/// Posts a timeline view shows (and loads).
const TIMELINE_POSTS: u64 = 10;
/// Popular posts a reposting user ranks.
const RANKED_POSTS: u64 = 20;
/// A reposter takes the most reposted post with this probability, the next one with this of the rest...
const REPOST_TOP_PROBABILITY: f64 = 0.3;
/// Members per SADD when loading follower sets.
const LOAD_MEMBERS_PER_COMMAND: usize = 512;

/// The five user actions of Claret Table 3, in the order of the mixes' weights.
pub const ACTIONS: [&str; 5] = ["timeline", "repost", "post", "follow", "new-user"];

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RetwisMix {
    /// 90% timeline, 6% repost, 2% post, 1% follow, <1% new user (0.5%).
    PostHeavy,
    /// 98% timeline, 1% repost, 0.5% post, 0.2% follow, <0.1% new user (0.05%).
    ReadHeavy,
}

impl RetwisMix {
    pub fn weights(self) -> [f64; 5] {
        match self {
            RetwisMix::PostHeavy => [90.0, 6.0, 2.0, 1.0, 0.5],
            RetwisMix::ReadHeavy => [98.0, 1.0, 0.5, 0.2, 0.05],
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            RetwisMix::PostHeavy => "post-heavy",
            RetwisMix::ReadHeavy => "read-heavy",
        }
    }
}

pub struct Retwis<'g> {
    pub graph: &'g Graph,
    pub mix: RetwisMix,
    pub dialect: Dialect,
    pub run_nonce: u64,
}

fn followers_key(user: u64) -> String {
    format!("rt:followers:{user}")
}

fn following_key(user: u64) -> String {
    format!("rt:following:{user}")
}

/// The commands that load the graph: each user's follower and following sets.
pub fn load_commands(graph: &Graph) -> Vec<Vec<Vec<u8>>> {
    let mut following = vec![Vec::new(); graph.followers.len()];
    for &(followed, follower) in &graph.edges {
        following[follower as usize].push(followed);
    }
    let sets = |key: fn(u64) -> String, lists: &[Vec<u32>]| -> Vec<Vec<Vec<u8>>> {
        let mut commands = Vec::new();
        for (user, members) in lists.iter().enumerate() {
            for chunk in members.chunks(LOAD_MEMBERS_PER_COMMAND) {
                let mut c = command(&[&"SADD", &key(user as u64)]);
                c.extend(chunk.iter().map(|m| m.to_string().into_bytes()));
                commands.push(c);
            }
        }
        commands
    };
    let mut commands = sets(followers_key, &graph.followers);
    commands.extend(sets(following_key, &following));
    commands
}

impl Workload for Retwis<'_> {
    fn actor(&self, index: usize, seed: u64) -> Box<dyn Actor + '_> {
        Box::new(RetwisActor {
            retwis: self,
            rng: SmallRng::seed_from_u64(seed ^ (index as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93)),
            actions: WeightedIndex::new(self.mix.weights()).expect("positive weights"),
            rank: Geometric::new(REPOST_TOP_PROBABILITY).expect("a probability"),
            uids: Uids::new(self.run_nonce, index),
        })
    }
}

struct RetwisActor<'a> {
    retwis: &'a Retwis<'a>,
    rng: SmallRng,
    actions: WeightedIndex<f64>,
    rank: Geometric,
    uids: Uids,
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

impl Actor for RetwisActor<'_> {
    fn act(&mut self, txns: &mut dyn TxnRunner) -> anyhow::Result<()> {
        let graph = self.retwis.graph;
        let user = u64::from(self.rng.gen_range(0..graph.users()));
        let d = self.retwis.dialect;
        match self.actions.sample(&mut self.rng) {
            0 => self.timeline(txns, user)?,
            1 => self.repost(txns, user)?,
            2 => {
                let uids = &mut self.uids;
                txns.run("post", &mut |c| {
                    let id = uids.next(c, d, "rt:post-ids")?;
                    write(
                        c,
                        &[
                            &"HSET",
                            &format!("rt:post:{id}"),
                            &"user",
                            &user,
                            &"body",
                            &"hello",
                        ],
                    )?;
                    fan_out(c, user, &id)
                })?;
            }
            3 => {
                // Whom to follow: the followed end of a random edge, so popular users gain followers.
                let (followed, _) = graph.edges[self.rng.gen_range(0..graph.edges.len())];
                txns.run("follow", &mut |c| {
                    write(c, &[&"SADD", &followers_key(u64::from(followed)), &user])?;
                    write(c, &[&"SADD", &following_key(user), &followed])?;
                    Ok(())
                })?;
            }
            _ => {
                let uids = &mut self.uids;
                txns.run("new-user", &mut |c| {
                    let id = uids.next(c, d, "rt:user-ids")?;
                    write(
                        c,
                        &[&"HSET", &format!("rt:user:new:{id}"), &"name", &"someone"],
                    )?;
                    Ok(())
                })?;
            }
        }
        Ok(())
    }
}

impl RetwisActor<'_> {
    fn timeline(&mut self, txns: &mut dyn TxnRunner, user: u64) -> anyhow::Result<()> {
        let mut posts = Vec::new();
        let key = format!("rt:timeline:{user}");
        txns.run("timeline", &mut |c| {
            posts = reply_items(&call_last(
                c,
                &[&"ZREVRANGE", &key, &0u64, &(TIMELINE_POSTS - 1)],
            )?);
            Ok(())
        })?;
        for post in posts {
            let key = format!("rt:post:{}", String::from_utf8_lossy(&post));
            txns.run("load-post", &mut |c| {
                call_last(c, &[&"HGETALL", &key]).map(drop)
            })?;
        }
        Ok(())
    }

    /// Ranks the popular posts (one transaction), then reposts one of them (another).
    fn repost(&mut self, txns: &mut dyn TxnRunner, user: u64) -> anyhow::Result<()> {
        let mut ranked = Vec::new();
        txns.run("rank-posts", &mut |c| {
            ranked = reply_items(&call_last(
                c,
                &[&"ZREVRANGE", &"rt:popular", &0u64, &(RANKED_POSTS - 1)],
            )?);
            Ok(())
        })?;
        if ranked.is_empty() {
            return Ok(());
        }
        let pick = (self.rank.sample(&mut self.rng) as usize).min(ranked.len() - 1);
        let id = String::from_utf8_lossy(&ranked[pick]).into_owned();
        txns.run("repost", &mut |c| {
            write(
                c,
                &[&"HINCRBY", &format!("rt:post:{id}"), &"reposts", &1u64],
            )?;
            fan_out(c, user, &id)
        })?;
        Ok(())
    }
}

/// The post goes onto the poster's own list, the popularity ranking and every follower's timeline.
fn fan_out(c: &mut dyn Calls, user: u64, id: &dyn Arg) -> Result<(), CallError> {
    let followers = reply_items(&call(c, &[&"SMEMBERS", &followers_key(user)])?);
    write(c, &[&"LPUSH", &format!("rt:posts:{user}"), id])?;
    write(c, &[&"ZINCRBY", &"rt:popular", &1u64, id])?;
    let time_us = now_us();
    for follower in followers {
        let key = format!("rt:timeline:{}", String::from_utf8_lossy(&follower));
        write(c, &[&"ZADD", &key, &time_us, id])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::driver::testing::Recording;
    use crate::txn::rmat;

    #[test]
    fn mixes_give_the_table_3_proportions() {
        let graph = rmat::generate(8, 4, 1);
        for mix in [RetwisMix::PostHeavy, RetwisMix::ReadHeavy] {
            let retwis = Retwis {
                graph: &graph,
                mix,
                dialect: Dialect::redis(),
                run_nonce: 1,
            };
            let mut actor = retwis.actor(0, 9);
            let mut recording = Recording {
                array_reply: vec![b"5".to_vec()],
                ..Recording::default()
            };
            let actions = 100_000;
            for _ in 0..actions {
                actor.act(&mut recording).unwrap();
            }
            let weights = mix.weights();
            let total: f64 = weights.iter().sum();
            // Each action's first transaction names it (a repost starts by ranking the posts).
            let first = ["timeline", "rank-posts", "post", "follow", "new-user"];
            for (kind, weight) in first.iter().zip(weights) {
                let n = recording.txns.iter().filter(|(k, _)| k == kind).count();
                let share = n as f64 / actions as f64;
                assert!(
                    (share - weight / total).abs() < 0.004,
                    "{mix:?} {kind}: {share}"
                );
            }
        }
    }

    #[test]
    fn a_post_reaches_every_follower() {
        let mut recording = Recording {
            array_reply: vec![b"4".to_vec(), b"9".to_vec()],
            ..Recording::default()
        };
        recording
            .run("post", &mut |c| fan_out(c, 1, &77u64))
            .unwrap();
        let commands = &recording.txns[0].1;
        let timelines: Vec<&[u8]> = commands
            .iter()
            .filter(|c| c[0] == b"ZADD")
            .map(|c| c[1].as_slice())
            .collect();
        assert_eq!(timelines, [b"rt:timeline:4".as_slice(), b"rt:timeline:9"]);
    }

    #[test]
    fn loading_covers_every_edge_both_ways() {
        let graph = rmat::generate(8, 4, 1);
        let members: usize = load_commands(&graph).iter().map(|c| c.len() - 2).sum();
        assert_eq!(members, 2 * graph.edges.len());
    }
}
