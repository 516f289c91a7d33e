//! Running a recipe as one transaction over the project.
//!
//! Every attempt of every step is a review run under the recipe's profile
//! (review mode is the only thing added to it, so a step never gets more
//! than the profile gives a run), stacked on the layer the successful
//! steps before it left ([`crate::review::stack`]): the step sees their
//! changes, its own writes land in a fresh layer, and a failed attempt's
//! layer is dropped before the retry, so no write of a failed attempt
//! reaches the retry, the next step or the project. When every step has
//! succeeded, the accumulated layer is captured into the review store as
//! one run and applied by [`crate::review::apply`] with its default rules
//! (or kept, with `--review`); when one fails after its retries, the layer
//! is removed and the project was never written.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::parse::{Recipe, Step};
use super::report::{Attempt, Outcome, RecipeReport, StepReport};
use crate::review::stack::{self, Stack};
use crate::review::{ReviewError, Store};
use crate::Policy;

/// A recipe that could not be run (a step that fails is not an error: it
/// is in the report).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The project directory.
    #[error("the project {path}: {source}")]
    Project {
        /// As given.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The review store or the recipe's layers.
    #[error(transparent)]
    Layers(#[from] ReviewError),
}

/// How to run a recipe.
#[derive(Debug)]
pub struct Options {
    /// The project (the current directory, typically).
    pub project: PathBuf,
    /// Keep the changes for `sandbox changes`/`apply` instead of applying.
    pub review: bool,
    /// Said before each attempt (the command line prints it on stderr).
    pub progress: fn(&str),
}

/// Run `recipe` under `policy` over `options.project`.
pub fn run(recipe: &Recipe, policy: &Policy, options: &Options) -> Result<RecipeReport, RunError> {
    let clock = Instant::now();
    let project = std::fs::canonicalize(&options.project).map_err(|source| RunError::Project {
        path: options.project.clone(),
        source,
    })?;
    let mut policy = policy.clone();
    policy.filesystem.review = true;
    let store = Store::user();
    // The recipe's start: a project path changed on the host after it is a
    // conflict at apply, as for one review run.
    let mut started = store.start(&project, &policy);
    let work = Work::new(&started.id)?;
    let mut report = RecipeReport {
        recipe: recipe.path.display().to_string(),
        title: recipe.title.clone(),
        profile: policy.name.clone(),
        ok: false,
        failed_step: None,
        tries: 0,
        steps: Vec::new(),
        outcome: Outcome::RolledBack,
        seconds: 0.0,
    };
    let runner = Runner {
        policy: &policy,
        project: &project,
        work: &work,
        progress: options.progress,
    };
    for try_number in 1..=recipe.whole.retries.saturating_add(1) {
        report.tries = try_number;
        work.reset()?;
        let (steps, failed) = runner.steps(recipe)?;
        report.steps = steps;
        report.failed_step = failed;
        if report.failed_step.is_none() && !recipe.whole.checks.is_empty() {
            let checks = checks_script(&recipe.whole.checks);
            let (ok, attempt) = runner.probe("checks", checks, recipe.whole.checks_timeout)?;
            report.steps.push(StepReport {
                name: "checks".into(),
                ok,
                attempts: vec![attempt],
                changes: None,
            });
            if !ok {
                report.failed_step = Some("checks".into());
            }
        }
        if report.failed_step.is_none() {
            break;
        }
        if let Some(on_failure) = &recipe.whole.on_failure {
            let argv = vec!["/bin/sh".into(), "-c".into(), on_failure.clone()];
            let (_, attempt) = runner.probe("on_failure", argv, recipe.whole.on_failure_timeout)?;
            report.steps.push(StepReport {
                name: "on_failure".into(),
                ok: attempt.status == Some(0),
                attempts: vec![attempt],
                changes: None,
            });
        }
    }
    report.ok = report.failed_step.is_none();
    if report.ok {
        report.outcome = finish(&store, &mut started, &work, options.review)?;
    }
    report.seconds = clock.elapsed().as_secs_f64();
    Ok(report)
}

/// Capture the accumulated layer as one review run, then apply it (or
/// keep it, for `--review`).
fn finish(
    store: &Store,
    started: &mut crate::review::Started,
    work: &Work,
    review: bool,
) -> Result<Outcome, ReviewError> {
    let layer_root = nix::fcntl::open(
        &work.root.join("layer"),
        nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|source| ReviewError::Layer {
        path: work.root.join("layer"),
        source,
    })?;
    let captured =
        crate::review::capture::capture(store, started, std::os::fd::AsFd::as_fd(&layer_root))?;
    if captured.changes.is_empty() && !captured.limit_reached {
        return Ok(Outcome::NoChanges);
    }
    let run = started.id.clone();
    if review {
        return Ok(Outcome::Kept {
            run,
            changes: captured.changes.len(),
        });
    }
    match crate::review::apply::apply(store, &run, &[], crate::review::apply::Allow::default()) {
        Ok(applied) => Ok(Outcome::Applied {
            applied: applied.applied,
        }),
        Err(ReviewError::Refused(reasons)) => Ok(Outcome::Refused { run, reasons }),
        Err(err) => Err(err),
    }
}

struct Runner<'a> {
    policy: &'a Policy,
    project: &'a Path,
    work: &'a Work,
    progress: fn(&str),
}

