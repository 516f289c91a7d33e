//! The walk's tests: what it finds, whoever walks it, and that a walk kept
//! by a watcher and walked again where it changed finds what a new walk
//! finds.

mod found_tests {
    use super::super::walker::ENTRIES_BEFORE_HELPERS;
    use super::super::*;
    use crate::project::PatternList;

    fn rules() -> Rules {
        Rules {
            secrets: PatternList::parse(&[".env", ".env.*", "!.env.example", ".ssh/", "*.pem"])
                .unwrap(),
            protect: PatternList::parse(&[".git/**/hooks", ".git/**/config", ".envrc", ".vscode/"])
                .unwrap(),
        }
    }

    fn paths(found: &[Found]) -> Vec<String> {
        found.iter().map(|f| f.path.display().to_string()).collect()
    }

    #[test]
    fn a_walk_big_enough_for_helpers_finds_what_one_walker_finds() {
        let project = tempfile::tempdir().unwrap();
        let p = project.path();
        let dirs = 40;
        let per_dir = (ENTRIES_BEFORE_HELPERS as usize / dirs) * 2;
        for d in 0..dirs {
            let dir = p.join(format!("d{d}"));
            std::fs::create_dir(&dir).unwrap();
            for f in 0..per_dir {
                std::fs::write(dir.join(format!("f{f}")), b"").unwrap();
            }
        }
        std::fs::write(p.join("d39/.env"), b"SECRET=1").unwrap();
        std::fs::write(p.join("d0/.env"), b"SECRET=1").unwrap();
        let scan = scan(p, &rules(), true, HardlinkPolicy::ReadOnly).unwrap();
        assert!(scan.entries > ENTRIES_BEFORE_HELPERS, "{}", scan.entries);
        assert_eq!(scan.entries, (dirs * (per_dir + 1) + 2) as u64);
        let mut secrets = paths(&scan.secrets);
        secrets.sort();
        assert_eq!(secrets, ["d0/.env", "d39/.env"]);
    }

    #[test]
    fn finds_secrets_protected_entries_pins_and_outside_links() {
        let outside = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let p = project.path();
        for dir in [
            ".git/hooks",
            ".git/modules/lib/hooks",
            "a/b/.ssh",
            "sub/.git",
            "c",
            ".vscode",
        ] {
            std::fs::create_dir_all(p.join(dir)).unwrap();
        }
        for file in [
            ".env",
            "a/.env.prod",
            "a/.env.example",
            "a/b/.ssh/id",
            "k.pem",
            ".git/config",
            "sub/.git/config",
            "c/plain",
            ".envrc",
        ] {
            std::fs::write(p.join(file), "x").unwrap();
        }
        std::fs::write(outside.path().join("victim"), "v").unwrap();
        std::fs::hard_link(outside.path().join("victim"), p.join("c/linked")).unwrap();
        // Two names inside the project only: fine.
        std::fs::hard_link(p.join("c/plain"), p.join("c/plain2")).unwrap();
        // A second name of a secret is a secret.
        std::fs::hard_link(p.join(".env"), p.join("c/innocent")).unwrap();
        std::os::unix::fs::symlink("/etc", p.join("c/.vscode")).unwrap();

        let scan = scan(p, &rules(), true, HardlinkPolicy::ReadOnly).unwrap();
        assert_eq!(
            paths(&scan.secrets),
            [".env", "a/.env.prod", "a/b/.ssh", "c/innocent", "k.pem"]
        );
        assert_eq!(
            paths(&scan.protected),
            [
                ".envrc",
                ".git/config",
                ".git/hooks",
                ".git/modules/lib/hooks",
                ".vscode",
                "sub/.git/config"
            ]
        );
        let pins: Vec<String> = scan.pins.iter().map(|p| p.display().to_string()).collect();
        assert_eq!(
            pins,
            [
                ".git",
                ".git/modules",
                ".git/modules/lib",
                "sub",
                "sub/.git"
            ]
        );
        assert_eq!(scan.outside_links, [PathBuf::from("c/linked")]);
        // A symlink may lead to a directory, so `.vscode/` catches it; this
        // one leads out of the project, where nothing needs covering.
        assert_eq!(scan.protected_links, [PathBuf::from("c/.vscode")]);

        let err = super::super::scan(p, &rules(), true, HardlinkPolicy::Refuse).unwrap_err();
        assert!(err.to_string().contains("c/linked"), "{err}");
        let allowed = super::super::scan(p, &rules(), true, HardlinkPolicy::Allow).unwrap();
        assert!(allowed.outside_links.is_empty());
        let read_only = super::super::scan(p, &rules(), false, HardlinkPolicy::ReadOnly).unwrap();
        assert!(read_only.protected.is_empty() && read_only.outside_links.is_empty());
        assert_eq!(read_only.secrets.len(), 5);
    }
}

