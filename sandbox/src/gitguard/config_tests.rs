//! The config reader on hostile input: every way to spell a command-carrying key is dropped, the
//! few kept keys are read exactly as git reads them (checked against `git config --list` where
//! git is installed), and nothing the reader cannot read safely is kept.

use std::process::Command;

use super::*;

fn kept(text: &[u8]) -> SafeConfig {
    read(text, true).safe
}

fn dropped(text: &[u8]) -> Vec<String> {
    read(text, true).dropped
}

const FRESH: &str = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n";

#[test]
fn a_fresh_git_init_config_is_kept_whole() {
    let r = read(FRESH.as_bytes(), true);
    assert_eq!(
        r.safe,
        SafeConfig {
            format_version: Some(0),
            bare: Some(false),
            filemode: Some(true),
            logallrefupdates: Some("true"),
            objectformat: None,
            refstorage: None,
        }
    );
    assert!(r.dropped.is_empty(), "{:?}", r.dropped);
    assert_eq!(r.unreadable, None);
}

#[test]
fn command_carrying_keys_are_dropped_however_spelled() {
    let text = b"[core]\n\tbare = false\n\tfsmonitor = /ws/payload\n\thooksPath = /ws/hooks\n\
        \tsshCommand = /ws/payload ssh\n\tpager = /ws/payload\n\teditor = x\n\
        [CORE] FSMonitor = /ws/a\n\
        [core]fsmonitor=/ws/b\n\
        [alias]\n\tst = !/ws/payload alias\n\
        [filter \"evil\"]\n\tclean = /ws/payload clean\n\
        [include]\n\tpath = /ws/evil.cfg\n\
        [includeIf \"gitdir:/\"]\n\tpath = /ws/evil.cfg\n\
        [diff]\n\texternal = /ws/payload\n\
        [gpg]\n\tprogram = /ws/payload\n[commit]\n\tgpgsign = true\n\
        [credential]\n\thelper = !/ws/payload\n\
        [remote \"origin\"]\n\turl = ssh://h/x\n\tuploadpack = /ws/payload\n\
        [extensions]\n\tworktreeConfig = true\n";
    let r = read(text, true);
    assert_eq!(r.safe.bare, Some(false));
    let d = r.dropped.join(" ");
    for key in [
        "core.fsmonitor",
        "core.hookspath",
        "core.sshcommand",
        "core.pager",
        "core.editor",
        "alias.st",
        "filter.evil.clean",
        "include.path",
        "includeif.gitdir:/.path",
        "diff.external",
        "gpg.program",
        "commit.gpgsign",
        "credential.helper",
        "remote.origin.url",
        "remote.origin.uploadpack",
        "extensions.worktreeconfig",
    ] {
        assert!(d.contains(key), "{key} not reported dropped in {d}");
    }
    let out = render(&r.safe);
    assert!(!out.to_ascii_lowercase().contains("fsmonitor"), "{out}");
    assert!(!out.contains("/ws/"), "{out}");
    assert_eq!(
        kept(out.as_bytes()),
        r.safe,
        "the replacement reads back the same"
    );
    assert!(dropped(out.as_bytes()).is_empty());
}

#[test]
fn subsections_and_legacy_sections_are_not_core() {
    // `core "x"`, `core.x` and `core ""` are other sections: their `bare` is not core.bare.
    for text in [
        "[core \"x\"]\n\tbare = true\n",
        "[core.x]\n\tbare = true\n",
        "[core \"\"]\n\tbare = true\n",
        "[core.]\n\tbare = true\n",
        "[cor\\e]\n\tbare = true\n",
    ] {
        assert_eq!(kept(text.as_bytes()).bare, None, "{text:?}");
    }
    // A key on the header's line, upper case names, a key without a value (true).
    assert_eq!(kept(b"[CoRe] BaRe\n").bare, Some(true));
    assert_eq!(kept(b"[core] bare = no ; comment\n").bare, Some(false));
}

