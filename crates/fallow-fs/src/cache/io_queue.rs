//! The bounded I/O queue between FUSE requests and the backing files (Mortar §4.3's I/O thread, with a
//! pool of threads): demand reads go before read-ahead, a block in flight is read once however many
//! readers wait for it, and the queue holds at most `queue_bytes_max` bytes of pending reads (read-ahead
//! beyond that is skipped; a demand read beyond it is done by the requesting thread itself).
use super::admission::{key_hash, Admit, Doorkeeper};
use super::keys::block_key;
use super::FileState;
use crate::cache::remote::Remote;
use crate::stats::Counters;
use parking_lot::{Condvar, Mutex};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::Arc;

/// A block's bytes as read (shorter than a block at the end of the file), or the errno of the read.
pub type BlockResult = Result<Arc<Vec<u8>>, i32>;

/// Most bytes one backing read covers: consecutive blocks of one file queued together are read with one
/// request (a device counts requests as well as bytes).
pub const COALESCE_BYTES_MAX: u64 = 1 << 20;

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
    /// A read-ahead job's stream counter of blocks found in fallow already (feedback pauses on it).
    already_cached: Option<Arc<AtomicU32>>,
    /// Read ahead, or missed by a sequential stream: stored past the doorkeeper (read-ahead and its feedback
    /// govern streams; admission is for random reads).
    for_stream: bool,
}

type InflightKey = (u64, u64, u64, u64);

