//! The pool: who owns the store's resident bytes and how they are given back (Mortar §5).
//!
//! Every segment belongs to one tenant, so a tenant's resident bytes (its segments plus its collections'
//! heap bytes) are exact. When bytes must go, they come from the ephemeral tenant with the largest
//! fairness `f_i = (c_i / P) / r_i` with `r_i = w_i / Σw`: spare capacity is anyone's, but a tenant over its
//! weighted share loses first. Persistent tenants are never evicted; their bytes are a floor.
//!
//! Two release paths: `Careful` (SCRA) empties the coldest segments item by item (expired first, then
//! least-recently or least-frequently used victims, keeping what is hot by both measures), `Fast` (FCRA)
//! drops whole segments without looking at recency.
use parking_lot::RwLock;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// A tenant's number; 0 is the default tenant.
pub type TenantId = u16;

/// Most tenants a store knows (ids are stored in segments and addresses as u16).
pub const TENANTS_MAX: usize = 1024;

/// Whether a tenant's data may vanish under pressure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TenantKind {
    /// A cache: may be evicted.
    Ephemeral,
    /// Never evicted silently; writes fail with OOM when there is no room.
    Persistent,
}

impl TenantKind {
    pub fn name(self) -> &'static str {
        match self {
            TenantKind::Ephemeral => "ephemeral",
            TenantKind::Persistent => "persistent",
        }
    }

    pub fn from_name(name: &str) -> Option<TenantKind> {
        match name.to_ascii_lowercase().as_str() {
            "ephemeral" => Some(TenantKind::Ephemeral),
            "persistent" => Some(TenantKind::Persistent),
            _ => None,
        }
    }
}

/// How a tenant is declared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantSpec {
    pub name: String,
    pub weight: u32,
    pub kind: TenantKind,
    /// Its keys live in the common keyspace (visible to every shared tenant and the default one).
    pub shared: bool,
    /// Its items may go to tier 2 when they leave RAM (an ephemeral tenant with this off is evicted
    /// instead, as without tier 2: a cache of disk blocks gains nothing from a copy on the same disk).
    /// A persistent tenant always keeps it (its tier-2 log is its durability).
    pub tier2: bool,
}

impl TenantSpec {
    pub fn default_tenant() -> TenantSpec {
        TenantSpec {
            name: "default".into(),
            weight: 100,
            kind: TenantKind::Ephemeral,
            shared: true,
            tier2: true,
        }
    }

    /// The keyspace namespace the tenant's keys live in: 0 (common) or its own.
    pub fn namespace(&self, id: TenantId) -> u16 {
        if self.shared {
            0
        } else {
            id
        }
    }
}

/// Counters of one tenant, updated by the shards.
#[derive(Debug, Default)]
pub struct TenantCounters {
    pub resident_bytes: AtomicUsize,
    /// The tenant is persistent (a copy of its spec's kind that writes read without the tenants' lock).
    pub persistent: AtomicBool,
    /// The tenant is ephemeral with tier 2 off: its items never go to tier 2 (read without the lock by
    /// the shards; false, the default, for ids no tenant has yet).
    pub tier2_off: AtomicBool,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub evicted_keys: AtomicU64,
    pub evicted_bytes: AtomicU64,
}

struct Tenant {
    spec: TenantSpec,
}

/// One tenant as INFO and metrics show it.
#[derive(Clone, Debug)]
pub struct TenantSnapshot {
    pub id: TenantId,
    pub name: String,
    pub weight: u32,
    pub kind: TenantKind,
    pub shared: bool,
    pub tier2: bool,
    pub resident_bytes: usize,
    /// r_i = w_i / Σw over the tenants that hold bytes (see `share_of`).
    pub share: f64,
    /// f_i = (c_i / P) / r_i, P = the pool limit (or the pool's resident bytes when unlimited).
    pub fairness: f64,
    pub hits: u64,
    pub misses: u64,
    pub evicted_keys: u64,
    pub evicted_bytes: u64,
}

/// r_i = w_i / Σw, the sum over the tenants that hold bytes: a tenant that holds nothing (the idle
/// default tenant, one defined but not yet used) takes no share from the others. For such a tenant the
/// share is the one it would have on joining, w_i / (Σw + w_i).
fn share_of(weight: u32, resident_bytes: usize, active_weight_sum: f64) -> f64 {
    let weight = weight as f64;
    if resident_bytes > 0 {
        weight / active_weight_sum
    } else {
        weight / (active_weight_sum + weight)
    }
}

