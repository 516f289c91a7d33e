//! A review run's end: its layer, handed over by init with the payload's
//! exit, kept in the store (see [`crate::review`]).

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use crate::review::{Kept, Started, Store};

/// Keep the changes of the run `started` describes. Fails closed: a layer
/// that is missing or cannot be read keeps nothing, and says why.
/// `store` is where (None: the user's own store).
pub(super) fn capture(store: Option<&Path>, started: &Started, layer: Option<OwnedFd>) -> Kept {
    if let Some(stack) = &started.stack {
        // A recipe's step: its layer goes to the recipe, not the store.
        return match &layer {
            Some(layer) => crate::review::stack::keep(layer.as_fd(), &started.id, &stack.keep),
            None => Kept {
                id: started.id.clone(),
                changes: 0,
                limit_reached: false,
                error: Some("init did not hand the layer over (the run ended before its view was built, or was killed)".to_owned()),
            },
        };
    }
    let store = store.map_or_else(Store::user, |root| Store::at(root.to_path_buf()));
    let mut started = started.clone();
    let result = match &layer {
        None => Err("init did not hand the layer over (the run ended before its view was built, or was killed)".to_owned()),
        Some(layer) => crate::review::capture::capture(&store, &mut started, layer.as_fd())
            .map_err(|err| err.to_string()),
    };
    match result {
        // Nothing to review: nothing was written.
        Ok(captured) if captured.changes.is_empty() && !captured.limit_reached => Kept {
            id: started.id.clone(),
            changes: 0,
            limit_reached: false,
            error: None,
        },
        Ok(captured) => Kept {
            id: started.id.clone(),
            changes: captured.changes.len(),
            limit_reached: captured.limit_reached,
            error: None,
        },
        Err(error) => {
            let _ = store.discard(&started.id);
            Kept {
                id: started.id.clone(),
                changes: 0,
                limit_reached: false,
                error: Some(error),
            }
        }
    }
}