mod link_tests {
    use super::super::*;
    use crate::project::PatternList;

    #[test]
    fn what_secret_and_protected_symlinks_point_at_is_covered() {
        let project = tempfile::tempdir().unwrap();
        let p = std::fs::canonicalize(project.path()).unwrap();
        std::fs::create_dir_all(p.join("config/keys")).unwrap();
        std::fs::create_dir_all(p.join("editor")).unwrap();
        std::fs::write(p.join("config/prod.env"), "SECRET").unwrap();
        std::fs::write(p.join("config/keys/.env"), "SECRET").unwrap();
        std::os::unix::fs::symlink("config/prod.env", p.join(".env")).unwrap();
        std::os::unix::fs::symlink("config", p.join("sub.env")).unwrap();
        std::os::unix::fs::symlink("editor", p.join(".vscode")).unwrap();
        std::os::unix::fs::symlink("/etc", p.join(".idea")).unwrap();
        let rules = Rules {
            secrets: PatternList::parse(&[".env", "*.env"]).unwrap(),
            protect: PatternList::parse(&[".vscode", ".idea"]).unwrap(),
        };
        let scan = scan(&p, &rules, true, HardlinkPolicy::ReadOnly).unwrap();
        let secrets: Vec<String> = scan
            .secrets
            .iter()
            .map(|f| f.path.display().to_string())
            .collect();
        // config/prod.env and config/keys/.env are below the hidden config.
        assert_eq!(secrets, ["config"]);
        let protected: Vec<String> = scan
            .protected
            .iter()
            .map(|f| f.path.display().to_string())
            .collect();
        assert_eq!(
            protected,
            ["editor"],
            "the link out of the project is not in the view"
        );
    }
}

mod walker_tests {
    use super::super::*;
    use crate::project::PatternList;

    /// Many directories: some go through the queue to the other walker,
    /// some are walked in place once it is full; nothing is missed twice or
    /// counted twice, and a hard link split across walkers is still whole.
    #[test]
    fn every_entry_is_walked_once_whoever_walks_it() {
        let project = tempfile::tempdir().unwrap();
        let p = std::fs::canonicalize(project.path()).unwrap();
        for d in 0..300 {
            let dir = p.join(format!("d{d}/e{}", d % 7));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("f"), "x").unwrap();
            if d % 50 == 0 {
                std::fs::write(dir.join(".env"), "S").unwrap();
            }
        }
        // Two names inside the project, in directories far apart.
        std::fs::hard_link(p.join("d1/e1/f"), p.join("d299/e5/g")).unwrap();
        let rules = Rules {
            secrets: PatternList::parse(&[".env"]).unwrap(),
            protect: PatternList::default(),
        };
        let scan = scan(&p, &rules, true, HardlinkPolicy::ReadOnly).unwrap();
        // 300 d*, 300 e*, 300 f, 6 .env, 1 g.
        assert_eq!(scan.entries, 907);
        assert_eq!(scan.secrets.len(), 6);
        assert!(scan.outside_links.is_empty(), "{:?}", scan.outside_links);
    }
}

mod freshness_tests {
    use super::super::*;
    use crate::project::PatternList;

    fn rules() -> Rules {
        Rules {
            secrets: PatternList::parse(&[".env", "*.pem"]).unwrap(),
            protect: PatternList::parse(&[".envrc"]).unwrap(),
        }
    }

    fn deep_project() -> tempfile::TempDir {
        let project = tempfile::tempdir().unwrap();
        let deep = project.path().join("node_modules/a/node_modules/b/lib/x");
        std::fs::create_dir_all(&deep).unwrap();
        for n in 0..50 {
            std::fs::write(deep.join(format!("f{n}.js")), "x").unwrap();
        }
        project
    }

    /// Every scan answers for the tree as it is: a secret made deep in the
    /// tree after one scan is hidden by the next, whatever the first saw.
    #[test]
    fn a_secret_made_between_two_scans_is_found_by_the_second() {
        let project = deep_project();
        let p = project.path();
        let first = scan(p, &rules(), true, HardlinkPolicy::ReadOnly).unwrap();
        assert!(first.secrets.is_empty(), "{:?}", first.secrets);
        let deep = "node_modules/a/node_modules/b/lib/x";
        std::fs::write(p.join(deep).join(".env"), "TOKEN=1").unwrap();
        std::fs::write(p.join("node_modules/a/key.pem"), "KEY").unwrap();
        let second = scan(p, &rules(), true, HardlinkPolicy::ReadOnly).unwrap();
        let mut secrets: Vec<String> = second
            .secrets
            .iter()
            .map(|f| f.path.display().to_string())
            .collect();
        secrets.sort();
        assert_eq!(secrets, ["node_modules/a/key.pem", &format!("{deep}/.env")]);
    }

