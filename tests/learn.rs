//! `sandbox learn` on real programs: each learns a profile that checks,
//! names the narrowest paths, widens no write, and runs the same command
//! under `sandbox run` without a refusal; and a command that tries to write
//! outside its view while learning does not get to.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Everything a case needs, outside the run's private /tmp (a host /tmp
/// path is not what the run sees there) and outside the project, below
/// directories anyone may pass through: learn never shows a run what only
/// root reaches on the host, and a checkout may sit in a private
/// directory (CI clones into a 0700 `mktemp -d`).
struct Case {
    _root: tempfile::TempDir,
    dir: PathBuf,
    project: PathBuf,
}

impl Case {
    fn new() -> Case {
        let root = tempfile::Builder::new()
            .prefix("learn-")
            .tempdir_in("/var/tmp")
            .unwrap();
        let dir = root.path().canonicalize().unwrap();
        // The sandbox of host root runs as an unprivileged host id, which
        // must be able to pass through to what it learns.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let project = dir.join("project");
        std::fs::create_dir(&project).unwrap();
        Case {
            _root: root,
            dir,
            project,
        }
    }

    fn write(&self, relative: &str, text: &str) -> PathBuf {
        let path = self.dir.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }

    fn sandbox(&self, args: &[&str]) -> Output {
        Command::new(support::sandbox_bin())
            .args(args)
            .current_dir(&self.project)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    }

    fn learned(&self) -> String {
        self.dir.join("learned.toml").display().to_string()
    }

    /// `sandbox learn --out LEARNED -- /bin/sh -c script`.
    fn learn_shell(&self, script: &str) -> Output {
        self.sandbox(&[
            "learn",
            "--out",
            &self.learned(),
            "--",
            "/bin/sh",
            "-c",
            script,
        ])
    }

