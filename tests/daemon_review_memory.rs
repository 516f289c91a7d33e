//! `GET /v1/runs/ID/changes?diff=true` of a review run whose diff is large
//! (60 MB: sixty files of 1 MB of text, each just under the size the core
//! still diffs): the answer carries every byte of it, and the daemon does
//! not hold it. Each request may carry two helper outputs of up to 64 MiB,
//! and a caller may have two requests at once; the daemon's peak RSS
//! (VmHWM) is read before and after the request.

mod support;

use support::daemon::Daemon;

/// Files the run writes, and the bytes of each (text lines of 100 bytes).
const FILES: usize = 60;
const FILE_BYTES: usize = 1_000_000;

/// Most the daemon's peak RSS may grow by while it answers: a few reads
/// of the helpers' output in flight, never the diff. Holding the answer
/// whole made it grow by several times the diff.
const GROWTH_BOUND_KIB: u64 = 24 << 10;

fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn a_large_diff_reaches_its_owner_whole_without_the_daemon_holding_it() {
    let test = "a_large_diff_reaches_its_owner_whole_without_the_daemon_holding_it";
    if !support::require_root_sandbox(test) {
        return;
    }
    let daemon = Daemon::start("[[allow]]\nuids = [0]\nprojects = [\"{dir}\"]\n");
    let project = daemon.project("mine", None);
    let line = "x".repeat(99);
    let script = format!(
        "i=0; while [ $i -lt {FILES} ]; do yes {line} | head -c {FILE_BYTES} > f$i.txt || exit 1; i=$((i+1)); done"
    );
    let body = serde_json::json!({
        "command": ["/bin/sh", "-c", script],
        "project": project,
        "review": true,
        "wait": true,
    });
    let (code, run) = daemon.json(None, "POST", "/v1/runs", Some(&body.to_string()));
    assert_eq!(code, 200, "{run}");
    let id = run["id"].as_str().unwrap().to_owned();
    let (_, stderr, _) = daemon.output(&id);
    let said = String::from_utf8_lossy(&stderr);
    if !support::require(
        test,
        "overlayfs over tmpfs in a user namespace",
        !said.contains("mounting the review layer"),
    ) {
        return;
    }
    assert_eq!(run["status"], 0, "{run}\n{said}");

    let before = peak_rss_kib(daemon.pid());
    let (code, answer) = daemon.request_bytes("GET", &format!("/v1/runs/{id}/changes?diff=true"));
    let after = peak_rss_kib(daemon.pid());
    eprintln!(
        "daemon peak RSS {before} KiB before, {after} KiB after a {} byte answer",
        answer.len()
    );
    assert_eq!(
        code,
        200,
        "{}",
        String::from_utf8_lossy(&answer[..answer.len().min(500)])
    );
    let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(answer["id"], id.as_str());
    assert_eq!(answer["review"], run["report"]["run"]["id"]);
    assert_eq!(answer["changes"].as_array().map(Vec::len), Some(FILES));
    let diff = answer["diff"].as_str().unwrap();
    let added = format!("+{line}\n");
    assert_eq!(
        diff.matches(&added).count(),
        FILES * FILE_BYTES / 100,
        "every line of every file"
    );
    for i in 0..FILES {
        assert!(diff.contains(&format!("f{i}.txt")), "f{i}.txt");
    }
    assert!(
        after - before < GROWTH_BOUND_KIB,
        "the daemon's peak RSS grew by {} KiB answering a {} byte diff",
        after - before,
        diff.len()
    );
}