impl Runner<'_> {
    /// Every step in order, each retried as it says; the name of the
    /// step that failed, if one did (the steps after it are not run).
    fn steps(&self, recipe: &Recipe) -> Result<(Vec<StepReport>, Option<String>), RunError> {
        let mut reports = Vec::new();
        for (index, step) in recipe.steps.iter().enumerate() {
            let report = self.step(step, index + 1, recipe.steps.len())?;
            let ok = report.ok;
            reports.push(report);
            if !ok {
                return Ok((reports, Some(step.name.clone())));
            }
        }
        Ok((reports, None))
    }

    fn step(&self, step: &Step, number: usize, of: usize) -> Result<StepReport, RunError> {
        let mut report = StepReport {
            name: step.name.clone(),
            ok: false,
            attempts: Vec::new(),
            changes: None,
        };
        let argv = if step.checks.is_empty() {
            step.argv.clone()
        } else {
            with_checks(&step.argv, &step.checks)
        };
        for attempt in 1..=step.retries.saturating_add(1) {
            if attempt > 1 {
                std::thread::sleep(step.delay_before(attempt));
            }
            (self.progress)(&format!(
                "recipe: step {number}/{of} `{}`: attempt {attempt} of {}",
                step.name,
                step.retries.saturating_add(1)
            ));
            let keep = self.work.attempt_dir();
            let (ok, mut result) = self.attempt(&argv, &step.env, step.timeout, &keep);
            result.number = attempt;
            report.attempts.push(result);
            if ok {
                report.changes = Some(stack::summary(&keep)?);
                stack::merge(&keep, &self.work.accumulated())?;
                // Each layer is bounded by its tmpfs; the sum of them, on
                // the state directory's disk, by the same limit.
                let limit = self.policy.filesystem.review_size;
                if stack::size(&self.work.accumulated())? > limit {
                    if let Some(last) = report.attempts.last_mut() {
                        last.error = Some(format!(
                            "the recipe's changes together are larger than the layer limit ({limit} bytes, `[filesystem] review_size`)"
                        ));
                    }
                    break;
                }
                report.ok = true;
                break;
            }
            // Rollback: the attempt's writes go with its layer.
            self.work.drop_dir(&keep)?;
        }
        Ok(report)
    }

    /// A run over the transaction's state whose own writes are dropped:
    /// Goose's `checks` and `on_failure`.
    fn probe(
        &self,
        what: &str,
        argv: Vec<String>,
        timeout: Option<Duration>,
    ) -> Result<(bool, Attempt), RunError> {
        (self.progress)(&format!("recipe: {what}"));
        let keep = self.work.attempt_dir();
        let (ok, mut attempt) = self.attempt(&argv, &[], timeout, &keep);
        attempt.number = 1;
        self.work.drop_dir(&keep)?;
        Ok((ok, attempt))
    }

    /// One review run of `argv`, stacked on the accumulated layer, its
    /// own layer kept at `keep`: whether it succeeded, and how it went.
    fn attempt(
        &self,
        argv: &[String],
        env: &[(String, String)],
        timeout: Option<Duration>,
        keep: &Path,
    ) -> (bool, Attempt) {
        let clock = Instant::now();
        let mut policy = self.policy.clone();
        if timeout.is_some() {
            policy.limits.timeout = timeout;
        }
        let (program, args) = argv
            .split_first()
            .map_or(("", &[][..]), |(p, a)| (p.as_str(), a));
        let mut command = crate::Command::new(program, policy);
        command
            .args(args)
            .project(self.project)
            .stdin(crate::Stdio::Null)
            .review_stack(Stack {
                lower: self.work.accumulated(),
                keep: keep.to_path_buf(),
            });
        for (name, value) in env {
            command.env(name, value);
        }
        let finished = command.run();
        let mut attempt = Attempt {
            number: 0,
            status: None,
            error: None,
            seconds: 0.0,
        };
        let kept = finished.report.as_ref().and_then(|r| r.review.clone());
        let timed_out = finished.report.as_ref().is_some_and(|r| {
            r.limits_hit()
                .contains(&crate::spawn::parent::LimitHit::Timeout)
        });
        match finished.result {
            Ok(status) => attempt.status = Some(status.as_shell_status()),
            Err(err) => attempt.error = Some(err.to_string()),
        }
        if attempt.error.is_none() {
            attempt.error = match &kept {
                None => Some("no layer was kept".into()),
                Some(kept) if kept.error.is_some() => kept.error.clone(),
                Some(kept) if kept.limit_reached => Some(
                    "it filled its layer (`[filesystem] review_size`), so some of its writes failed"
                        .into(),
                ),
                Some(_) if timed_out => Some("its time limit ran out".into()),
                Some(_) => None,
            };
        }
        attempt.seconds = clock.elapsed().as_secs_f64();
        (
            attempt.status == Some(0) && attempt.error.is_none(),
            attempt,
        )
    }
}

