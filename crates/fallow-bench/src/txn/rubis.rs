//! Claret §6.2, RUBiS: an auction site. Items (30,000 in 62 regions and 40 categories) and users are
//! loaded first; each client then runs user actions drawn from a mix (Claret Table 3). Bids per item
//! follow zipf α=1, and every auction's bidding intensifies exponentially toward its close.
use std::time::Instant;

use rand::distributions::{Distribution as _, WeightedIndex};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::Zipf;

use super::backend::{reply_items, CallError, Calls};
use super::commands::{
    bag_add, bag_mean, call, call_last, command, topn_add, topn_list, topn_max, topn_reserve,
    write, Dialect, Uids,
};
use super::driver::{Actor, TxnRunner, Workload};

pub const REGIONS: u64 = 62;
pub const CATEGORIES: u64 = 40;
/// Items a browse lists from a category or region index.
const BROWSE_ITEMS: u64 = 10;

/// The eight transactions of RUBiS, in the order of the mixes' weights.
pub const KINDS: [&str; 8] = [
    "view-item",
    "browse",
    "bid",
    "sell-item",
    "close-auction",
    "comment",
    "register-user",
    "view-user",
];

/// A transaction mix: Claret Table 3's five columns with each pair split evenly between its two
/// transactions (View/Browse, Open/Close, NewUser/ViewUser).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RubisMix {
    /// 52% view/browse, 45% bid, 1% open/close, 1% comment, 1% new/view user.
    BidHeavy,
    /// 82% view/browse, 10% bid, 4% open/close, 2% comment, 2% new/view user.
    ReadHeavy,
}