/// Which release path a reclaim takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReclaimPath {
    /// SCRA: item by item; items hot by both recency and frequency survive (re-stored).
    Careful,
    /// FCRA: whole segments in slot order.
    Fast,
}

impl ReclaimPath {
    pub fn name(self) -> &'static str {
        match self {
            ReclaimPath::Careful => "careful",
            ReclaimPath::Fast => "fast",
        }
    }
}

/// What one reclaim did.
#[derive(Clone, Copy, Debug)]
pub struct ReclaimReport {
    pub path: ReclaimPath,
    pub requested_bytes: usize,
    /// Resident bytes given back (segments unmapped and collection bytes freed, less survivors re-stored).
    pub released_bytes: usize,
    pub objects: u64,
    pub duration: Duration,
    /// The longest a shard stayed locked by one step: what a client could wait behind the reclaim.
    pub longest_hold: Duration,
}

/// Totals of one release path.
#[derive(Clone, Copy, Debug, Default)]
pub struct PathStats {
    pub runs: u64,
    pub objects: u64,
    pub bytes: u64,
    pub micros: u64,
}

/// Totals of both paths and the last reclaim.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReclaimStats {
    pub careful: PathStats,
    pub fast: PathStats,
    pub last: Option<ReclaimReport>,
}

#[derive(Default)]
struct PathCounters {
    runs: AtomicU64,
    objects: AtomicU64,
    bytes: AtomicU64,
    micros: AtomicU64,
}

impl PathCounters {
    fn snapshot(&self) -> PathStats {
        PathStats {
            runs: self.runs.load(Ordering::Relaxed),
            objects: self.objects.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            micros: self.micros.load(Ordering::Relaxed),
        }
    }
}

/// The tenants, their counters and the reclaim counters of one store.
pub struct Pool {
    tenants: RwLock<Vec<Tenant>>,
    /// Indexed by tenant id; fixed size so shards update counters without a lock.
    counters: Box<[TenantCounters]>,
    careful: PathCounters,
    fast: PathCounters,
    last: parking_lot::Mutex<Option<ReclaimReport>>,
    /// Tier 2 is attached: persistent data has a copy there, so it may leave RAM (as stubs) too.
    tier2: AtomicBool,
}

impl Default for Pool {
    fn default() -> Self {
        Pool {
            tenants: RwLock::new(vec![Tenant {
                spec: TenantSpec::default_tenant(),
            }]),
            counters: (0..TENANTS_MAX)
                .map(|_| TenantCounters::default())
                .collect(),
            careful: PathCounters::default(),
            fast: PathCounters::default(),
            last: parking_lot::Mutex::new(None),
            tier2: AtomicBool::new(false),
        }
    }
}

impl Pool {
    pub fn counters(&self, tenant: TenantId) -> &TenantCounters {
        debug_assert!(
            (tenant as usize) < TENANTS_MAX,
            "tenant {tenant} is beyond the {TENANTS_MAX} a pool counts"
        );
        &self.counters[tenant as usize]
    }

    /// Creates a tenant or updates the one with this name; returns its id.
    pub fn define(&self, spec: TenantSpec) -> Result<TenantId, String> {
        if spec.weight == 0 || spec.weight > 1_000_000 {
            return Err("weight must be 1..1000000".into());
        }
        if spec.name.is_empty() || spec.name.len() > 64 {
            return Err("tenant names are 1..64 bytes".into());
        }
        if spec.kind == TenantKind::Persistent && !spec.tier2 {
            return Err(
                "a persistent tenant keeps tier 2 (its log is its durability): TIER2 no is for ephemeral tenants"
                    .into(),
            );
        }
        let mut tenants = self.tenants.write();
        if let Some(id) = tenants
            .iter()
            .position(|tenant| tenant.spec.name == spec.name)
        {
            if id == 0 && !spec.shared {
                return Err("the default tenant lives in the common keyspace".into());
            }
            if tenants[id].spec.shared != spec.shared
                && self.counters[id].resident_bytes.load(Ordering::Relaxed) > 0
            {
                return Err("a tenant holding data cannot change keyspace (SHARED)".into());
            }
            self.publish_flags(id, &spec);
            tenants[id].spec = spec;
            return Ok(id as TenantId);
        }
        if tenants.len() >= TENANTS_MAX {
            return Err(format!("at most {TENANTS_MAX} tenants"));
        }
        self.publish_flags(tenants.len(), &spec);
        tenants.push(Tenant { spec });
        assert!(
            tenants.len() <= self.counters.len(),
            "every tenant has its counters"
        );
        Ok((tenants.len() - 1) as TenantId)
    }

