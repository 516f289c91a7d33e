//! Broker round-trip latency and pipelined throughput, in-process: a client
//! thread on one end of a socketpair, the broker's own read/answer path on
//! the other, as the supervisor's poll loop drives it. Run through
//! `scripts/bench-broker`.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use sandbox::broker::server::Broker;

fn broker_loop(mut broker: Broker, sock: UnixStream) {
    loop {
        let mut events = PollFlags::POLLIN;
        if broker.wants_output() {
            events |= PollFlags::POLLOUT;
        }
        let mut fds = [PollFd::new(sock.as_fd(), events)];
        if poll(&mut fds, PollTimeout::NONE).is_err() {
            return;
        }
        let revents = fds[0].revents().unwrap_or(PollFlags::empty());
        if revents.intersects(PollFlags::POLLIN | PollFlags::POLLHUP)
            && !broker.on_readable(sock.as_fd())
        {
            return;
        }
        if broker.wants_output() && !broker.on_writable(sock.as_fd()) {
            return;
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)].as_secs_f64() * 1e6
}

fn main() {
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("4k.bin"), vec![b'a'; 4096]).unwrap();
    let policy = sandbox::profile::load("strict").unwrap();
    let broker = Broker::new(
        policy.broker.clone(),
        project.path(),
        &[],
        // The production rules: every fs.read pays the secrets check.
        sandbox::project::Rules::new(&policy.filesystem.secrets, &policy.filesystem.protect)
            .unwrap(),
        None,
        "bench".into(),
    )
    .unwrap();
    let mut broker = broker;
    // The production configuration: the supervisor's rate limit.
    let (per_second, burst) = sandbox::broker::server::RATE_LIMIT;
    broker.set_rate_limit(per_second, burst);
    let (client, server) = UnixStream::pair().unwrap();
    let handle = std::thread::spawn(move || broker_loop(broker, server));
    let mut reader = BufReader::new(client.try_clone().unwrap());
    let mut writer = client;
    let mut line = String::new();

    for (name, request) in [
        (
            "permission.query",
            r#"{"jsonrpc":"2.0","id":1,"method":"permission.query","params":{"action":"fs.read"}}"#,
        ),
        (
            "fs.read 4 KiB",
            r#"{"jsonrpc":"2.0","id":1,"method":"fs.read","params":{"path":"4k.bin"}}"#,
        ),
    ] {
        let request = format!("{request}\n");
        let mut times = Vec::with_capacity(20_000);
        for i in 0..21_000 {
            let started = Instant::now();
            writer.write_all(request.as_bytes()).unwrap();
            line.clear();
            reader.read_line(&mut line).unwrap();
            if i >= 1_000 {
                times.push(started.elapsed());
            }
        }
        assert!(line.contains("result"), "{line}");
        times.sort();
        println!(
            "{name:18} one at a time: p50 {:6.1} us   p99 {:6.1} us",
            percentile(&times, 0.50),
            percentile(&times, 0.99)
        );

        // More than the rate limit's burst, so that the sustained rate shows.
        let total = 400_000;
        let reader_thread = {
            let mut reader = BufReader::new(writer.try_clone().unwrap());
            std::thread::spawn(move || {
                let mut line = String::new();
                let mut served = 0u64;
                for _ in 0..total {
                    line.clear();
                    reader.read_line(&mut line).unwrap();
                    served += u64::from(line.contains("\"result\""));
                }
                served
            })
        };
        let started = Instant::now();
        let batch = request.repeat(100);
        for _ in 0..total / 100 {
            writer.write_all(batch.as_bytes()).unwrap();
        }
        let served = reader_thread.join().unwrap();
        let elapsed = started.elapsed().as_secs_f64();
        println!(
            "{name:18} pipelined:     {:9.0} answers/s, {:9.0} served/s ({} refused by the rate limit)",
            total as f64 / elapsed,
            served as f64 / elapsed,
            total - served as usize
        );
    }
    drop(writer);
    drop(reader);
    handle.join().unwrap();
}