impl RubisMix {
    pub fn weights(self) -> [f64; 8] {
        match self {
            RubisMix::BidHeavy => [26.0, 26.0, 45.0, 0.5, 0.5, 1.0, 0.5, 0.5],
            RubisMix::ReadHeavy => [41.0, 41.0, 10.0, 2.0, 2.0, 2.0, 1.0, 1.0],
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            RubisMix::BidHeavy => "bid-heavy",
            RubisMix::ReadHeavy => "read-heavy",
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct RubisParams {
    pub items: u64,
    pub users: u64,
    /// Every auction closes once per period and reopens at once (the load is a steady state).
    pub auction_period_s: f64,
    /// Bids kept per item (TopN's k).
    pub topn_k: u64,
}

pub struct Rubis {
    pub params: RubisParams,
    pub mix: RubisMix,
    pub dialect: Dialect,
    /// Differs between runs on the same data, so client-made ids never repeat.
    pub run_nonce: u64,
    pub epoch: Instant,
}

fn item_key(item: u64) -> String {
    format!("rubis:item:{item}")
}

/// The key of an item by its member in the category and region indexes.
fn item_key_named(member: &str) -> String {
    format!("rubis:item:{member}")
}

fn user_key(user: u64) -> String {
    format!("rubis:user:{user}")
}

/// Where item `item`'s auction is in its period: the seconds left until it closes.
fn seconds_to_close(item: u64, period_s: f64, now_s: f64) -> f64 {
    // Auctions close at staggered times: item i's close is offset by a fixed pseudo-random fraction.
    let offset = (item.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11) as f64 / (1u64 << 53) as f64;
    (offset * period_s - now_s).rem_euclid(period_s)
}

/// Picks the item of a bid (or a view, or a close): popularity zipf α=1, accepted with a probability that
/// grows exponentially as the auction nears its close (time constant a tenth of the period).
pub struct ItemChooser {
    zipf: Zipf<f64>,
    items: u64,
    period_s: f64,
}

impl ItemChooser {
    pub fn new(items: u64, period_s: f64) -> ItemChooser {
        ItemChooser {
            zipf: Zipf::new(items, 1.0).expect("items >= 1"),
            items,
            period_s,
        }
    }

    pub fn next(&self, rng: &mut SmallRng, now_s: f64) -> u64 {
        let tau_s = self.period_s / 10.0;
        loop {
            let item = (rng.sample(self.zipf) as u64).clamp(1, self.items) - 1;
            let left_s = seconds_to_close(item, self.period_s, now_s);
            if rng.gen::<f64>() < (-left_s / tau_s).exp() {
                return item;
            }
        }
    }
}

/// The commands that load the items (with their TopN of bids) and users.
pub fn load_commands(
    params: &RubisParams,
    dialect: Dialect,
) -> impl Iterator<Item = Vec<Vec<u8>>> + '_ {
    let items = (0..params.items).flat_map(move |i| {
        let (category, region) = (i % CATEGORIES, i % REGIONS);
        let hash = command(&[
            &"HSET",
            &item_key(i),
            &"name",
            &format!("item {i}"),
            &"seller",
            &(i % params.users),
            &"category",
            &category,
            &"region",
            &region,
            &"reserve",
            &100u64,
        ]);
        let by_category = command(&[&"ZADD", &format!("rubis:category:{category}"), &i, &i]);
        let by_region = command(&[&"ZADD", &format!("rubis:region:{region}"), &i, &i]);
        let bids = topn_reserve(dialect, &format!("rubis:item:{i}:bids"), params.topn_k);
        [hash, by_category, by_region].into_iter().chain(bids)
    });
    let users = (0..params.users).map(|u| {
        command(&[
            &"HSET",
            &user_key(u),
            &"name",
            &format!("user {u}"),
            &"region",
            &(u % REGIONS),
            &"rating",
            &0u64,
        ])
    });
    items.chain(users)
}

pub fn load_command_count(params: &RubisParams, dialect: Dialect) -> u64 {
    let reserve = topn_reserve(dialect, "", 1).len() as u64;
    (3 + reserve) * params.items + params.users
}

impl Workload for Rubis {
    fn actor(&self, index: usize, seed: u64) -> Box<dyn Actor + '_> {
        Box::new(RubisActor {
            rubis: self,
            rng: SmallRng::seed_from_u64(seed ^ (index as u64).wrapping_mul(0xA24B_AED4_963E_E407)),
            kinds: WeightedIndex::new(self.mix.weights()).expect("positive weights"),
            items: ItemChooser::new(self.params.items, self.params.auction_period_s),
            uids: Uids::new(self.run_nonce, index),
        })
    }
}

struct RubisActor<'a> {
    rubis: &'a Rubis,
    rng: SmallRng,
    kinds: WeightedIndex<f64>,
    items: ItemChooser,
    uids: Uids,
}

impl Actor for RubisActor<'_> {
    fn act(&mut self, txns: &mut dyn TxnRunner) -> anyhow::Result<()> {
        let kind = self.kinds.sample(&mut self.rng);
        let now_s = self.rubis.epoch.elapsed().as_secs_f64();
        let item = self.items.next(&mut self.rng, now_s);
        let user = self.rng.gen_range(0..self.rubis.params.users);
        let d = self.rubis.dialect;
        let k = self.rubis.params.topn_k;
        match kind {
            0 => txns.run(KINDS[0], &mut |c| view_item(c, d, item, k)),
            1 => {
                let index = match self.rng.gen_bool(0.5) {
                    true => format!("rubis:category:{}", self.rng.gen_range(0..CATEGORIES)),
                    false => format!("rubis:region:{}", self.rng.gen_range(0..REGIONS)),
                };
                txns.run(KINDS[1], &mut |c| browse(c, &index))
            }
            2 => {
                let progress = 1.0
                    - seconds_to_close(item, self.rubis.params.auction_period_s, now_s)
                        / self.rubis.params.auction_period_s;
                // Bids rise through the auction, with noise, so the top bids keep changing.
                let amount = (progress * 10_000.0) as u64 + self.rng.gen_range(1..1_000);
                txns.run(KINDS[2], &mut |c| bid(c, d, item, user, amount))
            }
            3 => {
                let uids = &mut self.uids;
                txns.run(KINDS[3], &mut |c| sell_item(c, d, uids, user))
            }
            4 => txns.run(KINDS[4], &mut |c| close_auction(c, d, item)),
            5 => {
                let (to, rating) = (
                    self.rng.gen_range(0..self.rubis.params.users),
                    self.rng.gen_range(1..=5u64),
                );
                let uids = &mut self.uids;
                txns.run(KINDS[5], &mut |c| {
                    comment(c, d, uids, [user, to, item], rating)
                })
            }
            6 => {
                let uids = &mut self.uids;
                txns.run(KINDS[6], &mut |c| register_user(c, d, uids))
            }
            _ => txns.run(KINDS[7], &mut |c| view_user(c, user)),
        }?;
        Ok(())
    }
}