    /// Hard links made after a scan, both ways: a name in a deep directory
    /// for a file outside (the directory changes), and a name outside for a
    /// file already deep inside (no directory of the project changes, only
    /// the file's link count). The next scan covers both.
    #[test]
    fn hard_links_made_between_two_scans_are_covered_by_the_second() {
        let outside = tempfile::tempdir().unwrap();
        let project = deep_project();
        let p = project.path();
        let deep = p.join("node_modules/a/node_modules/b/lib/x");
        let first = scan(p, &rules(), true, HardlinkPolicy::ReadOnly).unwrap();
        assert!(first.outside_links.is_empty(), "{:?}", first.outside_links);

        std::fs::write(outside.path().join("victim"), "v").unwrap();
        std::fs::hard_link(outside.path().join("victim"), deep.join("in.js")).unwrap();
        std::fs::hard_link(deep.join("f7.js"), outside.path().join("clone-of-f7")).unwrap();
        let second = scan(p, &rules(), true, HardlinkPolicy::ReadOnly).unwrap();
        let rel = Path::new("node_modules/a/node_modules/b/lib/x");
        assert_eq!(second.outside_links, [rel.join("f7.js"), rel.join("in.js")]);

        // A secret's other name made after a scan is hidden too.
        std::fs::write(deep.join(".env"), "TOKEN=1").unwrap();
        let third = scan(p, &rules(), true, HardlinkPolicy::ReadOnly).unwrap();
        std::fs::hard_link(deep.join(".env"), p.join("node_modules/a/innocent")).unwrap();
        let fourth = scan(p, &rules(), true, HardlinkPolicy::ReadOnly).unwrap();
        assert_eq!(third.secrets.len(), 1, "{:?}", third.secrets);
        assert!(
            fourth
                .secrets
                .iter()
                .any(|f| f.path == Path::new("node_modules/a/innocent")),
            "{:?}",
            fourth.secrets
        );
    }
}

mod rewalk_tests {
    use super::super::*;
    use crate::project::watch::TreeWatch;
    use crate::project::PatternList;

    fn rules() -> Rules {
        Rules {
            secrets: PatternList::parse(&[".env", "*.pem", ".ssh/"]).unwrap(),
            protect: PatternList::parse(&[".git/**/hooks", ".envrc"]).unwrap(),
        }
    }

    /// The fields a run's view is built from, in one order.
    fn view(scan: &Scan) -> String {
        let mut before: Vec<_> = scan.protected_before.iter().collect();
        before.sort_by(|a, b| a.0.cmp(b.0));
        let mut links = scan.protected_links.clone();
        links.sort();
        format!(
            "entries {}\nsecrets {:?}\nprotected {:?}\nlinks {links:?}\npins {:?}\noutside {:?}\nbefore {before:?}",
            scan.entries, scan.secrets, scan.protected, scan.pins, scan.outside_links
        )
    }

