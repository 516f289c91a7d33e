//! Discovery and hot reload: the skills found under the roots, the inotify
//! watches on their files, and a reload that announces added, removed and
//! changed skills.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::super::files::fingerprint;
use super::super::host::error_object;
use super::super::manifest;
use super::hosts::kill_host;
use super::{ServeError, Server, Slot, State};
use crate::broker::protocol::code;

/// Quiet time after a file change before skills are reloaded, so that an
/// editor's burst of writes is one reload.
pub(super) const RELOAD_SETTLE: Duration = Duration::from_millis(50);

impl Server {
    /// Discover the skills again and apply the differences; returns the
    /// names added, removed and changed.
    pub(super) fn rescan(&mut self) -> (Vec<String>, Vec<String>, Vec<String>) {
        // Each fingerprint is taken before the manifest it stands for is
        // read: an edit in between then shows as a change at the next
        // check (a call taking a host kept ahead), never as an old
        // manifest under a new fingerprint, which kept a skill's old
        // timeout (or permissions) in force until the next reload. A
        // directory not seen before the read gets 0, which no check
        // matches, so it is read again.
        let before: std::collections::HashMap<PathBuf, u64> =
            manifest::candidate_dirs(&self.options.roots)
                .into_iter()
                .map(|dir| {
                    let print = fingerprint(&dir);
                    (dir, print)
                })
                .collect();
        let found = manifest::discover_roots(&self.options.roots);
        for err in &found.invalid {
            if !self.invalid.contains(err) {
                eprintln!("sandbox serve: skipping an invalid skill: {err}");
            }
        }
        for (name, used, ignored) in &found.duplicates {
            eprintln!(
                "sandbox serve: skill {name} is defined twice; using {} and ignoring {}",
                used.display(),
                ignored.display()
            );
        }
        for error in found.shadowing_errors() {
            if !self.shadowed.contains(&error) {
                eprintln!("sandbox serve: error: {error}");
            }
        }
        self.shadowed = found.shadowing_errors();
        self.invalid = found.invalid;
        let (mut added, mut removed, mut changed) = (Vec::new(), Vec::new(), Vec::new());
        let names: Vec<String> = self.slots.keys().cloned().collect();
        for name in names {
            if !found.skills.contains_key(&name) {
                removed.push(name);
            }
        }
        for (name, skill) in found.skills {
            match self.slots.get_mut(&name) {
                None => {
                    let print = before.get(&skill.dir).copied().unwrap_or(0);
                    self.slots.insert(name.clone(), Slot::new(skill, print));
                    added.push(name);
                }
                Some(slot) => {
                    let print = before.get(&skill.dir).copied().unwrap_or(0);
                    if print != slot.fingerprint || skill != slot.skill {
                        slot.skill = skill;
                        slot.fingerprint = print;
                        slot.refusal = None;
                        slot.crashes.clear();
                        slot.consecutive = 0;
                        slot.not_before = None;
                        slot.stale = slot.host.is_some();
                        changed.push(name);
                    }
                }
            }
        }
        self.watch_all();
        (added, removed, changed)
    }

    pub(super) fn watch_all(&mut self) {
        use inotify::WatchMask;
        let Some(watcher) = &mut self.watcher else {
            return;
        };
        let mask = WatchMask::CREATE
            | WatchMask::DELETE
            | WatchMask::MODIFY
            | WatchMask::CLOSE_WRITE
            | WatchMask::MOVED_FROM
            | WatchMask::MOVED_TO
            | WatchMask::ATTRIB
            | WatchMask::DELETE_SELF
            | WatchMask::ONLYDIR;
        let mut dirs: Vec<PathBuf> = Vec::new();
        for root in self.options.roots.all() {
            if root.is_dir() {
                dirs.push(root.clone());
                if let Ok(entries) = std::fs::read_dir(root) {
                    for entry in entries.flatten() {
                        if entry.file_type().is_ok_and(|t| t.is_dir()) {
                            dirs.push(entry.path());
                        }
                    }
                }
            } else if let Some(parent) = root.parent().filter(|p| p.is_dir()) {
                // A root that does not exist yet appears in its parent.
                dirs.push(parent.to_path_buf());
            }
        }
        for slot in self.slots.values() {
            let mut pending = vec![(slot.skill.dir.clone(), 0)];
            while let Some((dir, depth)) = pending.pop() {
                if let Ok(entries) = std::fs::read_dir(&dir) {
                    for entry in entries.flatten() {
                        if depth < 4 && entry.file_type().is_ok_and(|t| t.is_dir()) {
                            pending.push((entry.path(), depth + 1));
                        }
                    }
                }
                dirs.push(dir);
            }
        }
        dirs.sort();
        dirs.dedup();
        for dir in dirs {
            // Adding a watch twice returns the same one; failures (a
            // directory removed meanwhile) are caught by the next rescan.
            let _ = watcher.watches().add(&dir, mask);
        }
    }

