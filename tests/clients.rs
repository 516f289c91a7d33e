//! The three ways to reach the broker from inside: the Python and Node
//! client libraries in clients/, and `sandbox ipc` from a shell script.

mod support;

use support::{assert_ok, identities, Project};

fn project_with_clients(who: support::Who) -> Project {
    let project = Project::new(who);
    let root = env!("CARGO_MANIFEST_DIR");
    // Copied in: a checkout may sit below a directory the test user cannot enter.
    project.write(
        "sandbox_ipc.py",
        &std::fs::read_to_string(format!("{root}/clients/python/sandbox_ipc.py")).unwrap(),
    );
    project.write(
        "client.js",
        &std::fs::read_to_string(format!("{root}/clients/node/index.js")).unwrap(),
    );
    project.write("notes.txt", "hello from the project\n");
    project
}

#[test]
fn the_python_client_reads_writes_and_reports_denials() {
    for who in identities("the_python_client_reads_writes_and_reports_denials") {
        let project = project_with_clients(who);
        let script = "import sandbox_ipc\n\
c = sandbox_ipc.connect()\n\
print(c.fs.read('notes.txt'), end='')\n\
c.fs.write('out.bin', b'\\x00\\xffbinary')\n\
print(c.fs.read('out.bin', binary=True) == b'\\x00\\xffbinary')\n\
try:\n    c.fs.delete('notes.txt')\n    print('deleted')\n\
except sandbox_ipc.SandboxError as e:\n    print('denied', e.code, e.rule)\n";
        let out = project.run_with(&["--grant", "fs.write"], &["python3", "-c", script]);
        assert_ok(&out, "python client");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "hello from the project\nTrue\ndenied -32002 broker.rules.\"fs.delete\"\n",
            "{who:?}"
        );
        assert!(project.path().join("notes.txt").exists());
    }
}

#[test]
fn the_node_client_works_through_process_send_and_exits_by_itself() {
    if !support::require(
        "node client",
        "/usr/bin/node",
        std::path::Path::new("/usr/bin/node").exists(),
    ) {
        return;
    }
    for who in identities("the_node_client_works_through_process_send_and_exits_by_itself") {
        let project = project_with_clients(who);
        let script = "const sandbox = require('./client.js');\n\
(async () => {\n\
  process.stdout.write(await sandbox.fs.read('notes.txt'));\n\
  await sandbox.fs.write('from-node.txt', 'written by node');\n\
  try { await sandbox.fs.delete('notes.txt'); } catch (e) { console.log('denied', e.code, e.rule); }\n\
  console.log((await sandbox.query('fs.read')).decision);\n\
})();\n";
        let out = project.run_with(
            &[
                "--grant",
                "fs.write",
                "--timeout",
                &support::wait::timeout_arg(std::time::Duration::from_secs(20)),
            ],
            &["node", "-e", script],
        );
        assert_ok(&out, "node client");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "hello from the project\ndenied -32002 broker.rules.\"fs.delete\"\nallow\n",
            "{who:?}"
        );
        assert_eq!(
            std::fs::read_to_string(project.path().join("from-node.txt")).unwrap(),
            "written by node"
        );
    }
}

#[test]
fn sandbox_ipc_serves_shell_scripts() {
    for who in identities("sandbox_ipc_serves_shell_scripts") {
        let project = project_with_clients(who);
        let out = project.sh_ok(
            "sandbox ipc fs.read '{\"path\": \"notes.txt\"}' --raw; \
             sandbox ipc fs.stat '{\"path\": \"notes.txt\"}'; \
             if sandbox ipc fs.write '{\"path\": \"x\", \"content\": \"y\"}' 2>err.txt; then echo WROTE; fi; \
             cat err.txt",
        );
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "hello from the project", "{who:?}: {out}");
        let stat: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(stat["size"], 23);
        assert!(!out.contains("WROTE"));
        assert!(
            lines[2].starts_with("sandbox ipc: fs.write needs approval"),
            "{out}"
        );
        assert!(lines[2].ends_with("(code -32002)"), "{out}");
    }
}

#[test]
fn sandbox_ipc_outside_a_sandbox_says_so() {
    let out = std::process::Command::new(support::sandbox_bin())
        .args(["ipc", "fs.read"])
        .env_remove("SANDBOX_IPC_FD")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("SANDBOX_IPC_FD is not set"));
}
