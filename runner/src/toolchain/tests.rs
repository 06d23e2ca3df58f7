//! Detection over real trees built in temporary directories (a fake home per test).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use super::*;

struct Tree {
    _dir: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
    ws: PathBuf,
}

impl Tree {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let home = root.join("home/u");
        let ws = root.join("work/proj");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&ws).unwrap();
        Tree {
            _dir: dir,
            root,
            home,
            ws,
        }
    }

    fn file(&self, rel: &str, body: &str) -> PathBuf {
        let p = self.root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, body).unwrap();
        p
    }

    fn exe(&self, rel: &str) -> PathBuf {
        let p = self.file(rel, "#!/bin/sh\n");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    fn link(&self, rel: &str, to: &Path) {
        let p = self.root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        symlink(to, p).unwrap();
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    fn detect(&self, vars: &[(&str, String)]) -> ToolchainGrant {
        let system: Vec<PathBuf> = ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/opt"]
            .iter()
            .map(PathBuf::from)
            .collect();
        self.detect_with(vars, &system, false)
    }

    fn detect_with(
        &self,
        vars: &[(&str, String)],
        shown: &[PathBuf],
        docker: bool,
    ) -> ToolchainGrant {
        let mut pairs: Vec<(String, String)> =
            vec![("HOME".into(), self.home.display().to_string())];
        pairs.extend(vars.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
        let env = RunnerEnv::from_pairs(pairs);
        detect(
            &Host {
                fs: &RealFs,
                env: &env,
            },
            &Scope {
                workspace: &self.ws,
                program_dirs: &[],
                shown,
                docker,
                forbidden: &[self.p("state")],
            },
        )
    }

    fn path(&self, rels: &[&str]) -> (&'static str, String) {
        let mut v: Vec<String> = rels
            .iter()
            .map(|r| self.p(r).display().to_string())
            .collect();
        v.push("/usr/bin:/bin".into());
        ("PATH", v.join(":"))
    }
}

fn var(g: &ToolchainGrant, name: &str) -> Option<String> {
    g.env(Path::new("/round/home"))
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

fn rustup_tree(t: &Tree) {
    let rustup = t.exe("home/u/.cargo/bin/rustup");
    t.link("home/u/.cargo/bin/cargo", &rustup);
    t.file(
        "home/u/.cargo/credentials.toml",
        "[registry]\ntoken = \"canary\"\n",
    );
    t.file(
        "home/u/.cargo/config.toml",
        "[registry]\ntoken = \"canary\"\n",
    );
    t.file("home/u/.cargo/registry/index/x", "");
    t.file(
        "home/u/.rustup/settings.toml",
        "version = \"12\"\ndefault_toolchain = \"stable-x86_64-unknown-linux-gnu\"\n",
    );
    t.exe("home/u/.rustup/toolchains/stable-x86_64-unknown-linux-gnu/bin/cargo");
}

#[test]
fn rustup_gets_its_home_read_only_and_cargo_home_in_the_private_home_never_the_credentials() {
    let t = Tree::new();
    rustup_tree(&t);
    let g = t.detect(&[t.path(&["home/u/.cargo/bin"])]);
    assert_eq!(g.toolchains.len(), 1, "{g:?}");
    assert_eq!(g.toolchains[0].kind, Kind::Rustup);
    assert_eq!(g.toolchains[0].detail, "stable-x86_64-unknown-linux-gnu");
    assert_eq!(
        g.read_paths(),
        vec![t.p("home/u/.cargo/bin"), t.p("home/u/.rustup")]
    );
    assert_eq!(
        var(&g, "RUSTUP_HOME"),
        Some(t.p("home/u/.rustup").display().to_string())
    );
    assert_eq!(var(&g, "CARGO_HOME").as_deref(), Some("/round/home/.cargo"));
    for secret in ["credentials.toml", "config.toml", "registry/index/x"] {
        assert!(!g.shows(&t.p("home/u/.cargo").join(secret)), "{secret}");
    }
    // RUSTUP_HOME set on the runner decides; one that is the home itself is refused, said.
    let g = t.detect(&[
        t.path(&["home/u/.cargo/bin"]),
        ("RUSTUP_HOME", t.home.display().to_string()),
    ]);
    assert_eq!(g.read_paths(), vec![t.p("home/u/.cargo/bin")]);
    assert!(g.refused.iter().any(|r| r.path == t.home), "{g:?}");
}

fn pyenv_tree(t: &Tree) {
    t.exe("home/u/.pyenv/libexec/pyenv");
    t.exe("home/u/.pyenv/bin/pyenv");
    t.exe("home/u/.pyenv/shims/python3");
    t.exe("home/u/.pyenv/plugins/pyenv-virtualenv/shims/activate");
    t.file("home/u/.pyenv/version", "3.11.7\n");
    for v in ["3.11.7", "3.12.1", "3.12.0"] {
        t.exe(&format!("home/u/.pyenv/versions/{v}/bin/python3"));
        t.file(
            &format!("home/u/.pyenv/versions/{v}/lib/python3.x/os.py"),
            "",
        );
    }
}

#[test]
fn pyenv_shims_get_the_selected_version_only_pinned_with_pyenv_version() {
    let t = Tree::new();
    pyenv_tree(&t);
    let path = t.path(&[
        "home/u/.pyenv/plugins/pyenv-virtualenv/shims",
        "home/u/.pyenv/shims",
        "home/u/.pyenv/bin",
    ]);
    let g = t.detect(std::slice::from_ref(&path));
    assert_eq!(
        g.toolchains.len(),
        1,
        "three PATH entries, one pyenv: {g:?}"
    );
    assert_eq!(
        var(&g, "PYENV_ROOT"),
        Some(t.p("home/u/.pyenv").display().to_string())
    );
    assert_eq!(var(&g, "PYENV_VERSION").as_deref(), Some("3.11.7"));
    let read = g.read_paths();
    assert!(
        read.contains(&t.p("home/u/.pyenv/versions/3.11.7")),
        "{read:?}"
    );
    assert!(read.contains(&t.p("home/u/.pyenv/libexec")), "{read:?}");
    assert!(!g.shows(&t.p("home/u/.pyenv/versions/3.12.1/bin/python3")));

    // A version file above the workspace (invisible inside) decides, prefix resolved as pyenv
    // does: the newest 3.12.
    t.file("work/.python-version", "3.12\n");
    let g = t.detect(std::slice::from_ref(&path));
    assert_eq!(var(&g, "PYENV_VERSION").as_deref(), Some("3.12.1"));
    assert!(g.shows(&t.p("home/u/.pyenv/versions/3.12.1/bin/python3")));

    // The workspace's own file comes first; a path out of versions/ is not granted.
    t.file("work/proj/.python-version", "../../../.ssh\n");
    t.file("home/u/.ssh/id_rsa", "key");
    let g = t.detect(std::slice::from_ref(&path));
    assert!(!g.shows(&t.p("home/u/.ssh/id_rsa")), "{g:?}");
    assert!(
        g.refused.iter().any(|r| r.why.contains("not installed")),
        "{g:?}"
    );

    // PYENV_VERSION on the runner wins.
    let g = t.detect(&[path, ("PYENV_VERSION", "3.12.0".into())]);
    assert_eq!(var(&g, "PYENV_VERSION").as_deref(), Some("3.12.0"));
}

#[test]
fn a_venv_is_granted_with_its_base_interpreter_resolved_through_the_symlink_chain() {
    let t = Tree::new();
    pyenv_tree(&t);
    // venv/bin/python -> python3 -> ~/.pyenv/versions/3.11.7/bin/python3
    t.file(
        "tmp/venv/pyvenv.cfg",
        &format!(
            "home = {}\nversion = 3.11.7\n",
            t.p("home/u/.pyenv/versions/3.11.7/bin").display()
        ),
    );
    t.link(
        "tmp/venv/bin/python3",
        &t.p("home/u/.pyenv/versions/3.11.7/bin/python3"),
    );
    t.link("tmp/venv/bin/python", Path::new("python3"));
    t.exe("tmp/venv/bin/pytest");
    let g = t.detect(&[
        t.path(&["tmp/venv/bin"]),
        ("VIRTUAL_ENV", t.p("tmp/venv").display().to_string()),
    ]);
    assert_eq!(g.toolchains[0].kind, Kind::Venv, "{g:?}");
    assert_eq!(g.toolchains[0].detail, "python 3.11.7");
    assert_eq!(
        g.read_paths(),
        vec![t.p("home/u/.pyenv/versions/3.11.7"), t.p("tmp/venv")]
    );
    assert_eq!(
        var(&g, "VIRTUAL_ENV"),
        Some(t.p("tmp/venv").display().to_string())
    );
    // Not active on the runner: granted (it is on the PATH), VIRTUAL_ENV not set.
    let g = t.detect(&[t.path(&["tmp/venv/bin"])]);
    assert_eq!(var(&g, "VIRTUAL_ENV"), None);
}

#[test]
fn a_workspace_venv_pointing_at_a_secret_gets_nothing_granted() {
    let t = Tree::new();
    t.file("home/u/.ssh/id_rsa", "key");
    t.exe("home/u/.ssh/bin/python3");
    t.file(
        "work/proj/.venv/pyvenv.cfg",
        &format!("home = {}\n", t.p("home/u/.ssh/bin").display()),
    );
    t.link(
        "work/proj/.venv/bin/python",
        &t.p("home/u/.ssh/bin/python3"),
    );
    let g = t.detect(&[t.path(&[])]);
    assert!(!g.shows(&t.p("home/u/.ssh/id_rsa")), "{g:?}");
    assert!(g.read_paths().is_empty(), "{g:?}");
    assert!(!g.refused.is_empty(), "said: {g:?}");
    // Even when the planted base looks like a Python installation, the home's secrets stay out.
    t.file("home/u/lib/python3.11/os.py", "");
    t.exe("home/u/bin/python3");
    std::fs::write(
        t.p("work/proj/.venv/pyvenv.cfg"),
        format!("home = {}\n", t.p("home/u/bin").display()),
    )
    .unwrap();
    let g = t.detect(&[t.path(&[])]);
    assert!(!g.shows(&t.p("home/u/.ssh/id_rsa")), "{g:?}");
    assert!(g.refused.iter().any(|r| r.path == t.home), "{g:?}");
}

/// A fake nvm tree whose `node` is a link to the system's real one (no nvm on this host).
#[test]
fn nvm_node_gets_its_version_tree_and_nvm_variables() {
    let t = Tree::new();
    let node = ["/usr/bin/node", "/bin/sh"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap();
    t.link("home/u/.nvm/versions/node/v20.11.0/bin/node", &node);
    t.file("home/u/.nvm/versions/node/v20.11.0/include/node/node.h", "");
    t.file("home/u/.nvm/nvm.sh", "");
    t.file("home/u/.npmrc", "//registry.npmjs.org/:_authToken=canary\n");
    let g = t.detect(&[t.path(&["home/u/.nvm/versions/node/v20.11.0/bin"])]);
    assert_eq!(g.toolchains[0].kind, Kind::Nvm, "{g:?}");
    assert_eq!(g.toolchains[0].detail, "v20.11.0");
    assert_eq!(
        g.read_paths(),
        vec![t.p("home/u/.nvm/versions/node/v20.11.0")]
    );
    assert_eq!(
        var(&g, "NVM_DIR"),
        Some(t.p("home/u/.nvm").display().to_string())
    );
    assert_eq!(
        var(&g, "NVM_BIN"),
        Some(
            t.p("home/u/.nvm/versions/node/v20.11.0/bin")
                .display()
                .to_string()
        )
    );
    assert!(var(&g, "NVM_INC").is_some());
    assert!(!g.shows(&t.p("home/u/.npmrc")));
}

#[test]
fn go_gets_goroot_and_its_writable_state_in_the_private_home() {
    let t = Tree::new();
    t.exe("home/u/sdk/go1.22.1/bin/go");
    t.file("home/u/sdk/go1.22.1/src/runtime/proc.go", "");
    t.file("home/u/sdk/go1.22.1/VERSION", "go1.22.1\ntime x\n");
    t.exe("home/u/go/bin/gopls");
    let g = t.detect(&[t.path(&["home/u/sdk/go1.22.1/bin", "home/u/go/bin"])]);
    let kinds: Vec<Kind> = g.toolchains.iter().map(|t| t.kind).collect();
    assert_eq!(kinds, [Kind::Go, Kind::GoBin]);
    assert_eq!(g.toolchains[0].detail, "go1.22.1");
    assert_eq!(
        g.read_paths(),
        vec![t.p("home/u/go/bin"), t.p("home/u/sdk/go1.22.1")]
    );
    assert_eq!(
        var(&g, "GOROOT"),
        Some(t.p("home/u/sdk/go1.22.1").display().to_string())
    );
    assert_eq!(
        var(&g, "GOMODCACHE").as_deref(),
        Some("/round/home/go/pkg/mod")
    );
    assert_eq!(
        var(&g, "GOCACHE").as_deref(),
        Some("/round/home/.cache/go-build")
    );
}

#[test]
fn asdf_shims_pin_what_the_round_cannot_see_and_installs_on_the_path_are_granted() {
    let t = Tree::new();
    t.exe("home/u/.asdf/shims/node");
    t.exe("home/u/.asdf/installs/nodejs/20.1.0/bin/node");
    t.exe("home/u/.asdf/installs/python/3.12.0/bin/python3");
    t.exe("home/u/.asdf/bin/asdf");
    t.file("home/u/.tool-versions", "nodejs 20.1.0\npython 3.11.0\n");
    t.file("work/proj/.tool-versions", "python 3.12.0\n");
    let g = t.detect(&[t.path(&["home/u/.asdf/shims"])]);
    assert_eq!(g.toolchains[0].kind, Kind::Asdf, "{g:?}");
    assert_eq!(var(&g, "ASDF_NODEJS_VERSION").as_deref(), Some("20.1.0"));
    assert_eq!(
        var(&g, "ASDF_PYTHON_VERSION"),
        None,
        "the workspace pins python itself"
    );
    assert!(g.shows(&t.p("home/u/.asdf/installs/nodejs/20.1.0/bin/node")));
    // mise activate: the install's bin is on the PATH.
    t.exe("home/u/.local/share/mise/installs/node/22.0.0/bin/node");
    let g = t.detect(&[t.path(&["home/u/.local/share/mise/installs/node/22.0.0/bin"])]);
    assert_eq!(g.toolchains[0].kind, Kind::Mise, "{g:?}");
    assert_eq!(
        g.read_paths(),
        vec![t.p("home/u/.local/share/mise/installs/node/22.0.0")]
    );
}

#[test]
fn system_trees_are_not_granted_again_and_on_docker_they_are_the_images() {
    let t = Tree::new();
    rustup_tree(&t);
    let shown = vec![
        t.p("home/u/.cargo"),
        t.p("home/u/.rustup"),
        PathBuf::from("/usr"),
        PathBuf::from("/bin"),
    ];
    let g = t.detect_with(&[t.path(&["home/u/.cargo/bin"])], &shown, false);
    assert!(g.read_paths().is_empty(), "{g:?}");
    assert!(
        var(&g, "RUSTUP_HOME").is_some(),
        "natively the variables are still needed"
    );
    let g = t.detect_with(&[t.path(&["home/u/.cargo/bin"])], &shown, true);
    assert!(g.toolchains.is_empty(), "{g:?}");
}

#[test]
fn a_plain_path_has_no_toolchain_and_none_grants_nothing() {
    let t = Tree::new();
    t.exe("home/u/bin/tool");
    let g = t.detect(&[t.path(&["home/u/bin"])]);
    assert!(g.is_empty(), "{g:?}");
    rustup_tree(&t);
    let mut spec = crate::job::JobSpec::new(
        "o",
        &t.ws,
        crate::job::AgentSpec::Command {
            command: "true".into(),
        },
    );
    spec.toolchain = ToolchainMode::None;
    let env = RunnerEnv::from_pairs([
        ("HOME".into(), t.home.display().to_string()),
        t.path(&["home/u/.cargo/bin"]).into_owned(),
    ]);
    assert!(for_job(&spec, &env, &[], &[]).is_empty());
    spec.toolchain = ToolchainMode::Auto;
    assert!(!for_job(&spec, &env, &[], &[]).is_empty());
}

#[test]
fn docker_leaves_out_a_toolchain_under_root_for_a_round_that_is_not_root() {
    let g = ToolchainGrant {
        toolchains: vec![Toolchain {
            kind: Kind::Rustup,
            detail: String::new(),
            found_at: PathBuf::from("/root/.cargo/bin"),
            read: vec![
                PathBuf::from("/root/.rustup"),
                PathBuf::from("/root/.cargo/bin"),
            ],
            vars: Vec::new(),
        }],
        refused: Vec::new(),
    };
    assert_eq!(for_docker(g.clone(), 0, &[]).unwrap(), g);
    // Not needed by the job's commands: left out, said.
    let left = for_docker(g.clone(), 1000, &[PathBuf::from("/usr/bin/python3")]).unwrap();
    assert!(left.toolchains.is_empty());
    assert!(left.refused[0].why.contains("uid 1000"), "{left:?}");
    // Needed: refused, naming why.
    let why = for_docker(g, 1000, &[PathBuf::from("/root/.cargo/bin/cargo")]).unwrap_err();
    assert!(
        why.contains("`/root/.rustup`") && why.contains("uid 1000"),
        "{why}"
    );
}

trait IntoOwned {
    fn into_owned(self) -> (String, String);
}

impl IntoOwned for (&'static str, String) {
    fn into_owned(self) -> (String, String) {
        (self.0.to_owned(), self.1)
    }
}
