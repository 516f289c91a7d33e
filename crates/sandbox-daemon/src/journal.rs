//! The daemon's own log on stderr: one line per lifecycle event (listening,
//! a run started and ended, stopping), kept as is by journald and by a
//! redirect alike. No colour ever (the subscriber is built without its
//! `ansi` feature), no timestamp under systemd (journald stamps each line
//! itself), and nothing of a run's environment, secrets or output: a run's
//! line names its id, its caller's uid, its command escaped and cut to
//! [`COMMAND_CHARS`], and how it ended.

use tracing::Level;

/// The most characters of a command a log line holds: enough to tell runs
/// apart, bounded so a megabyte of arguments never becomes a log line.
pub const COMMAND_CHARS: usize = 200;

/// Send the daemon's events to stderr: `info` and above, `debug` too with
/// `verbose` (`sandbox daemon -v`). A second call (tests) keeps the first
/// subscriber.
pub fn init(verbose: bool) {
    let level = if verbose { Level::DEBUG } else { Level::INFO };
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_target(false)
        .with_ansi(false);
    // systemd sets JOURNAL_STREAM when stderr is the journal.
    let _ = match std::env::var_os("JOURNAL_STREAM") {
        Some(_) => builder.without_time().try_init(),
        None => builder.try_init(),
    };
}

/// `argv` as one line of a log: each argument quoted when it has anything
/// but plain characters, with controls and invisible characters escaped as
/// the broker's prompt escapes them (a command cannot forge a second log
/// line or hide part of itself), cut to [`COMMAND_CHARS`]
/// characters with the number of arguments it had.
pub fn command_line(argv: &[String]) -> String {
    let mut line = String::new();
    for (index, arg) in argv.iter().enumerate() {
        let plain = !arg.is_empty()
            && arg
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
        let word = match plain {
            true => arg.clone(),
            false => format!(
                "\"{}\"",
                sandbox::broker::prompt::escape(&arg.replace('\\', "\\\\").replace('"', "\\\""))
            ),
        };
        let separator = usize::from(index > 0);
        if line.chars().count() + separator + word.chars().count() > COMMAND_CHARS {
            let room = COMMAND_CHARS.saturating_sub(line.chars().count() + separator);
            if index > 0 {
                line.push(' ');
            }
            line.extend(word.chars().take(room));
            line.push_str(&format!("… (cut; {} arguments in all)", argv.len()));
            return line;
        }
        if index > 0 {
            line.push(' ');
        }
        line.push_str(&word);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(args: &[&str]) -> Vec<String> {
        args.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn plain_arguments_stay_plain_and_others_are_quoted_and_escaped() {
        assert_eq!(command_line(&argv(&["make", "test"])), "make test");
        assert_eq!(
            command_line(&argv(&["sh", "-c", "echo a; exit 3", ""])),
            r#"sh -c "echo a; exit 3" """#
        );
        let forged = command_line(&argv(&["x\nINFO run ended\x1b[31m", "é"]));
        assert!(
            !forged.contains('\n') && !forged.contains('\x1b'),
            "{forged}"
        );
        assert_eq!(forged, r#""x\u{a}INFO run ended\u{1b}[31m" "é""#);
        assert_eq!(command_line(&argv(&[r#"a"b\"#])), r#""a\"b\\""#);
    }

    #[test]
    fn a_long_command_is_cut_and_says_so() {
        let long = "a".repeat(10_000);
        let line = command_line(&argv(&["echo", &long, "tail"]));
        assert!(line.chars().count() < COMMAND_CHARS + 40, "{line}");
        assert!(line.starts_with("echo aaa"), "{line}");
        assert!(line.ends_with("… (cut; 3 arguments in all)"), "{line}");
        let many: Vec<String> = (0..1000).map(|n| n.to_string()).collect();
        assert!(command_line(&many).ends_with("(cut; 1000 arguments in all)"));
    }
}
