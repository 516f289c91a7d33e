//! `sandbox run -v`: each setup step on stderr, as it happens.

use nix::errno::Errno;

use crate::spawn::channel::Record;
use crate::spawn::prepare::Prepared;

/// `sandbox run -v`: one setup step on stderr, as it happens.
pub(super) fn step_note(prepared: &Prepared, what: std::fmt::Arguments<'_>) {
    if prepared.config.supervision.verbose {
        eprintln!("sandbox: setup: {what}");
    }
}

/// `-v`: what a record from inside says, as it arrives.
pub(super) fn note_record(prepared: &Prepared, record: &Record) {
    // What the notes are built from (the measured view above all) is not
    // computed for every run that prints none.
    if !prepared.config.supervision.verbose {
        return;
    }
    match record {
        Record::Landlock { abi, status } => step_note(
            prepared,
            format_args!(
                "Landlock ABI {abi}: {} ({} rules)",
                crate::landlock::status_name(*status),
                prepared.plan().landlock_rules.len()
            ),
        ),
        Record::Skipped { step, errno } => step_note(
            prepared,
            format_args!(
                "skipped (best-effort) {}: {}",
                step.describe(),
                Errno::from_raw(*errno).desc()
            ),
        ),
        Record::Measured(view) => {
            let measured = crate::spawn::measure::Measured::new(
                view,
                prepared.started.confinement.host.as_ref(),
            );
            let show =
                |value: Option<u64>| value.map_or("unmeasured".to_string(), |v| v.to_string());
            let namespaces: Vec<String> = measured
                .namespaces
                .iter()
                .map(|(name, state)| {
                    format!(
                        "{name}={}",
                        serde_json::to_value(state)
                            .map_or_else(|_| "?".into(), |v| v.as_str().unwrap_or("?").to_string())
                    )
                })
                .collect();
            step_note(
                prepared,
                format_args!(
                    "the payload's own view before exec: NoNewPrivs {}, CapEff {}, Seccomp mode {} with {} filter(s), uid {} gid {}, namespaces {}",
                    show(view.no_new_privs),
                    view.capabilities[2].map_or("unmeasured".to_string(), |c| format!("{c:016x}")),
                    show(view.seccomp_mode),
                    show(view.seccomp_filters),
                    show(view.uid),
                    show(view.gid),
                    namespaces.join(" ")
                ),
            );
        }
        Record::NamespacesUsable => step_note(
            prepared,
            format_args!("the new namespaces are usable: init mounted and pivoted"),
        ),
        Record::Failed {
            step,
            errno,
            detail,
        } => step_note(
            prepared,
            format_args!(
                "failed {} ({detail}): {}",
                step.describe(),
                Errno::from_raw(*errno).desc()
            ),
        ),
    }
}
