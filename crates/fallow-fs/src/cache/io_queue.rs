//! The bounded I/O queue between FUSE requests and the backing files (Mortar §4.3's I/O thread, with a
//! pool of threads): demand reads go before read-ahead, a block in flight is read once however many
//! readers wait for it, and the queue holds at most `queue_bytes_max` bytes of pending reads (read-ahead
//! beyond that is skipped; a demand read beyond it is done by the requesting thread itself).
use super::keys::block_key;
use super::FileState;
use crate::cache::remote::Remote;
use crate::stats::Counters;
use parking_lot::{Condvar, Mutex};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

/// A block's bytes as read (shorter than a block at the end of the file), or the errno of the read.
pub type BlockResult = Result<Arc<Vec<u8>>, i32>;

/// A read-ahead job's outcome when fallow had the block already (nothing was read): a reader that
/// caught up with it takes the block from fallow. Never a real errno (those are positive).
const ALREADY_CACHED: i32 = -1;

/// The result of one block read, waited for by every reader that asked for the block meanwhile.
#[derive(Default)]
pub struct Inflight {
    result: Mutex<Option<BlockResult>>,
    done: Condvar,
}

impl Inflight {
    pub fn wait(&self) -> BlockResult {
        let mut result = self.result.lock();
        while result.is_none() {
            self.done.wait(&mut result);
        }
        result.clone().expect("set before notify")
    }

    fn finish(&self, outcome: BlockResult) {
        *self.result.lock() = Some(outcome);
        self.done.notify_all();
    }
}

/// One backing read of one block.
pub struct Job {
    file: Arc<FileState>,
    epoch: u64,
    block: u64,
    /// The file's write generation when the job was made: a write since makes its bytes unfit to store.
    write_gen: u64,
    started: AtomicBool,
    /// A reader waits for it (a read-ahead job a reader caught up with).
    demanded: AtomicBool,
    inflight: Arc<Inflight>,
}

type InflightKey = (u64, u64, u64, u64);

struct Queues {
    demand: VecDeque<Arc<Job>>,
    prefetch: VecDeque<Arc<Job>>,
    queued_bytes: u64,
    stopping: bool,
}

pub struct IoQueue {
    queues: Mutex<Queues>,
    wake: Condvar,
    inflight: Mutex<HashMap<InflightKey, Arc<Job>>>,
    queue_bytes_max: u64,
    block_bytes: u64,
    remote: Option<Arc<Remote>>,
    counters: Arc<Counters>,
}

fn inflight_key(file: &FileState, epoch: u64, block: u64) -> InflightKey {
    let id = file.id();
    (id.dev, id.ino, epoch, block)
}

impl IoQueue {
    pub fn new(
        queue_bytes_max: u64,
        block_bytes: u64,
        remote: Option<Arc<Remote>>,
        counters: Arc<Counters>,
    ) -> Arc<IoQueue> {
        assert!(
            queue_bytes_max >= block_bytes,
            "the queue holds at least one block"
        );
        Arc::new(IoQueue {
            queues: Mutex::new(Queues {
                demand: VecDeque::new(),
                prefetch: VecDeque::new(),
                queued_bytes: 0,
                stopping: false,
            }),
            wake: Condvar::new(),
            inflight: Mutex::new(HashMap::new()),
            queue_bytes_max,
            block_bytes,
            remote,
            counters,
        })
    }

    pub fn start(self: &Arc<Self>, threads: u32) -> Vec<std::thread::JoinHandle<()>> {
        (0..threads)
            .map(|index| {
                let queue = self.clone();
                std::thread::Builder::new()
                    .name(format!("fs-io-{index}"))
                    .spawn(move || queue.run())
                    .expect("spawn an I/O thread")
            })
            .collect()
    }

    pub fn stop(&self) {
        self.queues.lock().stopping = true;
        self.wake.notify_all();
    }

    pub fn queued_bytes(&self) -> u64 {
        self.queues.lock().queued_bytes
    }

    /// The job reading `block` now, if it was made at the file's current write generation.
    fn current_job(&self, file: &Arc<FileState>, epoch: u64, block: u64) -> Option<Arc<Job>> {
        let inflight = self.inflight.lock();
        let job = inflight.get(&inflight_key(file, epoch, block))?;
        (job.write_gen == file.write_gen()).then(|| job.clone())
    }

    fn new_job(&self, file: &Arc<FileState>, epoch: u64, block: u64, demanded: bool) -> Arc<Job> {
        Arc::new(Job {
            file: file.clone(),
            epoch,
            block,
            write_gen: file.write_gen(),
            started: AtomicBool::new(false),
            demanded: AtomicBool::new(demanded),
            inflight: Arc::new(Inflight::default()),
        })
    }

    /// A reader needs `block`, which fallow did not have: waits for the read in flight or starts one.
    /// The bool says whether a read was already in flight (a hit on read-ahead).
    pub fn demand(&self, file: &Arc<FileState>, epoch: u64, block: u64) -> (BlockResult, bool) {
        if let Some(job) = self.current_job(file, epoch, block) {
            if !job.demanded.swap(true, Relaxed) && !job.started.load(Relaxed) {
                let mut queues = self.queues.lock();
                queues.demand.push_back(job.clone());
                drop(queues);
                self.wake.notify_one();
            }
            match job.inflight.wait() {
                Err(ALREADY_CACHED) => {
                    if let Some(bytes) = self.cached(file, epoch, block) {
                        return (Ok(bytes), true);
                    }
                }
                outcome => return (outcome, true),
            }
        }
        let job = self.new_job(file, epoch, block, true);
        self.inflight
            .lock()
            .insert(inflight_key(file, epoch, block), job.clone());
        let queued = {
            let mut queues = self.queues.lock();
            if queues.queued_bytes + self.block_bytes <= self.queue_bytes_max && !queues.stopping {
                queues.queued_bytes += self.block_bytes;
                queues.demand.push_back(job.clone());
                true
            } else {
                false
            }
        };
        if queued {
            self.wake.notify_one();
        } else {
            // The queue is full: this thread reads the block itself rather than wait for room.
            self.run_job(&job, false);
        }
        (job.inflight.wait(), false)
    }