/// What a read-ahead request queued.
#[derive(Debug, Default)]
pub struct Prefetched {
    /// Jobs queued.
    pub queued: u64,
    /// Blocks from the start of the range that are queued or were in flight already.
    pub covered: u64,
    /// The blocks among them another request was reading already (not this read-ahead's).
    pub in_flight: Vec<u64>,
}

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
    /// Decides which blocks read for a reader are stored once the pool is full (None: all are).
    admission: Option<Arc<Doorkeeper>>,
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
        admission: Option<Arc<Doorkeeper>>,
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
            admission,
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

    /// The job reading `block` now (true: joined), or a new one put in the in-flight map within the same
    /// lock hold, so two readers that miss one block at once never both read it from the backing file. A
    /// job from before the file's last write is not joined: its bytes may be older than the write.
    fn job_for(
        &self,
        file: &Arc<FileState>,
        epoch: u64,
        block: u64,
        already_cached: Option<Arc<AtomicU32>>,
        for_stream: bool,
    ) -> (Arc<Job>, bool) {
        let key = inflight_key(file, epoch, block);
        let mut inflight = self.inflight.lock();
        if let Some(job) = inflight
            .get(&key)
            .filter(|job| job.write_gen == file.write_gen())
        {
            return (job.clone(), true);
        }
        let job = self.new_job(file, epoch, block, already_cached, for_stream);
        inflight.insert(key, job.clone());
        (job, false)
    }

    fn new_job(
        &self,
        file: &Arc<FileState>,
        epoch: u64,
        block: u64,
        already_cached: Option<Arc<AtomicU32>>,
        for_stream: bool,
    ) -> Arc<Job> {
        let demanded = already_cached.is_none();
        Arc::new(Job {
            file: file.clone(),
            epoch,
            block,
            write_gen: file.write_gen(),
            started: AtomicBool::new(false),
            demanded: AtomicBool::new(demanded),
            inflight: Arc::new(Inflight::default()),
            already_cached,
            for_stream,
        })
    }

    /// A reader needs `blocks` (ascending), which fallow did not have: joins the reads in flight and
    /// queues the others together (consecutive ones become one backing read), then waits for them all.
    /// Each result says whether a read was already in flight (a hit on read-ahead). `for_stream`: the reader
    /// is a sequential stream (its blocks are stored past the doorkeeper).
    pub fn demand(
        &self,
        file: &Arc<FileState>,
        epoch: u64,
        blocks: &[u64],
        for_stream: bool,
    ) -> Vec<(BlockResult, bool)> {
        let mut waits = Vec::with_capacity(blocks.len());
        let mut inline = Vec::new();
        for &block in blocks {
            let (job, joined) = self.job_for(file, epoch, block, None, for_stream);
            if joined {
                if !job.demanded.swap(true, Relaxed) && !job.started.load(Relaxed) {
                    self.queues.lock().demand.push_back(job.clone());
                    self.wake.notify_one();
                }
                waits.push((job, true));
                continue;
            }
            let mut queues = self.queues.lock();
            if queues.queued_bytes + self.block_bytes <= self.queue_bytes_max && !queues.stopping {
                queues.queued_bytes += self.block_bytes;
                queues.demand.push_back(job.clone());
                drop(queues);
                self.wake.notify_one();
            } else {
                // The queue is full: this thread reads these blocks itself rather than wait for room.
                inline.push(job.clone());
            }
            waits.push((job, false));
        }
        if !inline.is_empty() {
            self.run_group(inline, false);
        }
        waits
            .into_iter()
            .map(|(job, in_flight)| match job.inflight.wait() {
                Err(ALREADY_CACHED) => match self.cached(file, epoch, job.block) {
                    Some(bytes) => (Ok(bytes), true),
                    None => self.demand_alone(file, epoch, job.block),
                },
                outcome => (outcome, in_flight),
            })
            .collect()
    }

    /// A block read-ahead found in fallow but gone by the time a reader asked: read it now.
    fn demand_alone(&self, file: &Arc<FileState>, epoch: u64, block: u64) -> (BlockResult, bool) {
        let job = self.new_job(file, epoch, block, None, false);
        self.inflight
            .lock()
            .insert(inflight_key(file, epoch, block), job.clone());
        self.run_group(vec![job.clone()], false);
        (job.inflight.wait(), false)
    }

    fn cached(&self, file: &FileState, epoch: u64, block: u64) -> Option<Arc<Vec<u8>>> {
        let remote = self.remote.as_ref()?;
        let key = block_key(file.id(), epoch, block);
        remote.get_many(&[key]).ok()?.pop().flatten().map(Arc::new)
    }

    /// Queues read-ahead of `blocks`, stopping when the queue is full; each block found in fallow already
    /// adds one to `already_cached`.
    pub fn prefetch(
        &self,
        file: &Arc<FileState>,
        epoch: u64,
        blocks: std::ops::Range<u64>,
        already_cached: &Arc<AtomicU32>,
    ) -> Prefetched {
        let mut outcome = Prefetched::default();
        for block in blocks {
            if self.current_job(file, epoch, block).is_some() {
                outcome.covered += 1;
                outcome.in_flight.push(block);
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
            let (job, joined) =
                self.job_for(file, epoch, block, Some(already_cached.clone()), true);
            if joined {
                // A reader got there between the look above and the reservation.
                let mut queues = self.queues.lock();
                queues.queued_bytes = queues.queued_bytes.saturating_sub(self.block_bytes);
                outcome.covered += 1;
                outcome.in_flight.push(block);
                continue;
            }
            self.queues.lock().prefetch.push_back(job);
            self.wake.notify_one();
            outcome.queued += 1;
            outcome.covered += 1;
        }
        outcome
    }

    fn run(&self) {
        loop {
            let group = {
                let mut queues = self.queues.lock();
                loop {
                    if queues.stopping {
                        return;
                    }
                    if let Some(group) = self.take_group(&mut queues) {
                        break group;
                    }
                    self.wake.wait(&mut queues);
                }
            };
            self.run_group(group, true);
        }
    }

    /// The next job, with the jobs queued right behind it for the next blocks of the same file (demand
    /// first, then read-ahead).
    fn take_group(&self, queues: &mut Queues) -> Option<Vec<Arc<Job>>> {
        let queue = if queues.demand.is_empty() {
            &mut queues.prefetch
        } else {
            &mut queues.demand
        };
        let mut group = vec![queue.pop_front()?];
        let blocks_max = (COALESCE_BYTES_MAX / self.block_bytes).max(1) as usize;
        while group.len() < blocks_max {
            let last = group.last().expect("not empty");
            match queue.front() {
                Some(next)
                    if Arc::ptr_eq(&next.file, &last.file)
                        && next.epoch == last.epoch
                        && next.block == last.block + 1 =>
                {
                    group.push(queue.pop_front().expect("front exists"));
                }
                _ => break,
            }
        }
        Some(group)
    }

    /// Runs the jobs no other thread started: those fallow has already are answered from it (Mortar's
    /// second look: stored by another reader meanwhile, or read ahead before), the rest are read from
    /// the backing file, one read per run of consecutive blocks, then stored.
    fn run_group(&self, group: Vec<Arc<Job>>, from_queue: bool) {
        let group: Vec<Arc<Job>> = group
            .into_iter()
            .filter(|job| !job.started.swap(true, Relaxed))
            .collect();
        if from_queue {
            let mut queues = self.queues.lock();
            queues.queued_bytes = queues
                .queued_bytes
                .saturating_sub(self.block_bytes * group.len() as u64);
        }
        let group = self.answer_cached(group);
        let mut start = 0;
        for end in 1..=group.len() {
            if end == group.len()
                || group[end].block != group[end - 1].block + 1
                || !Arc::ptr_eq(&group[end].file, &group[start].file)
            {
                self.read_run(&group[start..end]);
                start = end;
            }
        }
    }

    /// Finishes the jobs whose blocks fallow holds; returns the others.
    fn answer_cached(&self, group: Vec<Arc<Job>>) -> Vec<Arc<Job>> {
        let Some(remote) = &self.remote else {
            return group;
        };
        if group.is_empty() {
            return group;
        }
        let keys: Vec<Vec<u8>> = group
            .iter()
            .map(|job| block_key(job.file.id(), job.epoch, job.block))
            .collect();
        let Ok(present) = remote.exists_many(&keys) else {
            return group;
        };
        let mut rest = Vec::with_capacity(group.len());
        for (job, present) in group.into_iter().zip(present) {
            if !present {
                rest.push(job);
            } else if !job.demanded.load(Relaxed) {
                if let Some(counter) = &job.already_cached {
                    counter.fetch_add(1, Relaxed);
                }
                self.counters.prefetch_already_cached.fetch_add(1, Relaxed);
                job.inflight.finish(Err(ALREADY_CACHED));
                self.forget(&job);
            } else if let Some(bytes) = self.cached(&job.file, job.epoch, job.block) {
                job.inflight.finish(Ok(bytes));
                self.forget(&job);
            } else {
                rest.push(job);
            }
        }
        rest
    }

    /// One backing read for consecutive blocks of one file; each job gets its block, then the blocks are
    /// stored in fallow.
    fn read_run(&self, run: &[Arc<Job>]) {
        let Some(first) = run.first() else {
            return;
        };
        let outcome = first
            .file
            .read_blocks(first.block, run.len() as u64, self.block_bytes);
        let block_bytes = self.block_bytes as usize;
        match outcome {
            Ok(bytes) => {
                self.counters.backing_reads.fetch_add(1, Relaxed);
                self.counters
                    .backing_read_bytes
                    .fetch_add(bytes.len() as u64, Relaxed);
                let blocks: Vec<Arc<Vec<u8>>> = (0..run.len())
                    .map(|index| {
                        let from = (index * block_bytes).min(bytes.len());
                        Arc::new(bytes[from..(from + block_bytes).min(bytes.len())].to_vec())
                    })
                    .collect();
                for (job, block) in run.iter().zip(&blocks) {
                    job.inflight.finish(Ok(block.clone()));
                }
                if let Some(remote) = &self.remote {
                    self.store(remote, run, &blocks);
                }
            }
            Err(code) => {
                for job in run {
                    job.inflight.finish(Err(code));
                }
            }
        }
        for job in run {
            self.forget(job);
        }
    }

    /// Stores a run's blocks (not the empty ones past the end of the file) in one pipeline.
    fn store(&self, remote: &Remote, run: &[Arc<Job>], blocks: &[Arc<Vec<u8>>]) {
        let file = &run[0].file;
        // Under the fill lock (shared): a write either finished its invalidation before this check (its
        // generation differs: not stored) or deletes these blocks after it. Jobs of one run share a file.
        let _fill = file.fill_lock.read();
        let mut entries = Vec::with_capacity(run.len());
        for (job, block) in run.iter().zip(blocks) {
            if file.write_gen() != job.write_gen {
                self.counters.store_skipped_stale.fetch_add(1, Relaxed);
            } else if !block.is_empty() {
                let key = block_key(file.id(), job.epoch, job.block);
                if self.admits(job, &key) {
                    entries.push((key, block.clone()));
                }
            }
        }
        let Ok(stored) = remote.set_many(&entries) else {
            return;
        };
        for ((_, block), stored) in entries.iter().zip(stored) {
            if stored {
                self.counters.blocks_stored.fetch_add(1, Relaxed);
                self.counters
                    .blocks_stored_bytes
                    .fetch_add(block.len() as u64, Relaxed);
            } else {
                self.counters.store_refused.fetch_add(1, Relaxed);
            }
        }
    }

    /// Blocks read ahead or for a sequential stream are always stored; a block read for a random reader goes
    /// past the doorkeeper.
    fn admits(&self, job: &Job, key: &[u8]) -> bool {
        let Some(doorkeeper) = &self.admission else {
            return true;
        };
        if job.for_stream {
            return true;
        }
        let admit = doorkeeper.admit(key_hash(key));
        if admit == Admit::SeenBefore {
            self.counters.admitted_seen_before.fetch_add(1, Relaxed);
        } else if !admit.stores() {
            self.counters.admission_skipped.fetch_add(1, Relaxed);
        }
        admit.stores()
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
