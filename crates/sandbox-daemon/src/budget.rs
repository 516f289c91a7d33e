//! The bytes of run logs in flight to one caller at once.
//!
//! A follower of a run's log reads whole lines (up to
//! [`LOG_LINE_LIMIT`](super::log::LOG_LINE_LIMIT), 2 MiB) and hands them to
//! hyper, which keeps them until the client has read them. One caller may
//! hold 256 connections, so 128 followers of a log whose lines are long and
//! legitimate made the daemon hold about 320 MiB. Each chunk a follower
//! reads is now paid for, before the read, from its caller's budget, and the
//! payment goes back when hyper drops the chunk (it was written to the
//! socket, or the connection closed). One caller's followers then wait on
//! each other, never on another caller's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::body::Bytes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::log::{CHUNK, LOG_LINE_LIMIT};

/// Bytes of log chunks one caller may have in flight (about 17 MiB): four
/// of the longest reads, or hundreds of ordinary ones. Measured with 128
/// followers handing out one 2 MiB line (tests/attack_daemon_input.rs):
/// the daemon grew by 317 MiB without a budget, 71 MiB with eight reads'
/// worth, 50 MiB with four.
pub const PER_CALLER: usize = 4 * MOST_ONE_READ_HOLDS;

/// What one [`Tail::read_lines`](super::log::Tail::read_lines) may hold at
/// its peak: one 64 KiB read completes at most two chunks' worth of lines
/// beside one line left in the file (at most the line limit), and the
/// lines are held twice while they are joined into the chunk.
pub const MOST_ONE_READ_HOLDS: usize = 2 * (LOG_LINE_LIMIT + 2 * CHUNK);

/// Per-caller budgets of bytes in flight.
#[derive(Debug)]
pub struct StreamBudget {
    per_caller: usize,
    callers: Mutex<HashMap<u32, Arc<Semaphore>>>,
}

/// Bytes paid for before a read, until the chunk read is attached.
#[derive(Debug)]
pub struct Reserved(OwnedSemaphorePermit);

/// A chunk that keeps its payment until it is dropped.
struct Paid {
    chunk: Vec<u8>,
    _permit: OwnedSemaphorePermit,
}

impl AsRef<[u8]> for Paid {
    fn as_ref(&self) -> &[u8] {
        &self.chunk
    }
}

impl Default for StreamBudget {
    fn default() -> Self {
        StreamBudget::new(PER_CALLER)
    }
}

impl StreamBudget {
    /// A budget of `per_caller` bytes for each uid.
    pub fn new(per_caller: usize) -> StreamBudget {
        StreamBudget {
            per_caller: per_caller.clamp(1, u32::MAX as usize),
            callers: Mutex::new(HashMap::new()),
        }
    }

    /// Wait until `uid` may hold `bytes` more (at most its whole budget).
    /// `None` only if the budget was closed, which nothing does.
    pub async fn reserve(&self, uid: u32, bytes: usize) -> Option<Reserved> {
        let semaphore = self.semaphore(uid);
        let wanted = bytes.clamp(1, self.per_caller) as u32;
        semaphore
            .acquire_many_owned(wanted)
            .await
            .ok()
            .map(Reserved)
    }

    /// Bytes `uid` has in flight now.
    pub fn in_flight(&self, uid: u32) -> usize {
        let callers = self.callers.lock().unwrap_or_else(PoisonError::into_inner);
        callers
            .get(&uid)
            .map_or(0, |s| self.per_caller - s.available_permits())
    }

    fn semaphore(&self, uid: u32) -> Arc<Semaphore> {
        let mut callers = self.callers.lock().unwrap_or_else(PoisonError::into_inner);
        // A caller with nothing in flight is forgotten, so the map holds
        // only the uids streaming now.
        callers.retain(|_, s| Arc::strong_count(s) > 1 || s.available_permits() < self.per_caller);
        callers
            .entry(uid)
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_caller)))
            .clone()
    }
}

impl Reserved {
    /// The chunk read, holding as much of the payment as its size and
    /// giving the rest back.
    pub fn attach(mut self, chunk: Vec<u8>) -> Bytes {
        let held = self.0.num_permits();
        let keep = chunk.len().clamp(1, held);
        if keep < held {
            // The part split off is given back when it drops here.
            drop(self.0.split(held - keep));
        }
        Bytes::from_owner(Paid {
            chunk,
            _permit: self.0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_chunk_holds_its_size_until_dropped_and_callers_are_apart() {
        let budget = StreamBudget::new(1000);
        let reserved = budget.reserve(7, 600).await.unwrap();
        assert_eq!(budget.in_flight(7), 600);
        let chunk = reserved.attach(vec![b'x'; 250]);
        assert_eq!(budget.in_flight(7), 250, "the rest is given back");
        let clone = chunk.clone();
        drop(chunk);
        assert_eq!(budget.in_flight(7), 250, "a clone still holds it");
        // Another caller is not held back by uid 7.
        let other = budget.reserve(8, 1000).await.unwrap();
        assert_eq!(budget.in_flight(8), 1000);
        drop(other);
        drop(clone);
        assert_eq!(budget.in_flight(7), 0);
        assert_eq!(budget.in_flight(8), 0);
    }

    #[tokio::test]
    async fn a_caller_over_its_budget_waits_for_its_own_chunks() {
        let budget = Arc::new(StreamBudget::new(1000));
        let first = budget.reserve(7, 800).await.unwrap().attach(vec![0; 800]);
        let waiting = {
            let budget = budget.clone();
            tokio::spawn(async move { budget.reserve(7, 800).await })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "800 + 800 is over the budget");
        drop(first);
        let second = waiting.await.expect("the second read");
        assert_eq!(budget.in_flight(7), 800);
        drop(second);
        // Asking for more than the whole budget asks for the budget.
        let all = budget.reserve(7, 10_000).await.unwrap();
        assert_eq!(budget.in_flight(7), 1000);
        drop(all);
        assert!(budget.callers.lock().unwrap().len() <= 1);
        let _ = budget.reserve(9, 1).await;
        assert_eq!(
            budget.callers.lock().unwrap().len(),
            1,
            "idle uids forgotten"
        );
    }
}
