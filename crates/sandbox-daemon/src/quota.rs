//! Counting what each caller holds at once (connections, waiting skill
//! calls): a place is taken under a per-uid and a total limit and given
//! back when its [`Slot`] is dropped, whatever way the holder ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Counts per uid.
#[derive(Debug, Clone, Default)]
pub struct PerUid {
    counts: Arc<Mutex<HashMap<u32, usize>>>,
}

/// One place of `uid`'s, until dropped.
#[derive(Debug)]
pub struct Slot {
    counts: Arc<Mutex<HashMap<u32, usize>>>,
    uid: u32,
}

impl PerUid {
    /// Take a place for `uid` if it holds fewer than `per_uid` and all
    /// together fewer than `total`; otherwise the count that is full.
    pub fn take(&self, uid: u32, per_uid: usize, total: usize) -> Result<Slot, usize> {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let all: usize = counts.values().sum();
        if all >= total {
            return Err(all);
        }
        let mine = counts.entry(uid).or_insert(0);
        if *mine >= per_uid {
            return Err(*mine);
        }
        *mine += 1;
        Ok(Slot {
            counts: self.counts.clone(),
            uid,
        })
    }

    /// Places held, all together.
    pub fn total(&self) -> usize {
        self.counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .sum()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = counts.get_mut(&self.uid) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.uid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_limited_per_uid_and_in_all_and_given_back() {
        let quota = PerUid::default();
        let a1 = quota.take(1, 2, 3).unwrap();
        let _a2 = quota.take(1, 2, 3).unwrap();
        assert_eq!(quota.take(1, 2, 3).unwrap_err(), 2, "uid 1's share");
        let _b1 = quota.take(2, 2, 3).unwrap();
        assert_eq!(quota.take(2, 2, 3).unwrap_err(), 3, "all together");
        drop(a1);
        let _b2 = quota.take(2, 2, 3).unwrap();
        assert_eq!(quota.total(), 3);
    }
}