/// `argv`, then each check, in one shell: the attempt succeeds when all
/// do. The argv is passed as the shell's arguments, never quoted into it.
fn with_checks(argv: &[String], checks: &[String]) -> Vec<String> {
    let mut script = String::from("\"$@\" || exit $?\n");
    script.push_str(&checks_body(checks));
    let mut wrapped = vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        script,
        "sh".to_owned(),
    ];
    wrapped.extend(argv.iter().cloned());
    wrapped
}

fn checks_script(checks: &[String]) -> Vec<String> {
    vec!["/bin/sh".into(), "-c".into(), checks_body(checks)]
}

fn checks_body(checks: &[String]) -> String {
    let mut script = String::new();
    for (index, check) in checks.iter().enumerate() {
        script.push_str(&format!(
            "(\n{check}\n) || {{ echo \"sandbox: recipe check {} failed\" >&2; exit 1; }}\n",
            index + 1
        ));
    }
    script
}

/// The recipe's private directory in the state directory:
/// `recipes/ID/layer/upper` (the accumulated layer), one directory per
/// attempt, and `owner`, locked for as long as the recipe runs. Removed
/// when the recipe ends; one whose recipe was killed (SIGKILL, a crash,
/// the machine's end) is removed by the next recipe ([`sweep`]).
struct Work {
    root: PathBuf,
    attempts: std::cell::Cell<u32>,
    /// Held until the directory is removed (fields drop after
    /// [`Work::drop`]'s body).
    _owner: nix::fcntl::Flock<std::fs::File>,
}

/// The lock of the recipes' directory: a recipe's directory and its owner
/// lock are made under it, and a sweep looks at them under it, so a sweep
/// never sees a directory between its creation and its lock.
const RECIPES_LOCK: &str = ".lock";
/// A recipe's owner lock in its directory.
const OWNER: &str = "owner";

impl Work {
    fn new(id: &str) -> Result<Work, ReviewError> {
        let recipes = crate::safe_file::state_dir().join("recipes");
        stack::create_private_dir(&recipes)?;
        let _all = lock_file(&recipes.join(RECIPES_LOCK), true)?;
        sweep(&recipes);
        let root = recipes.join(id);
        stack::create_private_dir(&root.join("layer"))?;
        let owner = lock_file(&root.join(OWNER), false)?.ok_or_else(|| ReviewError::Io {
            op: "locking",
            path: root.join(OWNER),
            source: std::io::Error::other("a new recipe's owner file is locked already"),
        })?;
        Ok(Work {
            root,
            attempts: std::cell::Cell::new(0),
            _owner: owner,
        })
    }