#[test]
fn quoting_escapes_comments_and_continuations_read_as_git_does() {
    assert_eq!(kept(b"[core]\n\tbare = \"true\"\n").bare, Some(true));
    assert_eq!(kept(b"[core]\n\tbare = tr\\\nue\n").bare, Some(true));
    assert_eq!(kept(b"[core]\n\tbare = true # false\n").bare, Some(true));
    assert_eq!(
        kept(b"[core]\n\tbare = \"false\" ; true\n").bare,
        Some(false)
    );
    assert_eq!(kept(b"[core]\r\n\tbare = yes\r\n").bare, Some(true));
    // A value git would read as something else is dropped, not guessed.
    assert_eq!(kept(b"[core]\n\tbare = \"tru e\"\n").bare, None);
    assert_eq!(kept(b"[core]\n\tbare = maybe\n").bare, None);
    assert_eq!(
        kept(b"[core]\n\trepositoryformatversion = 2\n").format_version,
        None
    );
    assert_eq!(
        kept(b"[extensions]\n\tobjectformat = sha256\n\trefstorage = reftable\n"),
        SafeConfig {
            objectformat: Some("sha256"),
            refstorage: Some("reftable"),
            ..SafeConfig::default()
        }
    );
    assert_eq!(
        kept(b"[extensions]\n\tobjectformat = md5\n").objectformat,
        None
    );
    // The last value wins, as in git.
    assert_eq!(
        kept(b"[core]\nbare = true\nbare = false\n").bare,
        Some(false)
    );
    // A continuation cannot smuggle a new line with a key into the value's line.
    let r = read(b"[core]\n\tbare = false\\\n\tfsmonitor = x\n", true);
    assert_eq!(
        r.safe.bare, None,
        "`false\\tfsmonitor = x` is not a boolean"
    );
    assert!(!render(&r.safe).contains("fsmonitor"));
}

#[test]
fn what_git_would_refuse_keeps_nothing() {
    for text in [
        &b"[core\n\tbare = true\n"[..],
        b"[core]\n\tbare = \"true\n",
        b"[core]\n\tbare = tr\\ue\n",
        b"[core]\n\t1bare = true\n",
        b"[core]\n\tbare true\n",
        b"[core \"x]\n",
        b"\xef\xbb[core]\n\tbare = true\n",
        b"[core]\n\tbare = true\n[]\n",
    ] {
        let r = read(text, true);
        assert_eq!(r.safe, SafeConfig::default(), "{text:?}");
        assert!(r.unreadable.is_some(), "{text:?}");
    }
    // A BOM itself is fine.
    assert_eq!(
        kept(b"\xef\xbb\xbf[core]\n\tbare = true\n").bare,
        Some(true)
    );
}

#[test]
fn a_huge_file_keeps_nothing() {
    let r = read(FRESH.as_bytes(), false);
    assert_eq!(r.safe, SafeConfig::default());
    assert!(r.unreadable.unwrap().contains("larger than"));
}

#[test]
fn non_utf8_names_and_values_are_dropped_and_reported_escaped() {
    let r = read(
        b"[core]\n\tbare = true\n[sec \"\xff\n\x1b[2J\"]\n\tkey = \xfe\n",
        true,
    );
    // `\n` inside a quoted subsection ends the header: git refuses the file, so do we.
    assert!(r.unreadable.is_some());
    let r = read(
        b"[core]\n\tbare = true\n[sec \"\xff\x1b[2J\"]\n\tkey = \xfe\n",
        true,
    );
    assert_eq!(r.safe.bare, Some(true));
    assert_eq!(r.dropped, vec!["sec.\\xff\\x1b[2J.key".to_owned()]);
}