    /// Apply a rescan: announce additions, stop removed skills, restart
    /// changed ones before their next invocation.
    pub(super) fn reload(&mut self) -> Result<Value, ServeError> {
        let (added, removed, changed) = self.rescan();
        for name in &added {
            self.announce(name)?;
        }
        for name in &removed {
            self.asks.retain(|_, ask| ask.skill != *name);
            if let Some(mut slot) = self.slots.remove(name) {
                if let Some(host) = &mut slot.host {
                    kill_host(host);
                }
                if let Some((spare, _)) = slot.spare.take() {
                    super::ahead::end_spare(spare);
                }
                let message = format!("skill {name} was removed");
                for call in slot.inflight.into_iter().chain(slot.queue) {
                    self.respond(
                        &call.id,
                        Err(error_object(code::NO_SUCH_SKILL, message.clone())),
                    )?;
                }
                let error = self
                    .invalid
                    .iter()
                    .find(|e| e.file.starts_with(&slot.skill.dir))
                    .map(|e| e.to_string());
                let mut params = json!({ "name": name, "state": "removed" });
                if let Some(error) = error {
                    params["error"] = json!(error);
                }
                self.send(
                    &json!({"jsonrpc": "2.0", "method": "skill.stateChanged", "params": params}),
                )?;
            }
        }
        for name in &changed {
            self.discard_spare(name);
            if let Some(slot) = self.slots.get_mut(name) {
                if slot.inflight.is_none() {
                    if let Some(host) = &mut slot.host {
                        host.stopping = true;
                        kill_host(host);
                    }
                }
            }
            self.set_state(name, State::Inactive, None)?;
        }
        for name in added.iter().chain(&changed) {
            self.prepare_ahead(name);
        }
        let differences = json!({ "added": added, "removed": removed, "changed": changed });
        if !(added.is_empty() && removed.is_empty() && changed.is_empty()) {
            // Also for a changed skill that was inactive and stays so, of
            // which no stateChanged tells.
            self.send(
                &json!({"jsonrpc": "2.0", "method": "skill.listChanged", "params": differences}),
            )?;
        }
        Ok(differences)
    }

    pub(super) fn on_watch_events(&mut self) {
        let Some(watcher) = &mut self.watcher else {
            return;
        };
        let mut buf = [0u8; 16 * 1024];
        let mut any = false;
        while let Ok(events) = watcher.read_events(&mut buf) {
            let mut count = 0;
            for _ in events {
                count += 1;
            }
            if count == 0 {
                break;
            }
            any = true;
        }
        if any {
            self.reload_at = Some(Instant::now() + RELOAD_SETTLE);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{server, write_skill};
    use super::super::Call;
    use super::*;
    use crate::broker::protocol::Id;

    #[test]
    fn a_fingerprint_changes_with_the_files_and_only_then() {
        let root = tempfile::tempdir().unwrap();
        write_skill(root.path(), "s", "");
        let dir = root.path().join("s");
        let first = fingerprint(&dir);
        assert_eq!(fingerprint(&dir), first);
        std::fs::write(dir.join("main.sh"), "echo changed\n").unwrap();
        let edited = fingerprint(&dir);
        assert_ne!(edited, first);
        std::fs::create_dir(dir.join("lib")).unwrap();
        std::fs::write(dir.join("lib/x.sh"), "").unwrap();
        assert_ne!(fingerprint(&dir), edited, "a new file deeper down");
    }

    #[test]
    fn a_reload_announces_what_was_added_changed_and_removed() {
        let root = tempfile::tempdir().unwrap();
        write_skill(root.path(), "a", "");
        write_skill(root.path(), "gone", "");
        let (mut server, output) = server(root.path(), false);
        assert_eq!(
            server.reload().unwrap(),
            json!({"added": [], "removed": [], "changed": []})
        );
        assert!(output.take().is_empty(), "nothing changed, nothing said");

        let slot = server.slots.get_mut("a").unwrap();
        slot.crashes.push_back(Instant::now());
        slot.consecutive = 2;
        slot.not_before = Some(Instant::now() + Duration::from_secs(30));
        server.slots.get_mut("gone").unwrap().queue.push_back(Call {
            id: Id::Number(4.into()),
            params: json!({}),
        });
        write_skill(root.path(), "a", "timeout: 7s\n");
        write_skill(root.path(), "b", "");
        std::fs::remove_dir_all(root.path().join("gone")).unwrap();
        let differences = server.reload().unwrap();
        assert_eq!(
            differences,
            json!({"added": ["b"], "removed": ["gone"], "changed": ["a"]})
        );
        let sent = output.take();
        let answer = sent.iter().find(|m| m["id"] == 4).unwrap();
        assert_eq!(answer["error"]["code"], code::NO_SUCH_SKILL);
        assert!(sent.iter().any(|m| m["method"] == "skill.stateChanged"
            && m["params"] == json!({"name": "gone", "state": "removed"})));
        assert!(sent
            .iter()
            .any(|m| m["method"] == "skill.stateChanged" && m["params"]["name"] == "b"));
        assert_eq!(
            sent.last().unwrap(),
            &json!({"jsonrpc": "2.0", "method": "skill.listChanged", "params": differences})
        );
        let a = &server.slots["a"];
        assert_eq!(a.skill.timeout, Some(Duration::from_secs(7)));
        assert!(a.crashes.is_empty() && a.consecutive == 0 && a.not_before.is_none());
        assert!(!a.stale, "no host to retire");
        assert!(!server.slots.contains_key("gone"));
    }
}