    fn accumulated(&self) -> PathBuf {
        self.root.join("layer").join(crate::review::capture::UPPER)
    }

    /// An empty accumulated layer: the project as it is.
    fn reset(&self) -> Result<(), ReviewError> {
        self.drop_dir(&self.accumulated())?;
        stack::create_private_dir(&self.accumulated())
    }

    fn attempt_dir(&self) -> PathBuf {
        let n = self.attempts.get() + 1;
        self.attempts.set(n);
        self.root.join(format!("attempt-{n}"))
    }

    fn drop_dir(&self, dir: &Path) -> Result<(), ReviewError> {
        match std::fs::remove_dir_all(dir) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(ReviewError::Io {
                op: "removing",
                path: dir.to_path_buf(),
                source: err,
            }),
            _ => Ok(()),
        }
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// `path` (created, private, never through a symlink) locked exclusively:
/// waiting for it with `wait`, else None when another process holds it.
/// A lock is the kernel's, released when its holder dies however it
/// dies, so a recipe killed with SIGKILL leaves its owner file unlocked
/// and nothing to misread: unlike a recorded pid, it cannot name a reused
/// pid, or a process in another pid namespace.
fn lock_file(
    path: &Path,
    wait: bool,
) -> Result<Option<nix::fcntl::Flock<std::fs::File>>, ReviewError> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|source| ReviewError::Io {
            op: "opening",
            path: path.to_path_buf(),
            source,
        })?;
    let how = if wait {
        nix::fcntl::FlockArg::LockExclusive
    } else {
        nix::fcntl::FlockArg::LockExclusiveNonblock
    };
    match nix::fcntl::Flock::lock(file, how) {
        Ok(lock) => Ok(Some(lock)),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, errno)) => Err(ReviewError::Io {
            op: "locking",
            path: path.to_path_buf(),
            source: errno.into(),
        }),
    }
}

/// Remove what recipes that are gone left in `recipes` (the caller holds
/// its lock): each directory whose owner lock is free. One whose owner
/// is locked belongs to a recipe running now, and stays. A directory
/// without an owner file is a leftover too (one of a version before the
/// lock); anything that is not a directory of an id's name is not ours
/// and is left alone. Best effort: what cannot be removed now is tried
/// again by the next recipe.
fn sweep(recipes: &Path) {
    let Ok(entries) = std::fs::read_dir(recipes) else {
        return;
    };
    let store = Store::at(recipes.to_path_buf());
    for entry in entries.filter_map(Result::ok) {
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let Ok(dir) = store.run_dir(&name) else {
            continue;
        };
        if !std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
            continue;
        }
        // Held while the directory goes, so that it is gone before any
        // other process could take its id's lock.
        if let Ok(Some(_gone)) = lock_file(&dir.join(OWNER), false) {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_removes_what_a_gone_recipe_left_and_never_a_running_ones() {
        let recipes = tempfile::tempdir().unwrap();
        let dir = |name: &str| {
            let dir = recipes.path().join(name);
            stack::create_private_dir(&dir.join("layer/upper")).unwrap();
            dir
        };
        let gone = dir("20261128-010101-aaaa");
        drop(lock_file(&gone.join(OWNER), false).unwrap());
        let older = dir("20261128-010101-bbbb");
        let running = dir("20261128-010101-cccc");
        let _held = lock_file(&running.join(OWNER), false).unwrap().unwrap();
        let foreign = recipes.path().join("not.ours");
        std::fs::create_dir(&foreign).unwrap();
        sweep(recipes.path());
        assert!(!gone.exists(), "its owner's lock was free");
        assert!(!older.exists(), "no owner file: a leftover");
        assert!(running.join("layer/upper").is_dir(), "its owner runs");
        assert!(foreign.is_dir(), "not a recipe's name");
    }

    #[test]
    fn checks_run_after_the_command_in_one_shell() {
        let argv = with_checks(&["make".into(), "a b".into()], &["test -f out".into()]);
        assert_eq!(argv[..2], ["/bin/sh", "-c"]);
        assert!(argv[2].starts_with("\"$@\" || exit $?\n(\ntest -f out\n) || "));
        assert_eq!(argv[3..], ["sh", "make", "a b"]);
    }
}