#[test]
fn dropped_names_are_bounded() {
    let mut text = String::from("[alias]\n");
    for i in 0..100 {
        text.push_str(&format!("\ta{i} = !x\n"));
    }
    text.push_str(&format!("\t{} = !x\n", "k".repeat(500)));
    let d = dropped(text.as_bytes());
    assert_eq!(d.len(), MAX_DROPPED + 1);
    assert_eq!(d.last().unwrap(), "+85 more");
    assert!(d.iter().all(|k| k.len() <= KEY_BOUND));
}

/// Arbitrary bytes never panic the reader, and whatever it keeps renders into a file that keeps
/// only the allowed keys.
#[test]
fn random_input_never_panics_and_renders_only_allowed_keys() {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let alphabet = b"[]\"\\\n\r\t =#;.-abcoreBAREtrufls01\xef\xbb\xbf";
    for _ in 0..5000 {
        let len = usize::try_from(x % 64).unwrap();
        let mut bytes = Vec::with_capacity(len);
        for _ in 0..len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            bytes.push(alphabet[usize::try_from(x % alphabet.len() as u64).unwrap()]);
        }
        let r = read(&bytes, true);
        let out = render(&r.safe);
        let back = read(out.as_bytes(), true);
        assert_eq!(back.safe, r.safe, "{bytes:?}");
        assert!(back.dropped.is_empty(), "{out}");
    }
}

/// `(name, value)` pairs as `git config --list --null` reads them, if git is installed.
fn git_list(text: &[u8]) -> Option<Result<Vec<Var>, ()>> {
    let git = ["/usr/local/bin/git", "/usr/bin/git"]
        .into_iter()
        .find(|g| std::path::Path::new(g).is_file())?;
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("config");
    std::fs::write(&f, text).unwrap();
    let out = Command::new(git)
        .args(["config", "--no-includes", "--null", "--list", "--file"])
        .arg(&f)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir.path())
        .output()
        .unwrap();
    if !out.status.success() {
        return Some(Err(()));
    }
    let mut vars = Vec::new();
    for item in out.stdout.split(|&b| b == 0).filter(|i| !i.is_empty()) {
        match item.iter().position(|&b| b == b'\n') {
            Some(nl) => vars.push((item[..nl].to_vec(), Some(item[nl + 1..].to_vec()))),
            None => vars.push((item.to_vec(), None)),
        }
    }
    Some(Ok(vars))
}

/// The reader sees exactly the variables git sees (names and values), and refuses exactly what
/// git refuses, on tricky input.
#[test]
fn the_reader_agrees_with_git() {
    let samples: &[&[u8]] = &[
        FRESH.as_bytes(),
        b"[core] bare\n[core \"Sub.Sec\"] Key = \"a;b\" # c\n",
        b"[core]\n\tbare = tr\\\nue\n\tx = \"  spaced  \"  \n\ty = a\\tb\\\\c\\\"\n",
        b"[core.Legacy]\n\tkey = v\n[CORE]\n\tFSMonitor=/x\n",
        b"\xef\xbb\xbf[a]\nb=c\r\n",
        b"[a]\nb = \"unterminated\n",
        b"[a]\nb = x\\q\n",
        b"[a \"x\\\"y\"]\nk = v\n",
        b"[a]\n; comment\n# comment\nk = v ; trailing\n  k2  \n",
        b"[includeIf \"gitdir:~/x/\"]\n\tpath = ../evil\n",
        b"[a]\nk = \xff\xfe\n[b \"\xc3\xa9\"]\nk\n",
        b"[a]\n\tk = one \\\n two\n",
    ];
    let mut compared = 0;
    for s in samples {
        let Some(git) = git_list(s) else {
            eprintln!("SKIP the_reader_agrees_with_git: git is not installed");
            return;
        };
        let ours = parse(s).map_err(|_| ());
        assert_eq!(
            ours,
            git,
            "reader and git disagree on {:?}",
            String::from_utf8_lossy(s)
        );
        compared += 1;
    }
    assert_eq!(compared, samples.len());
}
