//! Values and tables as the client commands print them.
use std::io::Write;

use serde_json::Value;

pub(super) fn text(value: &Value) -> String {
    match value {
        Value::Null => "-".into(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

pub(super) fn command_line(value: &Value) -> String {
    value
        .as_array()
        .map(|args| {
            args.iter()
                .map(|arg| {
                    let arg = text(arg);
                    if arg.is_empty() || arg.contains(|c: char| c.is_whitespace() || c == '\'') {
                        format!("'{}'", arg.replace('\'', "'\\''"))
                    } else {
                        arg
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| text(value))
}

pub(super) fn age(ms: u64) -> String {
    let secs = ms / 1000;
    match secs {
        0..=119 => format!("{secs}s"),
        120..=7199 => format!("{}m", secs / 60),
        7200..=172_799 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86_400),
    }
}

pub(super) fn print_table<const N: usize>(rows: &[[String; N]]) {
    let mut widths = [0; N];
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = std::io::stdout().lock();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == N {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables_and_ages() {
        assert_eq!(age(5_000), "5s");
        assert_eq!(age(600_000), "10m");
        assert_eq!(age(3 * 86_400_000), "3d");
        assert_eq!(
            command_line(&json!(["sh", "-c", "exit 7"])),
            "sh -c 'exit 7'"
        );
    }
}
