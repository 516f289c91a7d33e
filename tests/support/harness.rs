//! The runner of the test binaries without libtest (`harness = false` in
//! Cargo.toml: their tests clone or fork, which is only sound from a
//! single-threaded process, and libtest runs tests on threads). Each test
//! runs on the main thread, one after another; a test that skipped through
//! [`super::require`] is reported as skipped, never as passed, and under
//! SANDBOX_TEST_REQUIRE=1 that skip is a failure, so the binary exits 101.

/// Run `tests` (name, function) in order, print one line each and a
/// summary for `binary`, and exit: 101 when any failed, 0 otherwise.
pub fn run(binary: &str, tests: &[(&str, fn())]) -> ! {
    let parent = std::process::id();
    let (mut passed, mut skipped, mut failed) = (0, 0, 0);
    for (name, test) in tests {
        let skips_before = super::skips_so_far();
        let result = std::panic::catch_unwind(*test);
        if std::process::id() != parent {
            // Only reached by a child that unwound out of a clone or fork
            // (a bug some of these tests look for): never report for it.
            std::process::exit(101);
        }
        match result {
            Ok(()) if super::skips_so_far() > skips_before => {
                println!("test {name} ... skipped");
                skipped += 1;
            }
            Ok(()) => {
                println!("test {name} ... ok");
                passed += 1;
            }
            Err(_) => {
                println!("test {name} ... FAILED");
                failed += 1;
            }
        }
    }
    println!("{binary}: {passed} passed, {skipped} skipped, {failed} failed");
    std::process::exit(if failed > 0 { 101 } else { 0 });
}