    /// Copies the options the shards read without the tenants' lock into the tenant's counters.
    fn publish_flags(&self, id: usize, spec: &TenantSpec) {
        let persistent = spec.kind == TenantKind::Persistent;
        assert!(
            !persistent || spec.tier2,
            "define refuses a persistent tenant without tier 2"
        );
        self.counters[id]
            .persistent
            .store(persistent, Ordering::Relaxed);
        self.counters[id]
            .tier2_off
            .store(!persistent && !spec.tier2, Ordering::Relaxed);
    }

    /// Every tenant's spec, by id.
    pub fn specs(&self) -> Vec<TenantSpec> {
        self.tenants
            .read()
            .iter()
            .map(|tenant| tenant.spec.clone())
            .collect()
    }

    pub fn id(&self, name: &str) -> Option<TenantId> {
        self.tenants
            .read()
            .iter()
            .position(|tenant| tenant.spec.name == name)
            .map(|id| id as TenantId)
    }

    pub fn spec(&self, id: TenantId) -> Option<TenantSpec> {
        self.tenants
            .read()
            .get(id as usize)
            .map(|tenant| tenant.spec.clone())
    }

    /// True when the tenant is persistent (lock-free: every write asks).
    pub fn is_persistent(&self, id: TenantId) -> bool {
        self.counters(id).persistent.load(Ordering::Relaxed)
    }

    /// True when the tenant's items may be written to tier 2 (lock-free: every departure asks).
    pub fn tier2_allowed(&self, id: TenantId) -> bool {
        !self.counters(id).tier2_off.load(Ordering::Relaxed)
    }

    pub fn kind(&self, id: TenantId) -> TenantKind {
        self.tenants
            .read()
            .get(id as usize)
            .map_or(TenantKind::Ephemeral, |tenant| tenant.spec.kind)
    }

    /// Persistent data has a tier-2 copy from now on: it is a victim like the rest, and no floor.
    pub fn set_tier2_attached(&self) {
        self.tier2.store(true, Ordering::Relaxed);
    }

    /// Bytes held by persistent tenants: the floor a shrink cannot go under (none with tier 2, where
    /// their RAM copies leave at once as stubs).
    pub fn persistent_bytes(&self) -> usize {
        if self.tier2.load(Ordering::Relaxed) {
            return 0;
        }
        let tenants = self.tenants.read();
        tenants
            .iter()
            .enumerate()
            .filter(|(_, tenant)| tenant.spec.kind == TenantKind::Persistent)
            .map(|(id, _)| self.counters[id].resident_bytes.load(Ordering::Relaxed))
            .sum()
    }

    /// The tenant with the largest fairness f_i that holds bytes, if any: an ephemeral one, or with tier 2
    /// any (persistent data leaves RAM as stubs, its records already on tier 2).
    pub fn victim(&self) -> Option<TenantId> {
        let tenants = self.tenants.read();
        let tier2 = self.tier2.load(Ordering::Relaxed);
        tenants
            .iter()
            .enumerate()
            .filter(|(_, tenant)| tier2 || tenant.spec.kind == TenantKind::Ephemeral)
            .map(|(id, tenant)| {
                let resident = self.counters[id].resident_bytes.load(Ordering::Relaxed);
                // P and Σw cancel out when comparing f_i, so c_i / w_i ranks the tenants.
                (
                    resident as f64 / tenant.spec.weight as f64,
                    resident,
                    id as TenantId,
                )
            })
            .filter(|&(_, resident, _)| resident > 0)
            .max_by(|left, right| left.0.total_cmp(&right.0))
            .map(|(_, _, id)| {
                debug_assert!(
                    tier2 || tenants[id as usize].spec.kind == TenantKind::Ephemeral,
                    "a persistent tenant is a victim only with tier 2"
                );
                id
            })
    }

