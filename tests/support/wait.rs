//! Waiting in tests. A test waits for a condition, never for a time: a
//! limit is there to end a hung test, not to measure one, so every limit
//! here grows with the machine's load and with `SANDBOX_TEST_TIME_SCALE`.
//!
//! Why the load: `cargo test` runs its test binaries next to whatever else
//! the machine does (another build, another suite). On 2 cores with a load
//! of 6 each process gets a third of the time it had on an idle machine, so
//! a limit written on an idle machine is three times too short.

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// The factor a base limit is multiplied by now: `SANDBOX_TEST_TIME_SCALE`
/// (a positive number, 1 when unset) times one plus the machine's
/// one-minute load per CPU (a process sharing a CPU with N runnable others
/// gets about 1/(N+1) of it): 1 on an idle machine, 2 with every CPU busy.
pub fn scale() -> f64 {
    env_scale() * (1.0 + load_per_cpu())
}

fn env_scale() -> f64 {
    match std::env::var("SANDBOX_TEST_TIME_SCALE") {
        Err(_) => 1.0,
        Ok(text) => match text.trim().parse::<f64>() {
            Ok(factor) if factor.is_finite() && factor > 0.0 => factor,
            _ => {
                panic!("SANDBOX_TEST_TIME_SCALE={text:?}: give a positive number such as 2 or 0.5")
            }
        },
    }
}

fn load_per_cpu() -> f64 {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(1.0, |load| load.max(0.0) / cpus)
}

/// `base` as a limit on this machine now (see [`scale`]).
pub fn limit(base: Duration) -> Duration {
    base.mul_f64(scale())
}

/// `base` scaled, as whole seconds for a `--timeout` (or a payload's own
/// limit) that must not fire on a loaded machine.
pub fn seconds(base: Duration) -> u64 {
    limit(base).as_secs_f64().ceil() as u64
}

/// `--timeout` text for a run whose command must finish: `base` scaled.
pub fn timeout_arg(base: Duration) -> String {
    format!("{}s", seconds(base))
}

/// A limit that keeps growing with the load while it is waited for: the
/// largest scale seen since it started decides when it has passed.
pub struct Deadline {
    started: Instant,
    base: Duration,
    scale: f64,
}

impl Deadline {
    pub fn after(base: Duration) -> Deadline {
        Deadline {
            started: Instant::now(),
            base,
            scale: scale(),
        }
    }

    /// Whether the limit has passed (rechecking the load first).
    pub fn passed(&mut self) -> bool {
        let elapsed = self.started.elapsed();
        if elapsed < self.base.mul_f64(self.scale) {
            return false;
        }
        self.scale = self.scale.max(scale());
        elapsed >= self.base.mul_f64(self.scale)
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

/// Poll `probe` until it gives a value, or None once the (scaled) `base`
/// limit passed. Polls often at first, then every 100 ms.
pub fn within<T>(base: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let mut deadline = Deadline::after(base);
    let mut pause = Duration::from_millis(2);
    loop {
        if let Some(value) = probe() {
            return Some(value);
        }
        if deadline.passed() {
            return None;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

/// Poll `probe` until it gives a value; panic naming `what` (what was
/// waited for) once the scaled `base` limit passed.
pub fn until<T>(what: &str, base: Duration, probe: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    within(base, probe).unwrap_or_else(|| {
        panic!(
            "waited {:.0?} (limit {base:?} scaled by load and SANDBOX_TEST_TIME_SCALE) for {what}",
            started.elapsed()
        )
    })
}

/// Poll `condition` until it holds; panic naming `what` once the scaled
/// `base` limit passed.
pub fn until_true(what: &str, base: Duration, mut condition: impl FnMut() -> bool) {
    until(what, base, || condition().then_some(()))
}

/// Poll `condition` until it holds; false once the scaled `base` limit
/// passed (for callers that clean up before they fail).
pub fn holds_within(base: Duration, mut condition: impl FnMut() -> bool) -> bool {
    within(base, || condition().then_some(())).is_some()
}

/// Wait for `child` to exit; None once the scaled `base` limit passed (the
/// child is still running and left to the caller).
pub fn exit_within(child: &mut Child, base: Duration) -> Option<ExitStatus> {
    within(base, || child.try_wait().expect("try_wait"))
}
