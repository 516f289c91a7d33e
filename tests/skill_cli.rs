//! `sandbox skill list|show|check` against skill directories on disk.

use std::path::Path;
use std::process::Command;

fn sandbox() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sandbox"))
}

fn write_skill(root: &Path, dir: &str, manifest: &str, files: &[(&str, &str)]) {
    let d = root.join(dir);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("SKILL.md"), manifest).unwrap();
    for (name, content) in files {
        std::fs::write(d.join(name), content).unwrap();
    }
}

#[test]
fn list_show_and_check_report_valid_and_invalid_skills() {
    let project = tempfile::tempdir().unwrap();
    let skills = project.path().join(".skills");
    write_skill(
        &skills,
        "reader",
        "---\nname: reader\ndescription: Reads a file\nruntime: node\nmain: index.js\npermissions: [fs.read]\n---\nUse it to read.\n",
        &[("index.js", "process.on('message', () => {});\n")],
    );
    write_skill(
        &skills,
        "sketch",
        "---\nname: sketch\ndescription: A template\nexecution-mode: template\n---\nAdapt this:\n",
        &[("script.sh", "echo adapt me\n")],
    );
    write_skill(
        &skills,
        "broken",
        "---\nname: broken\ndescription: x\nruntime: ruby\nmain: a\n---\n",
        &[],
    );

    let list = sandbox()
        .args(["skill", "list", "--project"])
        .arg(project.path())
        .output()
        .unwrap();
    assert!(list.status.success());
    let stdout = String::from_utf8_lossy(&list.stdout);
    assert!(
        stdout.contains("reader") && stdout.contains("node") && stdout.contains("Reads a file"),
        "{stdout}"
    );
    assert!(
        stdout.contains("sketch") && stdout.contains("template"),
        "{stdout}"
    );
    let stderr = String::from_utf8_lossy(&list.stderr);
    assert!(
        stderr.contains("skipping an invalid skill") && stderr.contains("broken/SKILL.md:4:"),
        "{stderr}"
    );
    assert!(
        stderr.contains("unknown variant `ruby`, expected one of `node`, `python`, `sh`, `exec`"),
        "{stderr}"
    );

    let show = sandbox()
        .args(["skill", "show", "sketch", "--project"])
        .arg(project.path())
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&show.stdout);
    assert!(
        shown.contains("Adapt this:")
            && shown.contains("--- script.sh ---")
            && shown.contains("echo adapt me"),
        "{shown}"
    );

    let check = sandbox()
        .args(["skill", "check"])
        .arg(&skills)
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(2), "one skill is invalid");
    let check_one = sandbox()
        .args(["skill", "check"])
        .arg(skills.join("reader"))
        .output()
        .unwrap();
    assert!(
        check_one.status.success(),
        "{}",
        String::from_utf8_lossy(&check_one.stderr)
    );
    assert!(String::from_utf8_lossy(&check_one.stdout).contains("ok (reader)"));
}

/// A `--grant` that does not parse is a usage error wherever it is taken:
/// exit 2, naming the flag, before anything starts.
#[test]
fn a_malformed_grant_is_a_usage_error_for_skill_run_and_serve() {
    let project = tempfile::tempdir().unwrap();
    for args in [
        &["skill", "run", "reader", "--grant", "bogus"][..],
        &["serve", "--stdio", "--grant", "bogus"][..],
    ] {
        let out = sandbox()
            .args(args)
            .current_dir(project.path())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("--grant \"bogus\""), "{args:?}: {stderr}");
    }
}

/// An input schema keyword the parameter check does not implement refuses
/// the manifest where it is written, instead of being skipped: a skipped
/// `patternProperties` or `if` would let through params its author meant
/// to refuse.
#[test]
fn an_input_schema_keyword_that_is_not_checked_refuses_the_skill() {
    let root = tempfile::tempdir().unwrap();
    // `sandbox skill check` on a skill whose input schema is `schema`.
    let check = |schema: &str| {
        let manifest = format!(
            "---\nname: guarded\ndescription: x\nruntime: node\nmain: index.js\n\
             input-schema: {schema}\n---\n"
        );
        write_skill(root.path(), "guarded", &manifest, &[("index.js", "")]);
        sandbox()
            .args(["skill", "check"])
            .arg(root.path().join("guarded"))
            .output()
            .unwrap()
    };
    for (schema, keyword, location) in [
        (
            "{type: object, patternProperties: {'^x': {type: string}}}",
            "patternProperties",
            "/patternProperties",
        ),
        (
            "{properties: {to: {type: string, if: {minLength: 3}}}}",
            "if",
            "/properties/to/if",
        ),
        (
            "{prefixItems: [{type: string}]}",
            "prefixItems",
            "/prefixItems",
        ),
    ] {
        let out = check(schema);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{schema}: {stderr}");
        assert!(
            stderr.contains("SKILL.md:6:")
                && stderr.contains(&format!(
                    "at {location}: keyword \"{keyword}\" is not supported"
                )),
            "{schema}: {stderr}"
        );
    }
    let supported = "{type: object, properties: {n: {type: integer, multipleOf: 2}, \
                     id: {type: string, pattern: '^[a-z]+$'}}, required: [n], \
                     additionalProperties: false}";
    let out = check(supported);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What pydantic's `model_json_schema()` emits (`$defs`, `$ref`, `format`,
/// `discriminator`) loads, and params are checked through its references;
/// a reference that leads nowhere or only to itself refuses the skill.
#[test]
fn a_pydantic_schema_loads_and_checks_params_through_its_references() {
    let root = tempfile::tempdir().unwrap();
    let schema: serde_json::Value =
        serde_json::from_str(include_str!("skill_schemas/pydantic.json")).expect("pydantic.json");
    let skill = |schema: &str| {
        let manifest = format!(
            "---\nname: tickets\ndescription: x\nruntime: node\nmain: index.js\n\
             input-schema: {schema}\n---\n"
        );
        write_skill(root.path(), "tickets", &manifest, &[("index.js", "")]);
    };
    skill(&schema.to_string());
    let out = sandbox()
        .args(["skill", "check"])
        .arg(root.path().join("tickets"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let params = serde_json::json!({
        "id": "0b6f3a52-3f5e-4a55-9c3e-2f1d6c1b7a10",
        "title": "t",
        "created": "2026-11-27T10:00:00Z",
        "address": {"street": "s", "city": "c"},
        "tree": {"name": "root", "children": [{"name": 7}]},
        "pet": {"kind": "dog"}
    });
    let out = sandbox()
        .args(["skill", "run", "--skills-dir"])
        .arg(root.path())
        .args(["tickets", "--params", &params.to_string()])
        .current_dir(root.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("/tree/children/0/name"), "{stderr}");

    for (schema, message) in [
        (
            "{$ref: '#/x'}",
            "at /$ref: $ref \"#/x\" points at nothing in this schema",
        ),
        ("{$ref: '#'}", "leads back to itself"),
        (
            "{$ref: 'https://example.org/s.json'}",
            "names another document",
        ),
    ] {
        skill(schema);
        let out = sandbox()
            .args(["skill", "check"])
            .arg(root.path().join("tickets"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{schema}: {stderr}");
        assert!(stderr.contains(message), "{schema}: {stderr}");
    }
}
