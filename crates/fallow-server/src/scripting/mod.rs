//! What every worker shares for Lua scripting (the engine and the commands are `command::scripting`):
//! the script cache (sources by SHA1, bounded in bytes), which scripts run now and on which shards (so
//! dispatch can tell a command to wait or answer BUSY), a process-wide `math.random` state, and the
//! counters.
//!
//! Locking: a script runs atomically. One whose keys are unknown runs with every shard locked, as EXEC
//! does. A script seen touching only the keys it declared (every run so far) takes only its declared
//! keys' shards; should it touch another key later, that key's shard is taken if free, or the run starts
//! over with every shard (only before its first write, so nothing is done twice). `lua-strict-keys yes`
//! refuses undeclared keys instead. A script running longer than `busy-reply-threshold` makes commands
//! that need its shards answer BUSY; commands that need them meanwhile wait off the worker thread.
pub mod functions;
pub mod shebang;

pub use shebang::ScriptFlags;

use parking_lot::{Mutex, RwLock};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Bytes of script source the cache may hold (every script ever loaded stays in Redis 7.0; here
/// scripts cached by EVAL leave oldest first past this, while SCRIPT LOAD past it is refused).
pub const SCRIPT_CACHE_BYTES_MAX: usize = 64 << 20;

/// What a script costs the cache beyond its source: the SHA1, the entry and its queue slot.
const SCRIPT_OVERHEAD_BYTES: usize = 128;

/// What runs of one script or function taught about its keys: whether every run so far touched only
/// the keys it declared (then only their shards are locked).
#[derive(Debug)]
pub struct KeyHabit {
    declared_only: AtomicBool,
    /// Completed runs, for `declared_only` to mean something.
    runs: AtomicU64,
}

impl Default for KeyHabit {
    fn default() -> Self {
        KeyHabit {
            declared_only: AtomicBool::new(true),
            runs: AtomicU64::new(0),
        }
    }
}

impl KeyHabit {
    /// Whether to lock only the declared keys' shards: it has run before and never touched another key.
    pub fn locks_declared_only(&self) -> bool {
        self.runs.load(Ordering::Relaxed) > 0 && self.declared_only.load(Ordering::Relaxed)
    }

    /// Learns from a finished run whether it touched undeclared keys.
    pub fn note_run(&self, touched_undeclared: bool) {
        if touched_undeclared {
            self.declared_only.store(false, Ordering::Relaxed);
        }
        self.runs.fetch_add(1, Ordering::Relaxed);
    }
}

/// One cached script.
#[derive(Debug)]
pub struct Script {
    /// 40 lower-case hex digits.
    pub sha: String,
    pub source: Arc<[u8]>,
    /// Its `#!lua` line's flags; None for a script without one (Redis's legacy rules).
    pub flags: Option<ScriptFlags>,
    pub habit: KeyHabit,
}

impl Script {
    fn cost_bytes(&self) -> usize {
        self.source.len() + SCRIPT_OVERHEAD_BYTES
    }
}

/// Which shards a running script holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeldShards {
    All,
    /// Sorted shard indices.
    Some(Vec<usize>),
}

impl HeldShards {
    fn overlaps(&self, needed: &HeldShards) -> bool {
        match (self, needed) {
            (HeldShards::Some(held), HeldShards::Some(needed)) => {
                needed.iter().any(|index| held.binary_search(index).is_ok())
            }
            (HeldShards::Some(held), HeldShards::All) => !held.is_empty(),
            (HeldShards::All, HeldShards::Some(needed)) => !needed.is_empty(),
            (HeldShards::All, HeldShards::All) => true,
        }
    }
}

/// A script or function being run now.
pub struct RunningScript {
    pub client_id: u64,
    /// The script's SHA1 or the function's name.
    pub name: String,
    /// FCALL's arguments when it is a function (FUNCTION STATS shows them), else empty.
    pub function_call: Vec<Vec<u8>>,
    pub started: Instant,
    shards: Mutex<HeldShards>,
    /// Set by SCRIPT KILL; the script stops at its next instruction-count hook.
    pub kill: AtomicBool,
    /// It ran a write (SCRIPT KILL then refuses: UNKILLABLE).
    pub wrote: AtomicBool,
    /// It ran past `busy-reply-threshold`: commands on its shards answer BUSY.
    pub busy: AtomicBool,
}

impl RunningScript {
    pub fn set_shards(&self, shards: HeldShards) {
        *self.shards.lock() = shards;
    }
}

/// How a command stands with the running scripts.
#[derive(Debug, PartialEq, Eq)]
pub enum Conflict {
    /// No running script holds a shard it needs.
    None,
    /// A script holds one and has not passed the busy threshold: wait for it.
    Wait,
    /// A script holding one has passed the busy threshold: answer BUSY.
    Busy,
}