fn view_item(c: &mut dyn Calls, d: Dialect, item: u64, k: u64) -> Result<(), CallError> {
    topn_list(c, d, &format!("rubis:item:{item}:bids"), k)?;
    bag_mean(c, d, &format!("rubis:item:{item}:bidstats"))?;
    call_last(c, &[&"HGETALL", &item_key(item)])?;
    Ok(())
}

/// A listing: the first items of a category or region, then each of them.
fn browse(c: &mut dyn Calls, index: &str) -> Result<(), CallError> {
    let listed = call(c, &[&"ZRANGE", &index, &0u64, &(BROWSE_ITEMS - 1)])?;
    let items = reply_items(&listed);
    for (index, item) in items.iter().enumerate() {
        let key = item_key_named(&String::from_utf8_lossy(item));
        if index + 1 == items.len() {
            call_last(c, &[&"HGET", &key, &"name"])?;
        } else {
            call(c, &[&"HGET", &key, &"name"])?;
        }
    }
    Ok(())
}

/// Claret Figure 2: the bid is a TopN add, so bids on one item commute.
fn bid(c: &mut dyn Calls, d: Dialect, item: u64, user: u64, amount: u64) -> Result<(), CallError> {
    call(c, &[&"HGET", &item_key(item), &"reserve"])?;
    topn_add(
        c,
        d,
        &format!("rubis:item:{item}:bids"),
        amount,
        &user.to_string(),
    )?;
    bag_add(c, d, &format!("rubis:item:{item}:bidstats"), amount)?;
    write(c, &[&"INCRBY", &format!("rubis:item:{item}:nbids"), &1u64])?;
    write(c, &[&"INCRBY", &format!("rubis:user:{user}:nbids"), &1u64])?;
    Ok(())
}

fn sell_item(c: &mut dyn Calls, d: Dialect, uids: &mut Uids, seller: u64) -> Result<(), CallError> {
    let id = uids.next(c, d, "rubis:item-ids")?;
    let (category, region) = (id % CATEGORIES, id % REGIONS);
    // New items get a key space of their own: UID.NEXT's ids may fall in 0..items.
    let member = format!("new-{id}");
    let key = item_key_named(&member);
    write(
        c,
        &[
            &"HSET",
            &key,
            &"seller",
            &seller,
            &"category",
            &category,
            &"region",
            &region,
        ],
    )?;
    write(
        c,
        &[&"ZADD", &format!("rubis:category:{category}"), &id, &member],
    )?;
    write(
        c,
        &[&"ZADD", &format!("rubis:region:{region}"), &id, &member],
    )?;
    Ok(())
}

/// Closing reads the best bid and records the winner on the item.
fn close_auction(c: &mut dyn Calls, d: Dialect, item: u64) -> Result<(), CallError> {
    let best = reply_items(&topn_max(c, d, &format!("rubis:item:{item}:bids"))?);
    if let [winner, amount, ..] = best.as_slice() {
        let (winner, amount) = (winner.clone(), amount.clone());
        write(
            c,
            &[
                &"HSET",
                &item_key(item),
                &"winner",
                &winner,
                &"price",
                &amount,
            ],
        )?;
    }
    Ok(())
}

