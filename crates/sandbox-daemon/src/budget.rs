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
use tokio::sync::Semaphore;

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
    /// Callers that may have nothing in flight since the last reserve.
    maybe_idle: Arc<MaybeIdle>,
}

/// The callers whose budget was whole again when a payment came back (or
/// a wait was given up): the only ones that can have become idle since
/// the last reserve. A reserve forgets the idle ones among them, so its
/// cost under the lock is the payments that came back whole since, not
/// a scan of every caller.
#[derive(Debug)]
struct MaybeIdle {
    per_caller: usize,
    uids: Mutex<Vec<u32>>,
}

/// Bytes paid for before a read, until the chunk read is attached.
#[derive(Debug)]
pub struct Reserved(Payment);

/// Permits taken from one caller's semaphore (none while it waits for
/// them), given back when dropped.
#[derive(Debug)]
struct Payment {
    uid: u32,
    /// Taken on drop, so that the payment's reference is gone before the
    /// caller is noted as maybe idle (a reserve forgets only a semaphore
    /// nothing else refers to).
    semaphore: Option<Arc<Semaphore>>,
    permits: u32,
    maybe_idle: Arc<MaybeIdle>,
}

/// A chunk that keeps its payment until it is dropped.
struct Paid {
    chunk: Vec<u8>,
    _payment: Payment,
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
        let per_caller = per_caller.clamp(1, u32::MAX as usize);
        StreamBudget {
            per_caller,
            callers: Mutex::new(HashMap::new()),
            maybe_idle: Arc::new(MaybeIdle {
                per_caller,
                uids: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Wait until `uid` may hold `bytes` more (at most its whole budget).
    /// `None` only if the budget was closed, which nothing does.
    pub async fn reserve(&self, uid: u32, bytes: usize) -> Option<Reserved> {
        let wanted = bytes.clamp(1, self.per_caller) as u32;
        // Holds nothing while it waits; given up (the task cancelled), it
        // still notes the caller as maybe idle when dropped.
        let mut payment = Payment {
            uid,
            semaphore: Some(self.semaphore(uid)),
            permits: 0,
            maybe_idle: Arc::clone(&self.maybe_idle),
        };
        let semaphore = payment.semaphore.as_ref()?;
        semaphore.acquire_many(wanted).await.ok()?.forget();
        payment.permits = wanted;
        Some(Reserved(payment))
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
        for idle in self.maybe_idle.take() {
            let forget = callers.get(&idle).is_some_and(|s| {
                Arc::strong_count(s) == 1 && s.available_permits() == self.per_caller
            });
            if forget {
                callers.remove(&idle);
            }
        }
        callers
            .entry(uid)
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_caller)))
            .clone()
    }
}

impl MaybeIdle {
    fn note(&self, uid: u32) {
        self.uids
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(uid);
    }

    fn take(&self) -> Vec<u32> {
        std::mem::take(&mut *self.uids.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Drop for Payment {
    fn drop(&mut self) {
        let Some(semaphore) = self.semaphore.take() else {
            return;
        };
        semaphore.add_permits(self.permits as usize);
        let whole = semaphore.available_permits() == self.maybe_idle.per_caller;
        drop(semaphore);
        if whole {
            self.maybe_idle.note(self.uid);
        }
    }
}

impl Reserved {
    /// The chunk read, holding as much of the payment as its size and
    /// giving the rest back.
    pub fn attach(mut self, chunk: Vec<u8>) -> Bytes {
        let held = self.0.permits;
        let keep = (chunk.len().clamp(1, held as usize)) as u32;
        if let Some(semaphore) = &self.0.semaphore {
            semaphore.add_permits((held - keep) as usize);
            self.0.permits = keep;
        }
        Bytes::from_owner(Paid {
            chunk,
            _payment: self.0,
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

    #[tokio::test]
    async fn a_wait_given_up_leaves_its_caller_forgotten_and_a_busy_one_kept() {
        let budget = Arc::new(StreamBudget::new(1000));
        let all = budget.reserve(7, 1000).await.unwrap();
        let busy = budget.reserve(8, 10).await.unwrap().attach(vec![0; 10]);
        let waiting = {
            let budget = budget.clone();
            tokio::spawn(async move { budget.reserve(7, 1).await })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "uid 7's budget is all out");
        drop(all);
        waiting.abort();
        assert!(waiting.await.is_err(), "the wait was given up");
        let _ = budget.reserve(9, 1).await;
        let callers: Vec<u32> = {
            let mut uids: Vec<u32> = budget.callers.lock().unwrap().keys().copied().collect();
            uids.sort();
            uids
        };
        assert_eq!(callers, [8, 9], "uid 7 forgotten, uid 8 still streaming");
        assert_eq!(budget.in_flight(8), 10);
        drop(busy);
        let _ = budget.reserve(9, 1).await;
        assert_eq!(budget.callers.lock().unwrap().len(), 1);
    }
}
