//! The agent's environment (SPEC §4, §12): a minimal allowlist, the job's toolchain variables
//! ([`crate::toolchain::ToolchainGrant::env`]: roots and versions of the runner's toolchains,
//! their writable parts redirected into the private HOME), the variables named with `--env`,
//! then the round variables. Nothing else of the runner's environment passes.

use std::collections::BTreeMap;
use std::path::Path;

/// `PATH` when the runner has none.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A variable named with `--env` (or `--setup-env`, [`MissingEnv::flag`]) that the runner cannot
/// pass: it does not have it, or its value is not text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{flag} {name}`: the variable `{name}` {}", if *.not_utf8 {
    "holds bytes that are not UTF-8: a round's environment is text, so ralph cannot pass it; set it to text, or leave it out"
} else {
    "is not set in the runner's environment"
})]
pub struct MissingEnv {
    /// The flag that named it (`--env`, `--setup-env`).
    pub flag: &'static str,
    /// The variable.
    pub name: String,
    /// It is set, but its value is not UTF-8.
    pub not_utf8: bool,
}

/// A snapshot of the runner's environment (taken once, so rounds see a stable view).
#[derive(Clone, Debug, Default)]
pub struct RunnerEnv {
    vars: BTreeMap<String, String>,
    /// Variables set to a value that is not UTF-8 (never passed; named when asked for).
    not_utf8: std::collections::BTreeSet<String>,
}

impl RunnerEnv {
    /// The current process environment (a variable whose value is not UTF-8 is only noted, a
    /// name that is not UTF-8 skipped: neither can reach a round).
    pub fn capture() -> Self {
        let mut out = Self::default();
        for (k, v) in std::env::vars_os() {
            let Ok(k) = k.into_string() else { continue };
            match v.into_string() {
                Ok(v) => {
                    out.vars.insert(k, v);
                }
                Err(_) => {
                    out.not_utf8.insert(k);
                }
            }
        }
        out
    }

    /// Why `--env NAME`-like `flag` cannot pass `name`, if it cannot.
    pub fn cannot_pass(&self, flag: &'static str, name: &str) -> Option<MissingEnv> {
        self.get(name).is_none().then(|| self.missing(flag, name))
    }

    /// Why `flag` cannot pass `name`, which this environment does not hold as text.
    fn missing(&self, flag: &'static str, name: &str) -> MissingEnv {
        MissingEnv {
            flag,
            name: name.to_owned(),
            not_utf8: self.not_utf8.contains(name),
        }
    }

    /// An explicit environment (tests).
    pub fn from_pairs<I: IntoIterator<Item = (String, String)>>(pairs: I) -> Self {
        Self {
            vars: pairs.into_iter().collect(),
            not_utf8: Default::default(),
        }
    }

    /// One variable.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }
}

/// Builds a command's environment: allowlist, private dirs, `--env` names, then `ralph` vars.
pub fn build(
    runner: &RunnerEnv,
    home: &Path,
    tmp: &Path,
    passthrough: &[String],
    ralph_vars: &[(&str, String)],
) -> Result<Vec<(String, String)>, MissingEnv> {
    build_with(runner, home, tmp, passthrough, ralph_vars, &[])
}

/// Like [`build`], then `extra` (the gateway's and the preset's variables) last, so nothing
/// passed through can override where the round's model requests go.
pub fn build_with(
    runner: &RunnerEnv,
    home: &Path,
    tmp: &Path,
    passthrough: &[String],
    ralph_vars: &[(&str, String)],
    extra: &[(String, String)],
) -> Result<Vec<(String, String)>, MissingEnv> {
    build_round(runner, home, tmp, &[], passthrough, ralph_vars, extra)
}

/// Variables a toolchain grant never sets (the round's own).
const NOT_FROM_TOOLCHAINS: &[&str] = &["PATH", "HOME", "TMPDIR", "LANG", "TERM"];