pub const BUSY_ERROR: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";

/// Scripting's counters (INFO `scripting` section and `stats`).
#[derive(Default)]
pub struct ScriptStats {
    pub runs: AtomicU64,
    pub errors: AtomicU64,
    pub killed: AtomicU64,
    pub busy_replies: AtomicU64,
    pub waits: AtomicU64,
    /// Runs started over with every shard after touching an undeclared key on a busy shard.
    pub restarts: AtomicU64,
    /// Runs that locked only their declared keys' shards.
    pub declared_only_runs: AtomicU64,
    pub cache_evictions: AtomicU64,
}

#[derive(Default)]
struct Cache {
    scripts: HashMap<String, Arc<Script>>,
    /// Scripts cached by EVAL (not SCRIPT LOAD), oldest first: the ones that may leave.
    evictable: VecDeque<String>,
    bytes: usize,
}

/// Why a script could not be cached.
#[derive(Debug, PartialEq, Eq)]
pub struct CacheFull {
    pub bytes_max: usize,
}

pub struct Scripts {
    cache: RwLock<Cache>,
    /// Bumped by SCRIPT FLUSH and evictions: the workers' states drop their compiled functions.
    pub generation: AtomicU64,
    running: Mutex<Vec<Arc<RunningScript>>>,
    running_count: AtomicUsize,
    /// Redis 7 function libraries.
    pub functions: functions::Libraries,
    /// Woken whenever a script ends (waiting commands retry).
    pub ended: tokio::sync::Notify,
    pub stats: ScriptStats,
    /// Bytes the workers' Lua states hold, as each reported after its last run.
    lua_memory_bytes: AtomicUsize,
}

impl Default for Scripts {
    fn default() -> Self {
        Scripts {
            cache: RwLock::default(),
            generation: AtomicU64::new(0),
            running: Mutex::default(),
            running_count: AtomicUsize::new(0),
            functions: functions::Libraries::default(),
            ended: tokio::sync::Notify::new(),
            stats: ScriptStats::default(),
            lua_memory_bytes: AtomicUsize::new(0),
        }
    }
}

/// The lrand48 state before any seed: `x = 0x1234ABCD330E`.
const LRAND48_INITIAL_STATE: u64 = 0x1234_ABCD_330E;
const LRAND48_MULTIPLIER: u64 = 0x5_DEEC_E66D;
const LRAND48_MASK: u64 = (1 << 48) - 1;

impl Scripts {
    /// The SHA1 of a script's source, as EVALSHA names it.
    pub fn sha1_hex(source: &[u8]) -> String {
        use sha1::Digest;
        hex::encode(sha1::Sha1::digest(source))
    }

    pub fn get(&self, sha: &str) -> Option<Arc<Script>> {
        self.cache.read().scripts.get(sha).cloned()
    }

    /// Caches a script (already compiled once, so known to be valid, with its shebang's flags).
    /// `evictable`: cached by EVAL, so it may leave when the cache is full; SCRIPT LOAD's scripts stay
    /// until SCRIPT FLUSH.
    pub fn insert(
        &self,
        source: &[u8],
        flags: Option<ScriptFlags>,
        evictable: bool,
    ) -> Result<Arc<Script>, CacheFull> {
        let sha = Scripts::sha1_hex(source);
        let mut cache = self.cache.write();
        if let Some(script) = cache.scripts.get(&sha) {
            return Ok(script.clone());
        }
        let script = Arc::new(Script {
            sha: sha.clone(),
            source: source.into(),
            flags,
            habit: KeyHabit::default(),
        });
        let needed = script.cost_bytes();
        while cache.bytes + needed > SCRIPT_CACHE_BYTES_MAX {
            let Some(oldest) = cache.evictable.pop_front() else {
                return Err(CacheFull {
                    bytes_max: SCRIPT_CACHE_BYTES_MAX,
                });
            };
            if let Some(gone) = cache.scripts.remove(&oldest) {
                cache.bytes -= gone.cost_bytes();
                self.stats.cache_evictions.fetch_add(1, Ordering::Relaxed);
                self.generation.fetch_add(1, Ordering::Relaxed);
            }
        }
        cache.bytes += needed;
        if evictable {
            cache.evictable.push_back(sha.clone());
        }
        cache.scripts.insert(sha, script.clone());
        Ok(script)
    }

    pub fn flush(&self) {
        *self.cache.write() = Cache::default();
        self.generation.fetch_add(1, Ordering::Relaxed);
    }

