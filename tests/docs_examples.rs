//! The book's command examples, run against the binary so the docs cannot
//! drift from it.
//!
//! A ```` ```console ```` block in `docs/src/**/*.md` or README.md is a
//! transcript: each `$ sandbox ...` line is a command (run by `/bin/sh -c` in
//! a fresh project of the chapter, with this build's `sandbox` first on
//! `PATH`), an optional `? N` line right after it is the exit status it must
//! have (0 otherwise), and the lines up to the next `$` line or the block's
//! end are its output: stdout, then stderr. In the expected lines `...`
//! alone stands for any number of lines and `[..]` for any text within a
//! line; everything else must match exactly (trailing blanks aside).
//!
//! A ```` ```toml file=NAME ```` (or any language with ` file=NAME`) block
//! writes NAME into the chapter's project before the console blocks that
//! follow it, so an example can check a file the reader sees.
//!
//! The runner is written here rather than taken from trycmd: trycmd reads
//! `$` lines without a shell, takes a chapter's files from `.in` directories
//! beside it rather than from the text the reader sees, and brings rayon,
//! toml_edit and escargot into every build of the test suite for ~200 lines.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};

use support::{Project, Who};

/// One `$` line of a console block and what it must print.
#[derive(Debug)]
struct Example {
    /// `docs/src/run.md:42`: where the `$` line is.
    location: String,
    command: String,
    status: i32,
    expected: Vec<String>,
}

/// What a chapter asks for, in document order.
#[derive(Debug)]
enum Step {
    WriteFile { name: String, content: String },
    Run(Example),
}

/// The steps of one Markdown document.
fn parse(relative: &str, text: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut lines = text.lines().enumerate().peekable();
    while let Some((_, line)) = lines.next() {
        let Some(info) = line.strip_prefix("```") else {
            continue;
        };
        let mut body = Vec::new();
        for (number, line) in lines.by_ref() {
            if line.starts_with("```") {
                break;
            }
            body.push((number + 1, line));
        }
        let mut words = info.split_whitespace();
        let language = words.next().unwrap_or_default();
        if language == "console" {
            steps.extend(parse_console(relative, &body).into_iter().map(Step::Run));
        } else if let Some(name) = words.find_map(|word| word.strip_prefix("file=")) {
            let mut content: String = body.iter().map(|(_, l)| format!("{l}\n")).collect();
            if content.is_empty() {
                content.push('\n');
            }
            steps.push(Step::WriteFile {
                name: name.to_owned(),
                content,
            });
        }
    }
    steps
}

fn parse_console(relative: &str, body: &[(usize, &str)]) -> Vec<Example> {
    let mut examples: Vec<Example> = Vec::new();
    for &(number, line) in body {
        if let Some(command) = line.strip_prefix("$ ") {
            assert!(
                command.starts_with("sandbox ") || command == "sandbox",
                "{relative}:{number}: a checked example runs `sandbox`, not `{command}`"
            );
            examples.push(Example {
                location: format!("{relative}:{number}"),
                command: command.to_owned(),
                status: 0,
                expected: Vec::new(),
            });
            continue;
        }
        let Some(example) = examples.last_mut() else {
            panic!("{relative}:{number}: a console block starts with a `$ ` line");
        };
        match line.strip_prefix("? ") {
            Some(status) if example.expected.is_empty() => {
                example.status = status.trim().parse().unwrap_or_else(|_| {
                    panic!("{relative}:{number}: `? N` takes an exit status, not {status:?}")
                })
            }
            _ => example.expected.push(line.trim_end().to_owned()),
        }
    }
    examples
}

