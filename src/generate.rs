//! `sandbox __generate` (hidden): shell completions and man pages, made
//! from the very clap definitions this binary parses with, so they cannot
//! drift from the command line they describe.
//!
//! Why a hidden subcommand of the shipped binary rather than an xtask or a
//! build script: the `Cli` type lives in the binary crate (src), which
//! no other crate can name; an xtask or a second `[[bin]]` would have to
//! compile the whole CLI (and with it the library) a second time through
//! `#[path]` includes, and a build script cannot see it at all. And a
//! `cargo install` user, who gets no packaged completions, can make them
//! with the binary they have. The price is clap_complete and clap_mangen in
//! every copy: scripts/bench-size measures the binary (see the packaging
//! branch's report for the figure).
use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, CommandFactory, Subcommand};

/// Arguments of `sandbox __generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    #[command(subcommand)]
    what: Generated,
}

#[derive(Debug, Subcommand)]
enum Generated {
    /// Print the completion script for SHELL on standard output.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write man pages (section 1) into DIR: sandbox.1, and sandbox-NAME.1
    /// for each subcommand (and their subcommands).
    Man {
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}

pub fn run(args: GenerateArgs) -> anyhow::Result<i32> {
    match args.what {
        Generated::Completions { shell } => {
            // Into memory first: clap_complete panics on a write error (a
            // closed pipe), and this command must not panic.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut visible_command(), "sandbox", &mut script);
            let mut out = std::io::stdout().lock();
            out.write_all(&script)
                .and_then(|()| out.flush())
                .context("writing the completion script to standard output")?;
        }
        Generated::Man { dir } => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            // One page per visible command, named as `man` looks them up
            // (`man sandbox-run`); hidden ones are left out.
            clap_mangen::generate_to(visible_command(), &dir)
                .with_context(|| format!("writing man pages into {}", dir.display()))?;
        }
    }
    Ok(0)
}

/// The command line as users see it: `Cli` without its hidden subcommands
/// (`__launch`, `__skill-host`, this one), which clap_complete would
/// otherwise offer. clap cannot remove a subcommand, so the top level is
/// rebuilt around the visible ones; it has no arguments of its own beyond
/// help and version (a test holds that).
fn visible_command() -> clap::Command {
    let full = super::Cli::command();
    // Literals, because clap names and versions are `&'static str` here
    // (no `string` feature); a test holds them equal to `Cli`'s.
    let mut visible = clap::Command::new("sandbox")
        .version(env!("CARGO_PKG_VERSION"))
        .subcommand_required(full.is_subcommand_required_set())
        .arg_required_else_help(full.is_arg_required_else_help_set())
        .subcommands(
            full.get_subcommands()
                .filter(|sub| !sub.is_hide_set())
                .cloned(),
        );
    if let Some(about) = full.get_about() {
        visible = visible.about(about.clone());
    }
    visible
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_top_level_has_no_arguments_that_visible_command_would_drop() {
        let mut full = super::super::Cli::command();
        full.build();
        let own: Vec<_> = full
            .get_arguments()
            .map(|arg| arg.get_id().as_str())
            .filter(|id| !matches!(*id, "help" | "version"))
            .collect();
        assert!(own.is_empty(), "visible_command() must copy these: {own:?}");
        let visible = visible_command();
        assert_eq!(visible.get_name(), full.get_name());
        assert_eq!(visible.get_version(), full.get_version());
    }

    #[test]
    fn completions_offer_every_visible_subcommand_and_no_hidden_one() {
        let full = super::super::Cli::command();
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut visible_command(), "sandbox", &mut script);
            let script = String::from_utf8(script).expect("completion scripts are UTF-8");
            for sub in full.get_subcommands() {
                let name = sub.get_name();
                assert_eq!(
                    script.contains(name),
                    !sub.is_hide_set(),
                    "{shell}: subcommand {name} (hidden: {})",
                    sub.is_hide_set()
                );
            }
            assert!(
                script.contains("allow-read"),
                "{shell}: run's options are completed"
            );
        }
    }

    #[test]
    fn man_pages_cover_each_visible_subcommand() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        clap_mangen::generate_to(visible_command(), dir.path()).expect("man pages are written");
        let full = super::super::Cli::command();
        assert!(dir.path().join("sandbox.1").is_file());
        for sub in full.get_subcommands() {
            let page = dir.path().join(format!("sandbox-{}.1", sub.get_name()));
            assert_eq!(page.is_file(), !sub.is_hide_set(), "{}", page.display());
        }
        let run = std::fs::read_to_string(dir.path().join("sandbox-run.1")).expect("sandbox-run.1");
        assert!(run.starts_with(".ie") || run.contains(".TH"), "{run}");
        assert!(run.contains("profile"), "{run}");
    }
}