/// A comment from one user to another about an item; it moves the rating of the one it is about.
fn comment(
    c: &mut dyn Calls,
    d: Dialect,
    uids: &mut Uids,
    [from, to, item]: [u64; 3],
    rating: u64,
) -> Result<(), CallError> {
    let id = uids.next(c, d, "rubis:comment-ids")?;
    let key = format!("rubis:comment:{id}");
    write(
        c,
        &[
            &"HSET", &key, &"from", &from, &"to", &to, &"item", &item, &"rating", &rating,
        ],
    )?;
    write(c, &[&"HINCRBY", &user_key(to), &"rating", &rating])?;
    Ok(())
}

fn register_user(c: &mut dyn Calls, d: Dialect, uids: &mut Uids) -> Result<(), CallError> {
    let id = uids.next(c, d, "rubis:user-ids")?;
    let region = id % REGIONS;
    write(
        c,
        &[
            &"HSET",
            &format!("rubis:new-user:{id}"),
            &"region",
            &region,
            &"rating",
            &0u64,
        ],
    )?;
    write(c, &[&"SADD", &format!("rubis:region:{region}:users"), &id])?;
    Ok(())
}

fn view_user(c: &mut dyn Calls, user: u64) -> Result<(), CallError> {
    call(c, &[&"HGETALL", &user_key(user)])?;
    call_last(c, &[&"GET", &format!("rubis:user:{user}:nbids")])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::driver::testing::Recording;

    fn rubis(mix: RubisMix) -> Rubis {
        Rubis {
            params: RubisParams {
                items: 30_000,
                users: 1000,
                auction_period_s: 30.0,
                topn_k: 10,
            },
            mix,
            dialect: Dialect::redis(),
            run_nonce: 1,
            epoch: Instant::now(),
        }
    }

    #[test]
    fn mixes_give_the_table_3_proportions() {
        for mix in [RubisMix::BidHeavy, RubisMix::ReadHeavy] {
            let workload = rubis(mix);
            let mut actor = workload.actor(0, 3);
            let mut recording = Recording::default();
            let actions = 100_000;
            for _ in 0..actions {
                actor.act(&mut recording).unwrap();
            }
            let weights = mix.weights();
            let total: f64 = weights.iter().sum();
            for (kind, weight) in KINDS.iter().zip(weights) {
                let n = recording.txns.iter().filter(|(k, _)| k == kind).count();
                let share = n as f64 / actions as f64;
                assert!(
                    (share - weight / total).abs() < 0.005,
                    "{mix:?} {kind}: {share} vs {}",
                    weight / total
                );
            }
        }
    }

    #[test]
    fn bids_follow_zipf_and_crowd_toward_the_close() {
        let chooser = ItemChooser::new(30_000, 100.0);
        let mut rng = SmallRng::seed_from_u64(5);
        let mut counts = vec![0u64; 30_000];
        let mut near_close = 0;
        let draws = 200_000;
        for n in 0..draws {
            let now_s = n as f64 * 100.0 / draws as f64;
            let item = chooser.next(&mut rng, now_s);
            counts[item as usize] += 1;
            if seconds_to_close(item, 100.0, now_s) < 10.0 {
                near_close += 1;
            }
        }
        // Over a whole period every auction passes its close, so popularity stays zipf α=1.
        let ratio = counts[0] as f64 / counts[9] as f64;
        assert!(
            (ratio / 10.0 - 1.0).abs() < 0.3,
            "rank 1 / rank 10 = {ratio}"
        );
        // The last tenth of an auction gets 1 - 1/e of its bids.
        let share = near_close as f64 / draws as f64;
        assert!((share - 0.632).abs() < 0.02, "share near close {share}");
    }

    #[test]
    fn a_bid_adds_to_the_bids_and_the_bag_and_counts() {
        let mut recording = Recording::default();
        recording
            .run("bid", &mut |c| bid(c, Dialect::redis(), 7, 3, 500))
            .unwrap();
        let names: Vec<String> = recording.txns[0]
            .1
            .iter()
            .map(|c| String::from_utf8_lossy(&c[0]).into_owned())
            .collect();
        assert_eq!(names, ["HGET", "ZADD", "INCRBY", "INCRBY", "INCRBY"]);
    }
}