    /// Every tenant with its share and fairness against a pool of `pool_bytes`.
    pub fn snapshots(&self, pool_bytes: usize) -> Vec<TenantSnapshot> {
        let tenants = self.tenants.read();
        let resident = |id: usize| self.counters[id].resident_bytes.load(Ordering::Relaxed);
        let active_weight_sum: f64 = tenants
            .iter()
            .enumerate()
            .filter(|&(id, _)| resident(id) > 0)
            .map(|(_, tenant)| tenant.spec.weight as f64)
            .sum();
        tenants
            .iter()
            .enumerate()
            .map(|(id, tenant)| {
                let counters = &self.counters[id];
                let resident_bytes = resident(id);
                let share = share_of(tenant.spec.weight, resident_bytes, active_weight_sum);
                let fairness = if pool_bytes == 0 {
                    0.0
                } else {
                    (resident_bytes as f64 / pool_bytes as f64) / share
                };
                TenantSnapshot {
                    id: id as TenantId,
                    name: tenant.spec.name.clone(),
                    weight: tenant.spec.weight,
                    kind: tenant.spec.kind,
                    shared: tenant.spec.shared,
                    tier2: tenant.spec.tier2,
                    resident_bytes,
                    share,
                    fairness,
                    hits: counters.hits.load(Ordering::Relaxed),
                    misses: counters.misses.load(Ordering::Relaxed),
                    evicted_keys: counters.evicted_keys.load(Ordering::Relaxed),
                    evicted_bytes: counters.evicted_bytes.load(Ordering::Relaxed),
                }
            })
            .collect()
    }

    pub fn record_reclaim(&self, report: ReclaimReport) {
        let counters = match report.path {
            ReclaimPath::Careful => &self.careful,
            ReclaimPath::Fast => &self.fast,
        };
        counters.runs.fetch_add(1, Ordering::Relaxed);
        counters
            .objects
            .fetch_add(report.objects, Ordering::Relaxed);
        counters
            .bytes
            .fetch_add(report.released_bytes as u64, Ordering::Relaxed);
        counters
            .micros
            .fetch_add(report.duration.as_micros() as u64, Ordering::Relaxed);
        *self.last.lock() = Some(report);
    }

    pub fn reclaim_stats(&self) -> ReclaimStats {
        ReclaimStats {
            careful: self.careful.snapshot(),
            fast: self.fast.snapshot(),
            last: *self.last.lock(),
        }
    }
}

/// The address of a keyspace: the tenant writing, the namespace its keys live in (0 = common) and the
/// database. Every shard method's `keyspace` argument is such an address; the default tenant's address
/// of database d is d itself.
pub fn keyspace(tenant: TenantId, namespace: u16, db: usize) -> usize {
    assert!(db <= u8::MAX as usize);
    ((tenant as usize) << 32) | ((namespace as usize) << 16) | db
}

/// True when `address` is a well-formed keyspace address (tier-2 records are checked before use).
pub fn is_keyspace_address(address: usize) -> bool {
    address >> 48 == 0 && address & 0xff00 == 0
}

/// The parts of a keyspace address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Address {
    pub tenant: TenantId,
    pub namespace: u16,
    pub db: usize,
}

impl Address {
    pub fn of(address: usize) -> Address {
        debug_assert!(
            address >> 48 == 0 && address & 0xff00 == 0,
            "{address:#x} is not a keyspace address (tenant << 32 | namespace << 16 | database)"
        );
        Address {
            tenant: (address >> 32) as TenantId,
            namespace: (address >> 16) as u16,
            db: address & 0xff,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip_and_default_is_plain_db() {
        assert_eq!(keyspace(0, 0, 5), 5);
        let address = Address::of(keyspace(7, 7, 3));
        assert_eq!(
            address,
            Address {
                tenant: 7,
                namespace: 7,
                db: 3
            }
        );
    }

    #[test]
    fn victim_is_the_largest_fairness_among_ephemeral() {
        let pool = Pool::default();
        let spec = |name: &str, weight, kind| TenantSpec {
            name: name.into(),
            weight,
            kind,
            shared: false,
            tier2: true,
        };
        let small = pool
            .define(spec("small", 100, TenantKind::Ephemeral))
            .unwrap();
        let big = pool
            .define(spec("big", 400, TenantKind::Ephemeral))
            .unwrap();
        let kept = pool
            .define(spec("kept", 100, TenantKind::Persistent))
            .unwrap();
        assert_eq!(pool.victim(), None, "nobody holds bytes");
        pool.counters(small)
            .resident_bytes
            .store(100, Ordering::Relaxed);
        pool.counters(big)
            .resident_bytes
            .store(300, Ordering::Relaxed);
        pool.counters(kept)
            .resident_bytes
            .store(10_000, Ordering::Relaxed);
        // f ∝ c / w: small 100/100 = 1 > big 300/400 = 0.75; persistent never chosen.
        assert_eq!(pool.victim(), Some(small));
        assert_eq!(pool.persistent_bytes(), 10_000);
        assert!(pool.define(spec("x", 0, TenantKind::Ephemeral)).is_err());
    }
}