/// Whether `actual` matches one expected line, `[..]` matching any text.
fn line_matches(expected: &str, actual: &str) -> bool {
    let mut parts = expected.split("[..]");
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = actual.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    for (index, part) in parts.iter().enumerate() {
        if index + 1 == parts.len() {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// Whether the output lines match the expected ones, `...` matching any
/// number of lines.
fn output_matches(expected: &[String], actual: &[&str]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((first, rest)) if first == "..." => {
            (0..=actual.len()).any(|skip| output_matches(rest, &actual[skip..]))
        }
        Some((first, rest)) => actual
            .split_first()
            .is_some_and(|(line, tail)| line_matches(first, line) && output_matches(rest, tail)),
    }
}

/// Whether an example needs a sandbox that starts on this machine.
fn needs_a_sandbox(command: &str) -> bool {
    let words: Vec<&str> = command.split_whitespace().collect();
    words.windows(2).any(|pair| {
        pair[0] == "sandbox" && matches!(pair[1], "run" | "doctor" | "skill" | "serve" | "learn")
    })
}

/// A directory holding only a `sandbox` link to this build, for `PATH`.
fn binary_dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("sandbox-docs-bin-")
        .tempdir()
        .expect("tempdir");
    std::os::unix::fs::symlink(support::sandbox_bin(), dir.path().join("sandbox"))
        .expect("link the binary");
    dir
}

/// Runs one example in `project`; the mismatch, described, if any.
fn check(example: &Example, project: &Path, bin_dir: &Path) -> Option<String> {
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into());
    let out = Command::new("/bin/sh")
        .arg("-c")
        .arg(&example.command)
        .current_dir(project)
        .env("PATH", format!("{}:{path}", bin_dir.display()))
        .env("COLUMNS", "80")
        .env_remove("SANDBOX_DAEMON")
        .stdin(Stdio::null())
        .output()
        .expect("run /bin/sh");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let actual: Vec<&str> = text.lines().map(str::trim_end).collect();
    let status = out.status.code().unwrap_or(-1);
    if status == example.status && output_matches(&example.expected, &actual) {
        return None;
    }
    Some(format!(
        "{}: `$ {}`\n  expected (exit {}):\n{}\n  got (exit {status}):\n{}",
        example.location,
        example.command,
        example.status,
        indent(&example.expected.join("\n")),
        indent(&text),
    ))
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|line| format!("    | {line}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_books_command_examples_match_the_binary() {
    let test = "the_books_command_examples_match_the_binary";
    let root = support::docs::repo_root();
    let bin_dir = binary_dir();
    let mut failures = Vec::new();
    let mut ran = Vec::new();
    for document in support::docs::documents(&[]) {
        let relative = document
            .strip_prefix(&root)
            .expect("below the repository")
            .display()
            .to_string();
        let text = std::fs::read_to_string(&document).expect("read the document");
        let steps = parse(&relative, &text);
        if steps.is_empty() {
            continue;
        }
        let project = Project::new(Who::Root);
        for step in steps {
            match step {
                Step::WriteFile { name, content } => {
                    project.write(&name, &content);
                }
                Step::Run(example) => {
                    if needs_a_sandbox(&example.command)
                        && !support::require(
                            test,
                            &format!("a sandbox as root, for `{}`", example.location),
                            support::sandbox_works(Who::Root),
                        )
                    {
                        continue;
                    }
                    if let Some(failure) = check(&example, project.path(), bin_dir.path()) {
                        failures.push(failure);
                    }
                    ran.push(example.command);
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} example(s) in the docs no longer match the binary:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    eprintln!("checked {} command example(s) of the docs", ran.len());
}

/// The examples this suite promises to keep checked: if a chapter loses
/// one, this fails instead of the check silently shrinking.
#[test]
fn the_book_keeps_its_checked_examples() {
    let root = support::docs::repo_root();
    let mut commands = Vec::new();
    for document in support::docs::documents(&[]) {
        let relative = document.strip_prefix(&root).expect("below the repository");
        let text = std::fs::read_to_string(&document).expect("read the document");
        for step in parse(&relative.display().to_string(), &text) {
            if let Step::Run(example) = step {
                commands.push((example.command, example.status, example.expected));
            }
        }
    }
    let has = |prefix: &str, status: Option<i32>| {
        commands.iter().any(|(command, code, expected)| {
            command.starts_with(prefix)
                && status.is_none_or(|s| s == *code)
                && expected.iter().any(|line| line != "...")
        })
    };
    for (prefix, status) in [
        ("sandbox --help", Some(0)),
        ("sandbox profile list", Some(0)),
        ("sandbox profile show strict", Some(0)),
        ("sandbox profile check ", Some(0)),
        ("sandbox profile check ", Some(2)),
        ("sandbox run --profile strict -- ", Some(0)),
        ("sandbox run --profile strict -- ", None),
        ("sandbox doctor", None),
    ] {
        assert!(
            has(prefix, status),
            "no checked `{prefix}...` example (exit {status:?}) with expected output in the docs"
        );
    }
    assert!(
        commands.iter().any(|(command, code, _)| {
            command.starts_with("sandbox run --profile strict") && *code != 0
        }),
        "no checked example of a refused action under strict"
    );
}

#[test]
fn the_matcher_accepts_wildcards_and_rejects_differences() {
    let lines = |text: &str| text.lines().map(str::to_owned).collect::<Vec<_>>();
    assert!(output_matches(&lines("a\n...\nd"), &["a", "b", "c", "d"]));
    assert!(output_matches(&lines("a\n...\nd"), &["a", "d"]));
    assert!(output_matches(&lines("..."), &[]));
    assert!(output_matches(&lines("x [..] z"), &["x y y z"]));
    assert!(output_matches(&lines("[..]/tmp[..]"), &["in /tmp/abc"]));
    assert!(!output_matches(&lines("a\nb"), &["a", "c"]));
    assert!(!output_matches(&lines("a"), &["a", "b"]));
    assert!(!output_matches(&lines("a\n...\nd"), &["a", "b"]));
    assert!(!output_matches(&lines("x [..] z"), &["x y"]));
    assert!(!output_matches(&lines("ab[..]"), &["a"]));
    assert!(!line_matches("abc", "abcd"));
    let steps = parse(
        "t.md",
        "```toml file=a.toml\nk = 1\n```\n```console\n$ sandbox x\n? 2\nout\n...\n$ sandbox y\n```\n",
    );
    assert!(
        matches!(&steps[0], Step::WriteFile { name, content } if name == "a.toml" && content == "k = 1\n")
    );
    assert!(
        matches!(&steps[1], Step::Run(e) if e.status == 2 && e.expected == ["out", "..."] && e.location == "t.md:5")
    );
    assert!(matches!(&steps[2], Step::Run(e) if e.status == 0 && e.expected.is_empty()));
}