    /// A walk kept by a watcher and walked again only where its watches
    /// reported a change finds, after every kind of change, what a new walk
    /// of the whole tree finds.
    #[test]
    fn walking_again_where_the_watches_saw_changes_finds_what_a_whole_walk_finds() {
        let outside = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let p = std::fs::canonicalize(project.path()).unwrap();
        let o = outside.path();
        for d in ["a/b/c", "a/d", "e", ".git/hooks"] {
            std::fs::create_dir_all(p.join(d)).unwrap();
        }
        for f in [
            "a/b/c/one",
            "a/b/c/two",
            "a/d/three",
            "e/four",
            ".git/hooks/pre-commit",
        ] {
            std::fs::write(p.join(f), "x").unwrap();
        }
        std::fs::write(o.join("victim"), "v").unwrap();
        let rules = rules();
        let mut watch = TreeWatch::new(&p, 10_000).unwrap();
        let mut walked = Walked::walk(&p, &rules, true).unwrap();
        type Change<'a> = (&'a str, Box<dyn Fn() + 'a>);
        let changes: Vec<Change> = vec![
            (
                "a secret made deep",
                Box::new(|| std::fs::write(p.join("a/b/c/.env"), "S").unwrap()),
            ),
            (
                "a name outside for a file inside: only its link count changes",
                Box::new(|| std::fs::hard_link(p.join("a/d/three"), o.join("three")).unwrap()),
            ),
            (
                "a name inside for a file outside",
                Box::new(|| std::fs::hard_link(o.join("victim"), p.join("e/victim")).unwrap()),
            ),
            (
                "a directory holding a secret removed",
                Box::new(|| std::fs::remove_dir_all(p.join("a/b")).unwrap()),
            ),
            (
                "a directory made again under the same name, with a secret",
                Box::new(|| {
                    std::fs::create_dir_all(p.join("a/b/c")).unwrap();
                    std::fs::write(p.join("a/b/c/key.pem"), "K").unwrap();
                }),
            ),
            (
                "a directory removed and made again at once (ext4 gives the inodes again)",
                Box::new(|| {
                    std::fs::remove_dir_all(p.join("a/b")).unwrap();
                    std::fs::create_dir_all(p.join("a/b/c")).unwrap();
                    std::fs::write(p.join("a/b/c/.env"), "S").unwrap();
                    std::fs::write(p.join("a/b/c/key.pem"), "K").unwrap();
                }),
            ),
            (
                "a file moved to another directory, then linked from outside",
                Box::new(|| {
                    std::fs::rename(p.join("e/four"), p.join("a/d/four")).unwrap();
                    std::fs::hard_link(p.join("a/d/four"), o.join("four")).unwrap();
                }),
            ),
            (
                "a second name inside the project, then a third outside",
                Box::new(|| {
                    std::fs::hard_link(p.join("a/b/c/key.pem"), p.join("e/innocent")).unwrap();
                    std::fs::hard_link(p.join("a/d/three"), p.join("e/three")).unwrap();
                    std::fs::hard_link(p.join("e/three"), o.join("three-again")).unwrap();
                }),
            ),
            (
                "a protected name made, and a secret directory",
                Box::new(|| {
                    std::fs::write(p.join("a/.envrc"), "x").unwrap();
                    std::fs::create_dir_all(p.join("e/.ssh")).unwrap();
                    std::fs::write(p.join("e/.ssh/id"), "K").unwrap();
                }),
            ),
            (
                "a secret's name as a symlink into the project",
                Box::new(|| std::os::unix::fs::symlink("a/d/three", p.join(".env")).unwrap()),
            ),
            (
                "a big new tree",
                Box::new(|| {
                    for n in 0..60 {
                        let dir = p.join(format!("node_modules/m{n}/lib"));
                        std::fs::create_dir_all(&dir).unwrap();
                        for f in 0..40 {
                            std::fs::write(dir.join(format!("f{f}.js")), "x").unwrap();
                        }
                    }
                    std::fs::write(p.join("node_modules/m7/lib/.env"), "S").unwrap();
                }),
            ),
            (
                "a file replaced by a directory of the same name",
                Box::new(|| {
                    std::fs::remove_file(p.join("a/d/three")).unwrap();
                    std::fs::create_dir(p.join("a/d/three")).unwrap();
                    std::fs::write(p.join("a/d/three/.env"), "S").unwrap();
                }),
            ),
            (
                "the outside names removed: link counts drop",
                Box::new(|| {
                    for name in ["three", "three-again", "four"] {
                        std::fs::remove_file(o.join(name)).unwrap();
                    }
                }),
            ),
        ];
        for (what, change) in changes {
            change();
            let drained = watch.drain().unwrap();
            assert!(drained.events > 0, "{what}: no event");
            assert!(!drained.rebuilt, "{what}: the watches were set again");
            walked.rewalk(&p, &rules, true, &drained.changes).unwrap();
            let kept = walked
                .scan(&p, true, HardlinkPolicy::ReadOnly, Listing::Kept)
                .unwrap();
            let whole = scan(&p, &rules, true, HardlinkPolicy::ReadOnly).unwrap();
            assert_eq!(view(&kept), view(&whole), "after: {what}");
        }
        assert!(walked.dirs.len() > 60, "{}", walked.dirs.len());
    }

    /// When the tree is not what the changes say (a directory kept was
    /// replaced without a name created: the watches lost it), walking
    /// again fails rather than answer for the old tree.
    #[test]
    fn a_kept_directory_that_is_another_object_now_fails_the_walk_again() {
        let project = tempfile::tempdir().unwrap();
        let p = std::fs::canonicalize(project.path()).unwrap();
        std::fs::create_dir_all(p.join("a/b")).unwrap();
        let rules = rules();
        let mut walked = Walked::walk(&p, &rules, true).unwrap();
        std::fs::rename(p.join("a/b"), p.join("a/old")).unwrap();
        std::fs::create_dir(p.join("a/b")).unwrap();
        let changes = Changes {
            dirs: [PathBuf::from("a/b")].into(),
            created: BTreeSet::new(),
        };
        assert!(walked.rewalk(&p, &rules, true, &changes).is_err());
    }
}