    /// (scripts, bytes) in the cache.
    pub fn cache_figures(&self) -> (usize, usize) {
        let cache = self.cache.read();
        (cache.scripts.len(), cache.bytes)
    }

    /// Registers a run of `name` (a script's SHA1, or a function's name with its FCALL arguments); it
    /// stays registered until `end` is called with what this returns.
    pub fn begin(
        &self,
        client_id: u64,
        name: &str,
        function_call: Vec<Vec<u8>>,
        shards: HeldShards,
    ) -> Arc<RunningScript> {
        let running = Arc::new(RunningScript {
            client_id,
            name: name.to_string(),
            function_call,
            started: Instant::now(),
            shards: Mutex::new(shards),
            kill: AtomicBool::new(false),
            wrote: AtomicBool::new(false),
            busy: AtomicBool::new(false),
        });
        self.running.lock().push(running.clone());
        self.running_count.fetch_add(1, Ordering::Release);
        self.stats.runs.fetch_add(1, Ordering::Relaxed);
        running
    }

    pub fn end(&self, running: &Arc<RunningScript>) {
        let mut list = self.running.lock();
        let before = list.len();
        list.retain(|other| !Arc::ptr_eq(other, running));
        assert_eq!(list.len() + 1, before, "a run ends once");
        self.running_count.fetch_sub(1, Ordering::Release);
        drop(list);
        self.ended.notify_waiters();
    }

    /// Waits until a script ends, or a short tick passes (so one turning busy is noticed by the retry).
    pub async fn wait_for_an_end(&self) {
        const RECHECK: std::time::Duration = std::time::Duration::from_millis(10);
        tokio::select! {
            _ = self.ended.notified() => {}
            _ = tokio::time::sleep(RECHECK) => {}
        }
    }

    /// A Lua state's memory changed from `before` to `after` bytes.
    pub fn note_lua_memory(&self, before: usize, after: usize) {
        if after >= before {
            self.lua_memory_bytes
                .fetch_add(after - before, Ordering::Relaxed);
        } else {
            self.lua_memory_bytes
                .fetch_sub(before - after, Ordering::Relaxed);
        }
    }

    /// Bytes all workers' Lua states hold.
    pub fn lua_memory_bytes(&self) -> usize {
        self.lua_memory_bytes.load(Ordering::Relaxed)
    }

    /// Whether any script runs now (one atomic load: the common answer is no).
    pub fn any_running(&self) -> bool {
        self.running_count.load(Ordering::Acquire) != 0
    }

    /// How a command needing `needed` stands with the running scripts (`client_id`'s own run excluded:
    /// a script's own commands run on its locks).
    pub fn conflict(&self, client_id: u64, needed: &HeldShards) -> Conflict {
        let mut conflict = Conflict::None;
        for running in self.running.lock().iter() {
            if running.client_id == client_id || !running.shards.lock().overlaps(needed) {
                continue;
            }
            if running.busy.load(Ordering::Relaxed) {
                return Conflict::Busy;
            }
            conflict = Conflict::Wait;
        }
        conflict
    }

    /// Whether `client_id` is running a script now: a command of that client is then the script's
    /// (Redis's CLIENT_SCRIPT flag).
    pub fn runs_for(&self, client_id: u64) -> bool {
        self.any_running()
            && self
                .running
                .lock()
                .iter()
                .any(|running| running.client_id == client_id)
    }

    /// The runs in progress (SCRIPT KILL's targets), oldest first.
    pub fn running_runs(&self) -> Vec<Arc<RunningScript>> {
        self.running.lock().clone()
    }
}

/// INFO `scripting`: the counters of runs, refusals and the cache.
pub fn info_section(scripts: &Scripts, text: &mut String) {
    use std::fmt::Write;
    let stats = &scripts.stats;
    let (cached, cache_bytes) = scripts.cache_figures();
    let (libraries, functions) = scripts.functions.counts();
    text.push_str("# Scripting\r\n");
    let fields: [(&str, u64); 13] = [
        ("scripts_cached", cached as u64),
        ("scripts_cache_bytes", cache_bytes as u64),
        (
            "scripts_cache_evictions",
            stats.cache_evictions.load(Ordering::Relaxed),
        ),
        ("function_libraries", libraries as u64),
        ("functions", functions as u64),
        ("script_runs", stats.runs.load(Ordering::Relaxed)),
        ("script_errors", stats.errors.load(Ordering::Relaxed)),
        (
            "script_runs_declared_shards",
            stats.declared_only_runs.load(Ordering::Relaxed),
        ),
        (
            "script_restarts_every_shard",
            stats.restarts.load(Ordering::Relaxed),
        ),
        ("scripts_killed", stats.killed.load(Ordering::Relaxed)),
        (
            "script_busy_replies",
            stats.busy_replies.load(Ordering::Relaxed),
        ),
        ("script_waits", stats.waits.load(Ordering::Relaxed)),
        (
            "scripts_running",
            scripts.running_count.load(Ordering::Relaxed) as u64,
        ),
    ];
    for (name, value) in fields {
        let _ = write!(text, "{name}:{value}\r\n");
    }
}

