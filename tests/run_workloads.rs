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

/// `standard` passes the caller's git `user.name` and `user.email` (and no
/// other git setting) so commits made inside carry them; `strict` does not;
/// a git project without an identity to pass is said on stderr.
#[test]
fn commits_carry_the_callers_git_identity_where_the_profile_passes_it() {
    let test = "commits_carry_the_callers_git_identity_where_the_profile_passes_it";
    if !support::require(test, "git", support::commands_exist(&["git"]))
        || !support::require_root_sandbox(test)
    {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let with_config = |command: &mut std::process::Command, home: &std::path::Path| {
        command
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("GIT_CONFIG_NOSYSTEM", "1");
    };
    std::fs::write(
        home.path().join(".gitconfig"),
        "[user]\n\tname = Ann Example\n\temail = ann@example.org\n\
         [credential]\n\thelper = store\n\
         [url \"https://token@example.org/\"]\n\tinsteadOf = https://example.org/\n",
    )
    .unwrap();
    let project = Project::new(support::Who::Root);
    project.write("README", "hello\n");
    let mut init = std::process::Command::new("git");
    init.args(["init", "-q"]).current_dir(project.path());
    with_config(&mut init, home.path());
    assert!(init.status().unwrap().success());

    let run = |profile: &str, home: &std::path::Path| {
        let mut command = project.command();
        command
            .args(["run", "--profile", profile, "--", "/bin/sh", "-c"])
            .arg(
                "env | grep -c '^GIT_' ; git config --get credential.helper || echo no-helper; \
                 git add README && git commit -qm change && \
                 git log -1 --format='%an|%ae|%cn|%ce' || echo no-commit",
            )
            .stdin(std::process::Stdio::null());
        with_config(&mut command, home);
        let out = command.output().expect("sandbox starts");
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };

    let (stdout, stderr) = run("standard", home.path());
    assert_eq!(
        stdout, "4\nno-helper\nAnn Example|ann@example.org|Ann Example|ann@example.org\n",
        "{stderr}"
    );

    let (stdout, stderr) = run("strict", home.path());
    assert!(stdout.starts_with("0\nno-helper\n"), "{stdout}{stderr}");
    assert!(!stdout.contains("Ann Example"), "{stdout}{stderr}");
    assert!(!stderr.contains("git identity"), "{stderr}");

    let empty = tempfile::tempdir().unwrap();
    let (stdout, stderr) = run("standard", empty.path());
    assert!(stdout.starts_with("0\n"), "{stdout}{stderr}");
    assert_eq!(
        stderr
            .matches("sandbox: note: no git identity to pass")
            .count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("user.name"), "{stderr}");
}

/// A profile whose replaced `read_if_exists` drops strict's `/lib64` shows
/// `/usr/bin/python3` but not its dynamic loader: the refusal names the
/// loader and the `_add` form, not a `--tool` that would not help; the
/// `_add` form runs.
#[test]
fn a_program_whose_loader_the_profile_drops_is_explained_by_the_loader() {
    let test = "a_program_whose_loader_the_profile_drops_is_explained_by_the_loader";
    if !tool(test, "/usr/bin/python3") || !support::require_root_sandbox(test) {
        return;
    }
    let project = Project::new(support::Who::Root);
    let out = project.run_with_profile(
        "version = 1\nextends = \"strict\"\n[filesystem]\nread_if_exists = [\"/etc/resolv.conf\"]\n",
        &[],
        &["python3", "-c", "print('ran')"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(127), "{stderr}");
    assert!(
        stderr.contains("/usr/bin/python3 is in the sandbox's view but its dynamic loader")
            && stderr.contains("read_if_exists_add"),
        "{stderr}"
    );
    assert!(!stderr.contains("--tool"), "{stderr}");
    let out = project.run_with_profile(
        "version = 1\nextends = \"strict\"\n[filesystem]\nread_if_exists_add = [\"/etc/resolv.conf\"]\n",
        &[],
        &["python3", "-c", "print('ran')"],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "ran\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The way a new user adds one read path to strict, `read = [PATH]`,
/// replaces strict's `/usr`: the run used to stop while applying Landlock,
/// naming `/bin` (a link into the missing `/usr`), which no change to
/// `/bin` fixes. Now every interpreter's refusal names the list and the
/// `read_add` form, and that form runs both interpreters.
#[test]
fn adding_a_read_path_with_the_replacing_key_names_the_list_not_the_link() {
    let test = "adding_a_read_path_with_the_replacing_key_names_the_list_not_the_link";
    if !tool(test, "/usr/bin/python3")
        || !tool(test, "/usr/bin/node")
        || !support::require_root_sandbox(test)
    {
        return;
    }
    let extra = tempfile::tempdir().unwrap();
    std::fs::write(extra.path().join("data.txt"), "outside\n").unwrap();
    let project = Project::new(support::Who::Root);
    let dir = extra.path().display();
    let replacing =
        format!("version = 1\nextends = \"strict\"\n[filesystem]\nread = [\"{dir}\"]\n");
    let adding =
        format!("version = 1\nextends = \"strict\"\n[filesystem]\nread_add = [\"{dir}\"]\n");
    let programs: [&[&str]; 2] = [
        &["python3", "-c", "print(open('DATA').read(), end='')"],
        &[
            "node",
            "-e",
            "process.stdout.write(require('fs').readFileSync('DATA', 'utf8'))",
        ],
    ];
    let data = extra.path().join("data.txt").display().to_string();
    for program in programs {
        let argv: Vec<String> = program.iter().map(|a| a.replace("DATA", &data)).collect();
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let out = project.run_with_profile(&replacing, &[], &argv);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(127), "{argv:?}: {stderr}");
        assert!(!stderr.contains("Landlock"), "{argv:?}: {stderr}");
        assert!(
            stderr.contains("which strict shows and profile")
                && stderr.contains("`read_add = [...]` adds to it"),
            "{argv:?}: {stderr}"
        );
        assert!(!stderr.contains("--tool"), "{argv:?}: {stderr}");
        let out = project.run_with_profile(&adding, &[], &argv);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "outside\n",
            "{argv:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A profile path reached through a link on the host, as `~/.cache` often
/// is (`-> /data/cache`): init resolves what it mounts below the old root
/// with the new root as `/`, so an absolute link on the way led into the
/// sandbox's own tree and the run stopped with ENOENT. Now read and write
/// paths through such links are the link's targets, at the path named.
#[test]
fn profile_paths_through_host_links_are_what_the_links_reach() {
    let test = "profile_paths_through_host_links_are_what_the_links_reach";
    if !support::require_root_sandbox(test) {
        return;
    }
    let host = tempfile::tempdir().unwrap();
    let real = host.path().join("real");
    std::fs::create_dir_all(real.join("sub")).unwrap();
    std::fs::create_dir_all(real.join("out")).unwrap();
    std::fs::write(real.join("sub/data.txt"), "through the link\n").unwrap();
    let link = host.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let profile = format!(
        "version = 1\nextends = \"strict\"\n[filesystem]\nread_add = [\"{0}/sub\"]\n\
         write_add = [\"{0}/out\"]\n",
        link.display()
    );
    let project = Project::new(support::Who::Root);
    let script = format!(
        "cat {0}/sub/data.txt && echo written > {0}/out/result",
        link.display()
    );
    let out = project.run_with_profile(&profile, &[], &["/bin/sh", "-c", &script]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "through the link\n");
    assert_eq!(
        std::fs::read_to_string(real.join("out/result")).unwrap(),
        "written\n"
    );
}