/// Like [`build_with`], with the job's `toolchain` variables after the allowlist: a variable
/// named with `--env` is the runner's own value (the job asked for it), and the round's and the
/// gateway's come last.
pub fn build_round(
    runner: &RunnerEnv,
    home: &Path,
    tmp: &Path,
    toolchain: &[(String, String)],
    passthrough: &[String],
    ralph_vars: &[(&str, String)],
    extra: &[(String, String)],
) -> Result<Vec<(String, String)>, MissingEnv> {
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    env.insert(
        "PATH".into(),
        runner.get("PATH").unwrap_or(DEFAULT_PATH).to_owned(),
    );
    env.insert("HOME".into(), home.display().to_string());
    env.insert("TMPDIR".into(), tmp.display().to_string());
    env.insert(
        "LANG".into(),
        runner.get("LANG").unwrap_or("C.UTF-8").to_owned(),
    );
    env.insert(
        "TERM".into(),
        runner.get("TERM").unwrap_or("dumb").to_owned(),
    );
    for (k, v) in toolchain {
        if !NOT_FROM_TOOLCHAINS.contains(&k.as_str()) {
            env.insert(k.clone(), v.clone());
        }
    }
    for name in passthrough {
        let Some(value) = runner.get(name) else {
            return Err(runner.missing("--env", name));
        };
        env.insert(name.clone(), value.to_owned());
    }
    for (k, v) in ralph_vars {
        env.insert((*k).to_owned(), v.clone());
    }
    for (k, v) in extra {
        env.insert(k.clone(), v.clone());
    }
    Ok(env.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_allowlist_and_named_variables_pass() {
        let runner = RunnerEnv::from_pairs([
            ("PATH".into(), "/bin".into()),
            ("AWS_SECRET_ACCESS_KEY".into(), "hunter2".into()),
            ("OPENAI_API_KEY".into(), "sk-x".into()),
            ("HOME".into(), "/root".into()),
        ]);
        let env = build(
            &runner,
            Path::new("/r/home"),
            Path::new("/r/tmp"),
            &["OPENAI_API_KEY".into()],
            &[("RALPH_ROUND", "1".into())],
        )
        .unwrap();
        let map: BTreeMap<_, _> = env.into_iter().collect();
        assert_eq!(map.get("HOME").map(String::as_str), Some("/r/home"));
        assert_eq!(map.get("OPENAI_API_KEY").map(String::as_str), Some("sk-x"));
        assert!(!map.contains_key("AWS_SECRET_ACCESS_KEY"));
        assert_eq!(
            map.keys().map(String::as_str).collect::<Vec<_>>(),
            vec![
                "HOME",
                "LANG",
                "OPENAI_API_KEY",
                "PATH",
                "RALPH_ROUND",
                "TERM",
                "TMPDIR"
            ]
        );
    }

    #[test]
    fn toolchain_variables_sit_between_the_allowlist_and_the_named_ones() {
        let runner = RunnerEnv::from_pairs([
            ("PATH".into(), "/h/.cargo/bin:/bin".into()),
            ("CARGO_HOME".into(), "/h/.cargo".into()),
        ]);
        let toolchain = vec![
            ("RUSTUP_HOME".to_owned(), "/h/.rustup".to_owned()),
            ("CARGO_HOME".to_owned(), "/r/home/.cargo".to_owned()),
            ("PATH".to_owned(), "/evil".to_owned()),
            ("HOME".to_owned(), "/h".to_owned()),
        ];
        let map = |passthrough: &[String]| -> BTreeMap<String, String> {
            build_round(
                &runner,
                Path::new("/r/home"),
                Path::new("/r/tmp"),
                &toolchain,
                passthrough,
                &[],
                &[("RUSTUP_HOME".into(), "/gateway-wins".into())],
            )
            .unwrap()
            .into_iter()
            .collect()
        };
        let m = map(&[]);
        assert_eq!(m["CARGO_HOME"], "/r/home/.cargo");
        assert_eq!(
            m["PATH"], "/h/.cargo/bin:/bin",
            "the runner's PATH, in its order"
        );
        assert_eq!(m["HOME"], "/r/home");
        assert_eq!(m["RUSTUP_HOME"], "/gateway-wins");
        let m = map(&["CARGO_HOME".into()]);
        assert_eq!(
            m["CARGO_HOME"], "/h/.cargo",
            "--env CARGO_HOME is the job's choice"
        );
    }

    #[test]
    fn a_missing_named_variable_is_an_error() {
        let e = build(
            &RunnerEnv::default(),
            Path::new("/h"),
            Path::new("/t"),
            &["NOPE".into()],
            &[],
        )
        .unwrap_err();
        assert!(e.to_string().contains("`NOPE`"));
    }
}