    /// The learned profile passes `profile check`, with nothing to say.
    fn assert_loads(&self) {
        let check = self.sandbox(&["profile", "check", &self.learned()]);
        assert!(
            check.status.success() && check.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&check.stderr)
        );
    }

    /// Learn, then check: the profile checks, runs the command with no
    /// refusal, extends strict and writes nothing but reads; returns its text.
    fn learn_and_replay(&self, env: &[&str], command: &[&str]) -> String {
        self.learn_then_replay(0, env, command).0
    }

    /// [`Case::learn_and_replay`] where learning ends with `status` (the
    /// command's in the last pass); also returns learn's stdout.
    fn learn_then_replay(&self, status: i32, env: &[&str], command: &[&str]) -> (String, String) {
        let out_path = self.learned();
        let mut args = vec!["learn", "--out", &out_path];
        for e in env {
            args.extend(["-e", e]);
        }
        args.push("--");
        args.extend(command);
        let out = self.sandbox(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(status), "learn: {stderr}");
        assert!(
            stderr.contains("the learning runs were allowed nothing else beyond it"),
            "{stderr}"
        );
        let text = std::fs::read_to_string(&out_path).unwrap();
        assert!(text.contains("extends = \"strict\""), "{text}");
        for widening in [
            "write",
            "[network]",
            "mode",
            "allow",
            "[syscalls]",
            "enforce",
        ] {
            assert!(!settings(&text).contains(widening), "{widening} in {text}");
        }
        self.assert_loads();
        let mut args = vec!["run", "--profile", &out_path];
        for e in env {
            args.extend(["-e", e]);
        }
        args.push("--");
        args.extend(command);
        let run = self.sandbox(&args);
        assert_eq!(
            run.status.code(),
            Some(0),
            "replay: {}",
            String::from_utf8_lossy(&run.stderr)
        );
        (text, String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// A profile's settings: its text without its comments.
fn settings(text: &str) -> String {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The learned entries, without their comments.
fn entries(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with("    \""))
        .map(|l| {
            l.trim()
                .split("\",")
                .next()
                .unwrap()
                .trim_start_matches('"')
                .to_owned()
        })
        .collect()
}

fn available(test: &str, program: &str) -> bool {
    support::require(
        test,
        "a sandbox as the caller",
        support::sandbox_works(support::Who::Root),
    ) && support::require(
        test,
        "seccomp user notification",
        sandbox::probe::probe().seccomp_user_notif.is_available(),
    ) && support::require(test, program, Path::new(program).exists())
}

#[test]
fn a_python_projects_tests_learn_their_cache_and_config_outside_the_project() {
    let test = "a_python_projects_tests_learn_their_cache_and_config_outside_the_project";
    if !available(test, "/usr/bin/python3") {
        return;
    }
    let case = Case::new();
    let cache = case.write("cache/fixtures/data.json", "{\"answer\": 42}\n");
    case.write("cache/fixtures/unused.json", "{}\n");
    case.write("cache/other/large.bin", "unused\n");
    let config = case.write("config/app.ini", "[app]\nname = demo\n");
    std::fs::write(
        case.project.join("test_app.py"),
        format!(
            "import configparser, json, os, unittest\n\
             class T(unittest.TestCase):\n\
             \x20   def test_cache(self):\n\
             \x20       self.assertEqual(json.load(open({cache:?}))['answer'], 42)\n\
             \x20   def test_config(self):\n\
             \x20       c = configparser.ConfigParser(); c.read_file(open({config:?}))\n\
             \x20       self.assertEqual(c['app']['name'], 'demo')\n\
             unittest.main()\n",
            cache = cache.display().to_string(),
            config = config.display().to_string(),
        ),
    )
    .unwrap();
    let text = case.learn_and_replay(&[], &["python3", "test_app.py"]);
    let learned = entries(&text);
    // The two files, not their directories (and nothing else of the case).
    assert!(learned.contains(&cache.display().to_string()), "{text}");
    assert!(learned.contains(&config.display().to_string()), "{text}");
    assert!(
        !learned.iter().any(|e| Path::new(e).starts_with(&case.dir)
            && *e != cache.display().to_string()
            && *e != config.display().to_string()),
        "{text}"
    );
    assert!(text.contains("read by python3"), "{text}");

    // Learning again from the result learns nothing new and keeps both.
    let out_path = case.learned();
    let again = case.sandbox(&[
        "learn",
        "--profile",
        &out_path,
        "--out",
        &out_path,
        "--",
        "python3",
        "test_app.py",
    ]);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{stderr}");
    assert!(
        stderr.contains("pass 1: exit 0") && stderr.contains("0 new need(s)"),
        "{stderr}"
    );
    assert_eq!(
        entries(&std::fs::read_to_string(&out_path).unwrap()),
        learned
    );

    // explain rates the learned profile as a person would: two more files
    // to read leave it about as closed as strict, well before standard.
    let score = |profile: &str| -> f64 {
        let out = case.sandbox(&["explain", profile, "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        json["score"].as_f64().unwrap_or_else(|| panic!("{json}"))
    };
    let (strict, learned_score, standard) = (score("strict"), score(&out_path), score("standard"));
    assert!(
        strict <= learned_score && learned_score < standard && learned_score - strict < 0.5,
        "strict {strict}, learned {learned_score}, standard {standard}"
    );
}

#[test]
fn a_node_tool_learns_its_npmrc_in_a_home_outside_the_project() {
    let test = "a_node_tool_learns_its_npmrc_in_a_home_outside_the_project";
    if !available(test, "/usr/bin/node") {
        return;
    }
    let case = Case::new();
    let npmrc = case.write("home/.npmrc", "registry=http://127.0.0.1:9/\n");
    case.write("home/.ssh/id_ed25519", "not for the tool\n");
    std::fs::write(
        case.project.join("tool.js"),
        "const fs = require('fs'), os = require('os'), path = require('path');\n\
         const rc = fs.readFileSync(path.join(os.homedir(), '.npmrc'), 'utf8');\n\
         if (!rc.includes('registry=')) process.exit(3);\n\
         console.log('ok');\n",
    )
    .unwrap();
    let home = format!("HOME={}", case.dir.join("home").display());
    // The file's name is a secret's: it is learned, for a person to review,
    // but no learning run is shown it, so the tool fails in every pass.
    let (text, learning_stdout) = case.learn_then_replay(1, &[&home], &["node", "tool.js"]);
    assert!(!learning_stdout.contains("ok"), "{learning_stdout}");
    let learned = entries(&text);
    assert!(learned.contains(&npmrc.display().to_string()), "{text}");
    // The file, never the home it is in.
    assert!(
        !learned.contains(&case.dir.join("home").display().to_string()),
        "{text}"
    );
    assert!(!text.contains("id_ed25519"), "{text}");
    // Its name is a secret's: the profile says so where it learns it.
    assert!(
        text.contains(
            "REVIEW, not shown while learning: its name is in the profile's secrets list"
        ),
        "{text}"
    );
}

#[test]
fn a_build_learns_a_compiler_outside_usr() {
    let test = "a_build_learns_a_compiler_outside_usr";
    if !available(test, "/usr/bin/gcc") || !available(test, "/usr/bin/make") {
        return;
    }
    let case = Case::new();
    // A compiler installed under an /opt-like prefix: gcc's driver, which
    // finds its programs relative to itself, and a link to them.
    let driver = std::fs::canonicalize("/usr/bin/gcc").unwrap();
    let version_dir = std::fs::read_dir("/usr/lib/gcc/x86_64-linux-gnu")
        .ok()
        .and_then(|mut d| d.next())
        .and_then(|e| e.ok())
        .map(|e| e.path());
    let Some(version_dir) = version_dir else {
        support::require(test, "gcc's /usr/lib/gcc/x86_64-linux-gnu/VERSION", false);
        return;
    };
    let prefix = case.dir.join("opt/cc");
    std::fs::create_dir_all(prefix.join("bin")).unwrap();
    std::fs::create_dir_all(prefix.join("lib/gcc/x86_64-linux-gnu")).unwrap();
    let cc = prefix.join("bin/cc");
    std::fs::copy(&driver, &cc).unwrap();
    std::os::unix::fs::symlink(
        &version_dir,
        prefix
            .join("lib/gcc/x86_64-linux-gnu")
            .join(version_dir.file_name().unwrap()),
    )
    .unwrap();
    std::fs::write(
        case.project.join("hello.c"),
        "#include <stdio.h>\nint main(void) { puts(\"hello\"); return 0; }\n",
    )
    .unwrap();
    std::fs::write(
        case.project.join("Makefile"),
        format!("hello: hello.c\n\t{} -o hello hello.c\n", cc.display()),
    )
    .unwrap();
    let text = case.learn_and_replay(&[], &["make", "-s"]);
    let learned = entries(&text);
    assert!(learned.contains(&cc.display().to_string()), "{text}");
    assert!(
        !learned.contains(&prefix.join("bin").display().to_string()),
        "{text}"
    );
    assert!(text.contains("by make"), "{text}");
    assert!(case.project.join("hello").exists());
}

/// The attack: a command that writes outside its view while learning gets
/// nothing written, and learns no write.
#[test]
fn a_write_outside_the_view_while_learning_is_refused_and_not_learned() {
    let test = "a_write_outside_the_view_while_learning_is_refused_and_not_learned";
    if !available(test, "/bin/sh") {
        return;
    }
    let case = Case::new();
    let target = case.dir.join("outside/planted");
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    let existing = case.write("outside/existing", "original\n");
    let script = format!(
        "echo planted > {t}; echo changed > {e}; cat {e}; exit 0",
        t = target.display(),
        e = existing.display()
    );
    let out_path = case.learned();
    let out = case.learn_shell(&script);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        !target.exists(),
        "the learning run wrote {}",
        target.display()
    );
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "original\n");
    assert!(
        stderr.contains(&format!(
            "refused and not learned: write to {}",
            target.display()
        )),
        "{stderr}"
    );
    let text = std::fs::read_to_string(&out_path).unwrap();
    let code = settings(&text);
    assert!(!code.contains("write"), "{text}");
    // The existing file was read (`cat`), so it is learned read-only; the
    // planted one was only ever written, so it is not learned at all.
    assert!(
        !entries(&text).contains(&target.display().to_string()),
        "{text}"
    );
}

/// The learned profile is a file a parser reads: a command that names a
/// path with a newline in it, or calls itself by such a name, wrote a line
/// of its choosing into a comment of the profile, which ended the comment
/// and became a setting (`write = [...]` below `[filesystem]`). What the
/// command named is written escaped.
#[test]
fn a_name_the_command_chooses_cannot_write_a_setting_into_the_learned_profile() {
    let test = "a_name_the_command_chooses_cannot_write_a_setting_into_the_learned_profile";
    if !available(test, "/usr/bin/python3") {
        return;
    }
    let case = Case::new();
    let widened = case.dir.join("widened");
    std::fs::create_dir_all(&widened).unwrap();
    // A directory whose name ends a comment and opens a setting; the file
    // below it closes the setting and comments out what follows.
    let opened = format!("a\nwrite = [\"{}", widened.display());
    let hostile = case.dir.join("outside").join(&opened).join("\"] #");
    std::fs::create_dir_all(hostile.parent().unwrap()).unwrap();
    let program = format!(
        "import ctypes\n\
         ctypes.CDLL(None).prctl(15, b'x\\nwrite=[\"/v\"]#', 0, 0, 0)\n\
         for mode in ('w', 'r'):\n\
         \x20   try:\n\
         \x20       open({path:?}, mode)\n\
         \x20   except OSError:\n\
         \x20       pass\n",
        path = hostile.display().to_string()
    );
    let out_path = case.learned();
    let out = case.sandbox(&["learn", "--out", &out_path, "--", "python3", "-c", &program]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let text = std::fs::read_to_string(&out_path).unwrap();
    assert!(
        text.contains("\\u{000a}write"),
        "the refused write is not reported escaped: {text}"
    );
    let code = settings(&text);
    assert!(
        !code.contains("write"),
        "the command wrote a setting: {text}"
    );
    let checked = case.sandbox(&["explain", &out_path, "--json"]);
    assert!(
        !String::from_utf8_lossy(&checked.stdout).contains(&widened.display().to_string()),
        "the learned profile makes the command's directory writable"
    );
    assert!(!stderr.contains("\nwrite"), "{stderr}");
}

/// The attack on learning itself: each pass grants what the one before
/// asked for, so a command that names a secret, or (when root learns) a
/// file below a directory only root enters, would be handed it by the next
/// pass. Neither reaches the command while learning; both are written to
/// the profile for a person to review.
#[test]
fn a_secret_the_command_asks_for_while_learning_is_never_shown_to_it() {
    let test = "a_secret_the_command_asks_for_while_learning_is_never_shown_to_it";
    if !available(test, "/bin/sh") {
        return;
    }
    let case = Case::new();
    let key = case.write("home/.ssh/id_ed25519", "KEY-MATERIAL\n");
    let root = nix::unistd::geteuid().is_root();
    let private = case.write("private/notes.txt", "ROOT-ONLY-NOTES\n");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(
        private.parent().unwrap(),
        std::fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    let script = format!(
        "cat {} {} > leaked 2>/dev/null; cat leaked; exit 0",
        key.display(),
        private.display()
    );
    let out_path = case.learned();
    let out = case.learn_shell(&script);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stdout.contains("KEY-MATERIAL"), "{stdout}");
    let leaked = std::fs::read_to_string(case.project.join("leaked")).unwrap_or_default();
    assert!(!leaked.contains("KEY-MATERIAL"), "{leaked}");
    let text = std::fs::read_to_string(&out_path).unwrap();
    let key_line = text
        .lines()
        .find(|l| l.contains(&format!("{:?},", key.display().to_string())))
        .unwrap_or_default();
    assert!(
        key_line.contains("read by cat") && key_line.contains("REVIEW, not shown while learning"),
        "{text}"
    );
    if root {
        assert!(!stdout.contains("ROOT-ONLY-NOTES"), "{stdout}");
        assert!(!leaked.contains("ROOT-ONLY-NOTES"), "{leaked}");
        assert!(text.contains("on the host only root reaches it"), "{text}");
    }
}

/// Found by an attacker: the secrets list is written for projects, and a
/// home's credential stores (the GitHub CLI's token, a registry login)
/// are not on it, so a command that named them in the first pass was
/// shown them in the second and copied them into the project.
#[test]
fn a_credential_store_the_command_asks_for_while_learning_is_never_shown_to_it() {
    let test = "a_credential_store_the_command_asks_for_while_learning_is_never_shown_to_it";
    if !available(test, "/bin/sh") {
        return;
    }
    let case = Case::new();
    let stores = [
        case.write("home/.config/gh/hosts.yml", "oauth_token: GH-TOKEN\n"),
        case.write("home/.docker/config.json", "{\"auths\": \"DOCKER-AUTH\"}\n"),
        case.write("home/.kube/config", "token: KUBE-TOKEN\n"),
    ];
    let names: Vec<String> = stores.iter().map(|p| p.display().to_string()).collect();
    let script = format!(
        "cat {} > leaked 2>/dev/null; cat leaked; exit 0",
        names.join(" ")
    );
    let out_path = case.learned();
    let out = case.learn_shell(&script);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let leaked = std::fs::read_to_string(case.project.join("leaked")).unwrap_or_default();
    let text = std::fs::read_to_string(&out_path).unwrap();
    for (secret, name) in ["GH-TOKEN", "DOCKER-AUTH", "KUBE-TOKEN"].iter().zip(&names) {
        assert!(!stdout.contains(secret), "{stdout}");
        assert!(!leaked.contains(secret), "{leaked}");
        let line = text
            .lines()
            .find(|l| l.contains(&format!("{name:?},")))
            .unwrap_or_default();
        assert!(
            line.contains("REVIEW, not shown while learning: a well-known store of credentials"),
            "{text}"
        );
    }
}

/// Found by an attacker: each pass is given the destinations the proxy
/// refused the one before, so a command that asked for `0.0.0.0:PORT`
/// (the host's loopback) in its first pass reached the host's own service
/// there in the second. An address that is not public is never given nor
/// learned; it is reported for a person to add by hand.
#[test]
fn a_learning_run_never_reaches_the_hosts_own_services_by_asking() {
    let test = "a_learning_run_never_reaches_the_hosts_own_services_by_asking";
    if !available(test, "/usr/bin/python3") {
        return;
    }
    let case = Case::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let reached = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = reached.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            use std::io::Write;
            let mut stream = stream;
            let _ = stream.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let base = case.write(
        "base.toml",
        "version = 1\nextends = \"strict\"\n[network]\nmode = \"allowlist\"\nallow = [\"127.0.0.1:1\"]\n",
    );
    std::fs::write(
        case.project.join("probe.py"),
        format!(
            "import urllib.request\n\
             for host in ('0.0.0.0', '[::]', '127.0.0.1'):\n\
             \x20   try:\n\
             \x20       urllib.request.urlopen('http://%s:{port}/' % host, timeout=10)\n\
             \x20   except Exception:\n\
             \x20       pass\n"
        ),
    )
    .unwrap();
    let out_path = case.learned();
    let base = base.display().to_string();
    let out = case.sandbox(&[
        "learn",
        "--profile",
        &base,
        "--out",
        &out_path,
        "--",
        "python3",
        "probe.py",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        !reached.load(std::sync::atomic::Ordering::SeqCst),
        "a learning pass reached the host's loopback service: {stderr}"
    );
    let text = std::fs::read_to_string(&out_path).unwrap();
    let code = settings(&text);
    assert!(!code.contains(&port.to_string()), "{text}");
    assert!(
        text.contains(&format!("#   0.0.0.0:{port}  (")),
        "the refusal is not reported: {text}"
    );
}

/// The Node tool's fetch from its one host, through the allowlist's proxy
/// of a base that lists nothing but the test server's loopback address
/// (the address check's entry) and pins the name to it: the host:port is
/// learned, nothing wider, and the replay reaches the server.
#[test]
fn a_node_tool_learns_the_one_host_it_fetches_from() {
    let test = "a_node_tool_learns_the_one_host_it_fetches_from";
    if !available(test, "/usr/bin/node") {
        return;
    }
    let case = Case::new();
    let server = support::net::TestServer::start("registry");
    let port = server.port();
    let base = case.write(
        "base.toml",
        &format!(
            "version = 1\nextends = \"strict\"\n[network]\nmode = \"allowlist\"\n\
             allow = [\"127.0.0.1:{port}\"]\nresolve = {{ \"registry.test\" = \"127.0.0.1\" }}\n"
        ),
    );
    std::fs::write(
        case.project.join("fetch.js"),
        format!(
            "const http = require('http');\n\
             const proxy = new URL(process.env.HTTP_PROXY);\n\
             http.get({{host: proxy.hostname, port: proxy.port, path: 'http://registry.test:{port}/pkg',\n\
             \x20 headers: {{Host: 'registry.test:{port}'}}}}, res => {{\n\
             \x20 res.resume(); res.on('end', () => process.exit(res.statusCode === 200 ? 0 : 1));\n\
             }}).on('error', e => {{ console.error(e.message); process.exit(2); }});\n"
        ),
    )
    .unwrap();
    let out_path = case.learned();
    let base = base.display().to_string();
    let out = case.sandbox(&[
        "learn",
        "--profile",
        &base,
        "--out",
        &out_path,
        "--",
        "node",
        "fetch.js",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let text = std::fs::read_to_string(&out_path).unwrap();
    let wanted = format!("\"registry.test:{port}\",  # refused by the allowlist's proxy once");
    assert!(text.contains(&wanted), "{text}");
    let code = settings(&text);
    // Only the one destination: no mode, no wider entry, no write.
    assert_eq!(code.matches("registry.test").count(), 1, "{text}");
    for widening in ["mode", "write", "\"*", "resolve"] {
        assert!(!code.contains(widening), "{widening} in {text}");
    }
    case.assert_loads();
    let before = server.connection_count();
    let run = case.sandbox(&["run", "--profile", &out_path, "--", "node", "fetch.js"]);
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(server.connection_count() > before);
}

/// A broker action refused while learning is reported in the output and
/// the profile's comments, and never becomes a rule that allows it.
#[test]
fn a_broker_action_refused_while_learning_is_reported_not_learned() {
    let test = "a_broker_action_refused_while_learning_is_reported_not_learned";
    if !available(test, "/bin/sh") {
        return;
    }
    let case = Case::new();
    let out_path = case.learned();
    let script = "sandbox ipc secrets.get '{\"name\":\"DEPLOY_TOKEN\"}'; exit 0";
    let out = case.learn_shell(script);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("refused by the broker and not learned: secrets.get DEPLOY_TOKEN"),
        "{stderr}"
    );
    let text = std::fs::read_to_string(&out_path).unwrap();
    assert!(
        text.contains("#   secrets.get DEPLOY_TOKEN  (1 time(s))"),
        "{text}"
    );
    let code = settings(&text);
    assert!(
        !code.contains("broker") && !code.contains("secrets.get"),
        "{text}"
    );
}

/// The broker action a command is refused is its own choice, method and
/// target: a target with newlines in it ended the profile's comment and
/// wrote `[enforce]` with Landlock and seccomp off into the learned profile.
#[test]
fn a_broker_action_the_command_names_cannot_write_a_setting_into_the_learned_profile() {
    let test = "a_broker_action_the_command_names_cannot_write_a_setting_into_the_learned_profile";
    if !available(test, "/bin/sh") {
        return;
    }
    let case = Case::new();
    let out_path = case.learned();
    let script = r#"sandbox ipc fs.write '{"path":"/a\n[enforce]\nlandlock = \"off\"\nseccomp = \"off\" #","content":"x"}'; exit 0"#;
    let out = case.learn_shell(script);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let text = std::fs::read_to_string(&out_path).unwrap();
    assert!(text.contains("\\u{000a}[enforce]"), "{text}");
    let code = settings(&text);
    assert!(
        !code.contains("enforce") && !code.contains("off"),
        "the command wrote a setting: {text}"
    );
    case.assert_loads();
}

/// A path is the command's choice down to its characters: one with DEL in
/// it (which JSON's escaping leaves raw and TOML refuses) made the learned
/// profile unloadable, so a command could make `sandbox learn` fail.
#[test]
fn a_path_with_any_character_the_command_names_is_learned_as_a_loadable_profile() {
    let test = "a_path_with_any_character_the_command_names_is_learned_as_a_loadable_profile";
    if !available(test, "/bin/sh") {
        return;
    }
    let case = Case::new();
    let named = case.write("outside/del\u{7f}\u{85}x/f", "x");
    let script = format!("cat '{}' >/dev/null 2>&1; exit 0", named.display());
    let out_path = case.learned();
    let out = case.learn_shell(&script);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let text = std::fs::read_to_string(&out_path).unwrap();
    assert!(text.contains("del\\u007F\\u0085x"), "{text}");
    case.assert_loads();
}

/// A system call strict refuses (`get_mempolicy`: outside its allowlist,
/// so ENOSYS) is learned as the narrowest `[syscalls]` entry, and the
/// learned profile runs the command without the refusal. While learning
/// the call still fails with strict's own errno: the supervisor answers
/// the learning run's notified calls as the profile's filter would, never
/// wider. The same program's attempts at what no profile lifts (ptrace,
/// on the built-in deny list; a set-user-id file, refused by a rule on
/// `openat`'s mode, a call the learning run also observes for its path)
/// fail as under strict and are reported, not learned.
#[test]
fn a_system_call_strict_refuses_is_learned_and_refused_while_learning() {
    let test = "a_system_call_strict_refuses_is_learned_and_refused_while_learning";
    if !available(test, "/usr/bin/python3") {
        return;
    }
    let case = Case::new();
    let script = case.write(
        "calls.py",
        "import ctypes, os, sys\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         def call(nr, *args):\n\
         \x20   ctypes.set_errno(0)\n\
         \x20   r = libc.syscall(nr, *args)\n\
         \x20   return 0 if r == 0 else ctypes.get_errno()\n\
         mempolicy = call(239, None, None, 0, None, 0)\n\
         ptrace = call(101, 0, 0, 0, 0)\n\
         try:\n\
         \x20   os.close(os.open('suid', os.O_CREAT | os.O_WRONLY, 0o4755))\n\
         \x20   suid = 0\n\
         except OSError as e:\n\
         \x20   suid = e.errno\n\
         with open(sys.argv[1], 'w') as f:\n\
         \x20   f.write(f'{mempolicy} {ptrace} {suid}')\n\
         sys.exit(0 if mempolicy == 0 else 3)\n",
    );
    let script = script.display().to_string();
    let result = case.project.join("result");
    let result_arg = result.display().to_string();
    let out_path = case.learned();
    let command = ["/usr/bin/python3", script.as_str(), result_arg.as_str()];
    let mut args = vec!["learn", "--out", &out_path, "--"];
    args.extend(command);
    let out = case.sandbox(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "learn: {stderr}");
    let errnos = |text: &str| -> Vec<i32> { text.split(' ').map(|n| n.parse().unwrap()).collect() };
    // While learning: ENOSYS, EPERM, EPERM, exactly strict's answers.
    assert_eq!(
        errnos(&std::fs::read_to_string(&result).unwrap()),
        [libc::ENOSYS, libc::EPERM, libc::EPERM],
        "{stderr}"
    );
    assert!(
        !case.project.join("suid").exists(),
        "the learning run created a set-id file"
    );
    assert!(
        stderr.contains("no system call its filter refuses (each was answered with its errno)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("refused and not learned: system call ptrace"),
        "{stderr}"
    );
    assert!(
        stderr.contains("refused and not learned: system call openat"),
        "{stderr}"
    );
    let text = std::fs::read_to_string(&out_path).unwrap();
    let code: Vec<&str> = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim_end())
        .filter(|l| !l.is_empty())
        .collect();
    let syscalls = code.iter().position(|l| *l == "[syscalls]").expect(&text);
    // Exactly one addition, in its narrowest form, with why and how often.
    assert_eq!(
        code[syscalls..],
        ["[syscalls]", "allow_add = [", "    \"get_mempolicy\",", "]"],
        "{text}"
    );
    assert!(
        text.contains("\"get_mempolicy\",  # refused while learning: made by python3 once; `strict` answered ENOSYS"),
        "{text}"
    );
    for unlifted in ["ptrace", "openat"] {
        assert!(!code.iter().any(|l| l.contains(unlifted)), "{text}");
    }

    case.assert_loads();
    std::fs::remove_file(&result).unwrap();
    let mut args = vec!["run", "--profile", &out_path, "--"];
    args.extend(command);
    let run = case.sandbox(&args);
    assert_eq!(
        run.status.code(),
        Some(0),
        "replay: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    // The learned call now works; what no profile lifts still does not.
    assert_eq!(
        errnos(&std::fs::read_to_string(&result).unwrap()),
        [0, libc::EPERM, libc::EPERM]
    );
}

/// Found by an attacker: only a credential store itself (or a path in it)
/// was withheld; a directory holding one (`~/.config`, the home) was
/// learned from a first pass that listed it, and the next pass, shown the
/// whole directory, read the store inside it.
#[test]
fn a_directory_holding_a_credential_store_is_never_shown_while_learning() {
    let test = "a_directory_holding_a_credential_store_is_never_shown_while_learning";
    if !available(test, "/bin/sh") {
        return;
    }
    let case = Case::new();
    let store = case.write("home/.config/gh/hosts.yml", "oauth_token: GH-TOKEN\n");
    let config = store.parent().unwrap().parent().unwrap().to_path_buf();
    let script = format!(
        "/usr/bin/python3 -c 'import os,sys\ntry: os.listdir(sys.argv[1])\nexcept OSError: pass' {}; cat {} > leaked 2>/dev/null; cat leaked; exit 0",
        config.display(),
        store.display()
    );
    let out_path = case.learned();
    let out = case.learn_shell(&script);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let leaked = std::fs::read_to_string(case.project.join("leaked")).unwrap_or_default();
    let text = std::fs::read_to_string(&out_path).unwrap();
    assert!(!stdout.contains("GH-TOKEN"), "{stdout}\n{text}");
    assert!(!leaked.contains("GH-TOKEN"), "{leaked}\n{text}");
    let line = text
        .lines()
        .find(|l| l.contains(&format!("{:?},", config.display().to_string())))
        .unwrap_or_default();
    assert!(
        line.contains("REVIEW, not shown while learning: a directory holding a well-known store of credentials"),
        "{text}"
    );
}
