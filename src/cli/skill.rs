//! `sandbox skill`: list, show and check skills. (Running them comes next.)
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use sandbox::skill::manifest::{self, ExecutionMode};

/// Where to look for skills.
#[derive(Debug, Args)]
pub struct Roots {
    /// A directory of skills (repeatable), searched before the project's .skills/.
    #[arg(long = "skills-dir", value_name = "DIR")]
    pub skills_dirs: Vec<PathBuf>,
    /// The project root (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
}

/// Subcommands of `sandbox skill`.
#[derive(Debug, Subcommand)]
pub enum SkillCommand {
    /// List the skills found, and the manifests that did not load.
    List {
        #[command(flatten)]
        roots: Roots,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show a skill's manifest and instructions (templates: also their files).
    Show {
        /// The skill's name.
        name: String,
        #[command(flatten)]
        roots: Roots,
    },
    /// Check the skills in DIR (a skill directory or a directory of skills).
    Check {
        /// Default: every skill root.
        dir: Option<PathBuf>,
        #[command(flatten)]
        roots: Roots,
    },
}

fn discover(roots: &Roots) -> anyhow::Result<manifest::Discovered> {
    let project = match &roots.project {
        Some(p) => p.clone(),
        None => std::env::current_dir().context("the current directory")?,
    };
    Ok(manifest::discover(&manifest::roots(
        &roots.skills_dirs,
        &project,
    )))
}

fn report_problems(found: &manifest::Discovered) {
    for err in &found.invalid {
        eprintln!("sandbox: skipping an invalid skill: {err}");
    }
    for (name, used, ignored) in &found.duplicates {
        eprintln!(
            "sandbox: skill {name} is defined twice; using {} and ignoring {}",
            used.display(),
            ignored.display()
        );
    }
}

pub fn run(cmd: SkillCommand) -> anyhow::Result<i32> {
    match cmd {
        SkillCommand::List { roots, json } => {
            let found = discover(&roots)?;
            report_problems(&found);
            if json {
                let skills: Vec<_> = found.skills.values().collect();
                println!("{}", serde_json::to_string_pretty(&skills)?);
            } else if found.skills.is_empty() {
                println!("no skills found");
            } else {
                for skill in found.skills.values() {
                    let mode = match skill.execution_mode {
                        ExecutionMode::Template => "template".to_string(),
                        ExecutionMode::Direct => {
                            format!("{:?}", skill.runtime.unwrap_or(manifest::Runtime::Exec))
                                .to_lowercase()
                        }
                    };
                    println!("{:<24} {:<9} {}", skill.name, mode, skill.description);
                }
            }
            Ok(0)
        }
        SkillCommand::Show { name, roots } => {
            let found = discover(&roots)?;
            let skill = found
                .skills
                .get(&name)
                .with_context(|| format!("no skill named {name} (see `sandbox skill list`)"))?;
            println!("{} — {}", skill.name, skill.description);
            println!("directory: {}", skill.dir.display());
            if let Some(main) = &skill.main {
                println!("main: {}", main.display());
            }
            println!(
                "permissions: {}",
                if skill.permissions.is_empty() {
                    "none".into()
                } else {
                    skill.permissions.join(", ")
                }
            );
            println!("profile: {}\n", skill.profile);
            print!("{}", skill.instructions);
            if skill.execution_mode == ExecutionMode::Template {
                // Templates are never run: their files are shown as text.
                let mut files: Vec<PathBuf> = std::fs::read_dir(&skill.dir)?
                    .flatten()
                    .map(|e| e.path())
                    .collect();
                files.sort();
                for file in files
                    .iter()
                    .filter(|f| f.is_file() && f.file_name().is_some_and(|n| n != "SKILL.md"))
                {
                    println!(
                        "\n--- {} ---",
                        file.strip_prefix(&skill.dir).unwrap_or(file).display()
                    );
                    print!("{}", String::from_utf8_lossy(&std::fs::read(file)?));
                }
            }
            Ok(0)
        }
        SkillCommand::Check { dir, roots } => {
            let found = match dir {
                Some(dir) if dir.join("SKILL.md").is_file() => {
                    let mut found = manifest::Discovered::default();
                    match manifest::load(&dir) {
                        Ok(skill) => {
                            found.skills.insert(skill.name.clone(), skill);
                        }
                        Err(err) => found.invalid.push(err),
                    }
                    found
                }
                Some(dir) => manifest::discover(&[dir]),
                None => discover(&roots)?,
            };
            for err in &found.invalid {
                eprintln!("{err}");
            }
            for skill in found.skills.values() {
                println!(
                    "{}: ok ({})",
                    skill.dir.join("SKILL.md").display(),
                    skill.name
                );
            }
            for (name, used, ignored) in &found.duplicates {
                eprintln!(
                    "skill {name} is defined twice: {} and {}",
                    used.display(),
                    ignored.display()
                );
            }
            Ok(if found.invalid.is_empty() && found.duplicates.is_empty() {
                0
            } else {
                2
            })
        }
    }
}
