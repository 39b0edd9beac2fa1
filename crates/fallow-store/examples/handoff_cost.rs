//! Measures what the shard design trades off on this machine: taking a shard lock directly versus handing a
//! request to a shard-owner thread and waiting for the answer (DESIGN.md's message-passing shards).
//!
//! `cargo run --release -p fallow-store --example handoff_cost`
use parking_lot::Mutex;
use std::sync::mpsc;
use std::time::Instant;

const ROUNDS: u32 = 200_000;

fn main() {
    let shard = Mutex::new(0u64);
    let started = Instant::now();
    for _ in 0..ROUNDS {
        *shard.lock() += 1;
    }
    let lock_ns = started.elapsed().as_nanos() as f64 / ROUNDS as f64;
    assert_eq!(*shard.lock(), ROUNDS as u64);

    // A request to another thread and its reply, each through a channel, with the owner sleeping in
    // between (what a shard thread does when it has no other work).
    let (request_sender, request_receiver) = mpsc::sync_channel::<u64>(1);
    let (reply_sender, reply_receiver) = mpsc::sync_channel::<u64>(1);
    let owner = std::thread::spawn(move || {
        let mut state = 0u64;
        while let Ok(delta) = request_receiver.recv() {
            state += delta;
            if reply_sender.send(state).is_err() {
                break;
            }
        }
    });
    let handoff_rounds = ROUNDS / 10;
    let started = Instant::now();
    for round in 0..handoff_rounds {
        request_sender.send(1).expect("owner alive");
        let state = reply_receiver.recv().expect("owner alive");
        assert_eq!(state, round as u64 + 1);
    }
    let handoff_ns = started.elapsed().as_nanos() as f64 / handoff_rounds as f64;
    drop(request_sender);
    owner.join().expect("owner thread");

    println!("uncontended shard lock + update: {lock_ns:.0} ns per request");
    println!("hand-off to an owner thread and back: {handoff_ns:.0} ns per request");
    println!("ratio: {:.0}x", handoff_ns / lock_ns);
}
