//! Strict must not break ordinary work: compilers, make, git, Python venvs,
//! Node, writing only to the project root and /tmp.

mod support;

use support::{identities, Project};

fn tool(test: &str, path: &str) -> bool {
    support::require(test, path, std::path::Path::new(path).exists())
}

#[test]
fn a_c_program_compiles_and_runs() {
    if !tool("a_c_program_compiles_and_runs", "/usr/bin/gcc") {
        return;
    }
    for who in identities("a_c_program_compiles_and_runs") {
        let project = Project::new(who);
        project.write(
            "hello.c",
            "#include <stdio.h>\nint main(void) { puts(\"hello from C\"); return 0; }\n",
        );
        let out = project.sh_ok("gcc -O2 -Wall -o hello hello.c && ./hello");
        assert_eq!(out, "hello from C\n", "{who:?}");
        assert!(project.path().join("hello").exists());
    }
}

#[test]
fn make_builds_a_target_chain() {
    if !tool("make_builds_a_target_chain", "/usr/bin/make") {
        return;
    }
    for who in identities("make_builds_a_target_chain") {
        let project = Project::new(who);
        project.write("Makefile", "all: out.txt\nout.txt: in.txt\n\ttr a-z A-Z < in.txt > out.txt\nin.txt:\n\techo made > in.txt\n");
        project.sh_ok("make -s");
        assert_eq!(
            std::fs::read_to_string(project.path().join("out.txt")).unwrap(),
            "MADE\n",
            "{who:?}"
        );
    }
}

#[test]
fn a_git_commit_succeeds() {
    if !tool("a_git_commit_succeeds", "/usr/bin/git") {
        return;
    }
    for who in identities("a_git_commit_succeeds") {
        let project = Project::new(who);
        project.write("README", "hello\n");
        let out = project.sh_ok(
            "git init -q && git add README && \
             git -c user.name=Sandbox -c user.email=s@example.invalid commit -qm 'first commit' && \
             git log --format=%s",
        );
        assert_eq!(out, "first commit\n", "{who:?}");
    }
}

#[test]
fn a_python_venv_is_created_and_used() {
    if !tool("a_python_venv_is_created_and_used", "/usr/bin/python3") {
        return;
    }
    for who in identities("a_python_venv_is_created_and_used") {
        let project = Project::new(who);
        let out = project.sh_ok(
            "python3 -m venv .venv && .venv/bin/python -c \
             'import sys, multiprocessing as mp; p = mp.Pool(2); print(sys.prefix.endswith(\".venv\"), p.map(abs, [-1, -2])); p.close()'",
        );
        assert_eq!(out, "True [1, 2]\n", "{who:?}");
    }
}

#[test]
fn a_node_script_runs_with_fs_and_child_processes() {
    if !tool(
        "a_node_script_runs_with_fs_and_child_processes",
        "/usr/bin/node",
    ) {
        return;
    }
    for who in identities("a_node_script_runs_with_fs_and_child_processes") {
        let project = Project::new(who);
        project.write(
            "main.js",
            "const fs = require('fs'); const cp = require('child_process');\n\
             fs.writeFileSync('out.txt', 'from node');\n\
             const r = cp.spawnSync('sh', ['-c', 'cat out.txt; echo; echo /tmp is $(mktemp -d)']);\n\
             process.stdout.write(r.stdout.toString());\n",
        );
        let out = project.sh_ok("node main.js");
        assert!(
            out.starts_with("from node\n/tmp is /tmp/"),
            "{who:?}: {out}"
        );
    }
}