/// Redis's `redisLrand48` state (48 bits), shared by every script in the process as Redis's single state is.
static RANDOM_STATE: AtomicU64 = AtomicU64::new(LRAND48_INITIAL_STATE);

/// The next `redisLrand48()` value (31 bits) from the shared state.
pub fn next_random() -> i32 {
    lrand48_next(&RANDOM_STATE)
}

/// `redisSrand48(seed)` on the shared state.
pub fn seed_random(seed: i32) {
    lrand48_seed(&RANDOM_STATE, seed)
}

fn lrand48_next(state: &AtomicU64) -> i32 {
    let step = |x: u64| (x.wrapping_mul(LRAND48_MULTIPLIER).wrapping_add(0xB)) & LRAND48_MASK;
    let previous = state
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |x| Some(step(x)))
        .expect("the update always yields a value");
    (step(previous) >> 17) as i32
}

fn lrand48_seed(state: &AtomicU64, seed: i32) {
    state.store(((seed as u32 as u64) << 16) | 0x330E, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_random_sequence_is_redis_lrand48() {
        let state = AtomicU64::new(LRAND48_INITIAL_STATE);
        // The first values a fresh Redis 7.0.15 gives `math.random()`: 0.39646477363839, 0.84048536971234.
        assert_eq!(lrand48_next(&state), 851_401_618);
        assert_eq!(lrand48_next(&state), 1_804_928_587);
        lrand48_seed(&state, 5);
        let after_seed = lrand48_next(&state);
        lrand48_seed(&state, 5);
        assert_eq!(
            lrand48_next(&state),
            after_seed,
            "a seed restarts the sequence"
        );
    }

    #[test]
    fn the_cache_is_bounded_and_evicts_only_eval_scripts() {
        let scripts = Scripts::default();
        let pinned = scripts.insert(b"return 1", None, false).unwrap();
        assert_eq!(pinned.sha, "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
        let big = vec![b' '; SCRIPT_CACHE_BYTES_MAX / 2];
        let mut first = big.clone();
        first.extend_from_slice(b"return 2");
        let mut second = big.clone();
        second.extend_from_slice(b"return 3");
        let first = scripts.insert(&first, None, true).unwrap();
        scripts.insert(&second, None, true).unwrap();
        assert!(
            scripts.get(&first.sha).is_none(),
            "the oldest EVAL script left"
        );
        assert!(
            scripts.get(&pinned.sha).is_some(),
            "SCRIPT LOAD's script stays"
        );
        let (_, bytes) = scripts.cache_figures();
        assert!(bytes <= SCRIPT_CACHE_BYTES_MAX);
        let mut third = big;
        third.extend_from_slice(b"return 4");
        scripts.insert(&third, None, false).unwrap();
        let mut fourth = vec![b' '; SCRIPT_CACHE_BYTES_MAX / 2];
        fourth.extend_from_slice(b"return 5");
        assert_eq!(
            scripts.insert(&fourth, None, false).unwrap_err(),
            CacheFull {
                bytes_max: SCRIPT_CACHE_BYTES_MAX
            },
            "nothing evictable is left"
        );
    }

    #[test]
    fn conflicts_follow_held_shards_and_the_busy_flag() {
        let scripts = Scripts::default();
        let run = scripts.begin(7, "sha", Vec::new(), HeldShards::Some(vec![2, 5]));
        assert_eq!(
            scripts.conflict(8, &HeldShards::Some(vec![1, 3])),
            Conflict::None
        );
        assert_eq!(
            scripts.conflict(8, &HeldShards::Some(vec![5])),
            Conflict::Wait
        );
        assert_eq!(
            scripts.conflict(7, &HeldShards::Some(vec![5])),
            Conflict::None,
            "its own commands"
        );
        assert_eq!(scripts.conflict(8, &HeldShards::All), Conflict::Wait);
        run.busy.store(true, Ordering::Relaxed);
        assert_eq!(
            scripts.conflict(8, &HeldShards::Some(vec![2])),
            Conflict::Busy
        );
        assert_eq!(scripts.running_runs().len(), 1);
        scripts.end(&run);
        assert!(!scripts.any_running());
        assert_eq!(scripts.conflict(8, &HeldShards::All), Conflict::None);
    }
}