    fn cached(&self, file: &FileState, epoch: u64, block: u64) -> Option<Arc<Vec<u8>>> {
        let remote = self.remote.as_ref()?;
        let key = block_key(file.id(), epoch, block);
        remote.get_many(&[key]).ok()?.pop().flatten().map(Arc::new)
    }

    /// Queues read-ahead of `blocks`, stopping when the queue is full. Returns (jobs queued, blocks
    /// covered: queued or in flight already).
    pub fn prefetch(
        &self,
        file: &Arc<FileState>,
        epoch: u64,
        blocks: std::ops::Range<u64>,
    ) -> (u64, u64) {
        let (mut queued, mut covered) = (0, 0);
        for block in blocks {
            if self.current_job(file, epoch, block).is_some() {
                covered += 1;
                continue;
            }
            {
                let mut queues = self.queues.lock();
                if queues.queued_bytes + self.block_bytes > self.queue_bytes_max || queues.stopping
                {
                    break;
                }
                queues.queued_bytes += self.block_bytes;
            }
            // In the in-flight map before any thread can run (and forget) it.
            let job = self.new_job(file, epoch, block, false);
            self.inflight
                .lock()
                .insert(inflight_key(file, epoch, block), job.clone());
            self.queues.lock().prefetch.push_back(job);
            self.wake.notify_one();
            queued += 1;
            covered += 1;
        }
        (queued, covered)
    }

    fn run(&self) {
        loop {
            let job = {
                let mut queues = self.queues.lock();
                loop {
                    if queues.stopping {
                        return;
                    }
                    if let Some(job) = queues
                        .demand
                        .pop_front()
                        .or_else(|| queues.prefetch.pop_front())
                    {
                        break job;
                    }
                    self.wake.wait(&mut queues);
                }
            };
            self.run_job(&job, true);
        }
    }

    /// Reads the job's block (unless another thread started it), hands the bytes to its waiters, then
    /// stores them in fallow when no write changed the file meanwhile.
    fn run_job(&self, job: &Arc<Job>, from_queue: bool) {
        if job.started.swap(true, Relaxed) {
            return;
        }
        if from_queue {
            let mut queues = self.queues.lock();
            queues.queued_bytes = queues.queued_bytes.saturating_sub(self.block_bytes);
        }
        let key = block_key(job.file.id(), job.epoch, job.block);
        // Mortar's second look: the block may be in fallow already (stored by another reader's job since
        // it was missed, or read ahead before). Read-ahead only asks whether it is there.
        if let Some(remote) = &self.remote {
            if !job.demanded.load(Relaxed)
                && matches!(
                    remote.call(&[b"EXISTS", &key]),
                    Ok(fallow_client::Reply::Int(1))
                )
            {
                job.inflight.finish(Err(ALREADY_CACHED));
                self.forget(job);
                return;
            }
            if let Some(bytes) = job
                .demanded
                .load(Relaxed)
                .then(|| self.cached(&job.file, job.epoch, job.block))
                .flatten()
            {
                job.inflight.finish(Ok(bytes));
                self.forget(job);
                return;
            }
        }
        let outcome = job.file.read_block(job.block, self.block_bytes);
        if let Ok(bytes) = &outcome {
            self.counters.backing_reads.fetch_add(1, Relaxed);
            self.counters
                .backing_read_bytes
                .fetch_add(bytes.len() as u64, Relaxed);
        }
        let outcome = outcome.map(Arc::new);
        job.inflight.finish(outcome.clone());
        if let (Ok(bytes), Some(remote)) = (&outcome, &self.remote) {
            self.store(remote, job, &key, bytes);
        }
        self.forget(job);
    }

    fn store(&self, remote: &Remote, job: &Job, key: &[u8], bytes: &[u8]) {
        // Under the fill lock (shared): a write either finished its invalidation before this check
        // (its generation differs: not stored) or deletes this block after it.
        let _fill = job.file.fill_lock.read();
        if job.file.write_gen() != job.write_gen {
            self.counters.store_skipped_stale.fetch_add(1, Relaxed);
            return;
        }
        match remote.set(key, bytes) {
            Ok(true) => {
                self.counters.blocks_stored.fetch_add(1, Relaxed);
                self.counters
                    .blocks_stored_bytes
                    .fetch_add(bytes.len() as u64, Relaxed);
            }
            Ok(false) => {
                self.counters.store_refused.fetch_add(1, Relaxed);
            }
            Err(_) => {}
        }
    }

    fn forget(&self, job: &Arc<Job>) {
        let mut inflight = self.inflight.lock();
        let key = inflight_key(&job.file, job.epoch, job.block);
        if inflight
            .get(&key)
            .is_some_and(|current| Arc::ptr_eq(current, job))
        {
            inflight.remove(&key);
        }
    }
}
