//! Python: pyenv's shims, virtualenvs and Python installations on the PATH.
//!
//! - pyenv: `shims/python3` is a script running `pyenv exec`, which needs `PYENV_ROOT`, pyenv's
//!   own `libexec` (and plugins, hooks) and the selected `versions/<v>`. The version is resolved
//!   on the runner as pyenv does (`PYENV_VERSION`, else the first `.python-version` from the
//!   workspace up, else `PYENV_ROOT/version`) and pinned with `PYENV_VERSION`, so a version file
//!   the round cannot see (above the workspace, in the runner's home) still decides, and only
//!   that version's tree is shown.
//! - a virtualenv: its tree, and its base interpreter's prefix (from `pyvenv.cfg`'s `home` and
//!   the `bin/python` symlink chain, resolved on the runner). `VIRTUAL_ENV` is set when the
//!   runner has it active. A workspace's own `.venv` is visible already; its base is granted only
//!   when it looks like a Python installation (`lib/python*/os.py`), since the workspace's
//!   `pyvenv.cfg` is the agent's to write.
//! - a Python installation's `bin` on the PATH (`~/.pyenv/versions/3.11.7/bin`): its prefix.
//!
//! pip's cache is the round's private `~/.cache/pip`; pip's configuration in the runner's home
//! (`~/.config/pip`, `~/.pip`, which may hold an index URL with a password) is never shown: a
//! round that needs an index gets it with `--env PIP_INDEX_URL`.

use std::path::{Path, PathBuf};

use super::detect::{Ctx, plain_name, version_cmp};
use super::grant::{Kind, Refused, Toolchain, Value};

/// pyenv's parts a shim needs (those that exist are granted), besides the selected versions.
const PYENV_PARTS: &[&str] = &["bin", "libexec", "shims", "plugins", "pyenv.d", "version"];

/// Bytes read of a version file or `pyvenv.cfg`.
const SMALL_FILE: usize = 4096;

/// Versions one version file may select.
const MAX_VERSIONS: usize = 8;

/// `dir` is pyenv's `shims` or `bin`, or a plugin's (`plugins/pyenv-virtualenv/shims`).
pub(super) fn pyenv(ctx: &Ctx<'_>, dir: &Path, refused: &mut Vec<Refused>) -> Option<Toolchain> {
    let root = pyenv_root(ctx, dir)?;
    let versions = selected_versions(ctx, &root);
    let mut read: Vec<PathBuf> = PYENV_PARTS
        .iter()
        .map(|p| root.join(p))
        .filter(|p| ctx.fs.is_dir(p) || ctx.fs.is_file(p))
        .collect();
    let mut names = Vec::new();
    for v in versions {
        if v == "system" {
            names.push(v);
            continue;
        }
        match installed(ctx, &root, &v) {
            Some((name, path)) => {
                read.extend(ctx.with_real(&path));
                names.push(name);
            }
            None => refused.push(Refused {
                path: root.join("versions").join(&v),
                why: format!("pyenv version `{v}` is not installed on the runner"),
            }),
        }
    }
    let mut vars = vec![(
        "PYENV_ROOT".to_owned(),
        Value::Host(root.display().to_string()),
    )];
    if !names.is_empty() {
        vars.push(("PYENV_VERSION".to_owned(), Value::Host(names.join(":"))));
    }
    Some(Toolchain {
        kind: Kind::Pyenv,
        detail: names.join(":"),
        found_at: dir.to_path_buf(),
        read,
        vars,
    })
}

/// The pyenv root `dir` belongs to.
fn pyenv_root(ctx: &Ctx<'_>, dir: &Path) -> Option<PathBuf> {
    let name = dir.file_name()?;
    if name != "shims" && name != "bin" {
        return None;
    }
    let parent = dir.parent()?;
    let candidates = [
        Some(parent.to_path_buf()),
        // plugins/<plugin>/shims
        parent
            .parent()
            .filter(|p| p.file_name().is_some_and(|n| n == "plugins"))
            .and_then(Path::parent)
            .map(Path::to_path_buf),
    ];
    let root = candidates
        .into_iter()
        .flatten()
        .find(|r| ctx.fs.is_executable(&r.join("libexec/pyenv")))?;
    // pyenv's own variable names the root the shims were made for, when set.
    match ctx.abs_var("PYENV_ROOT") {
        Some(set) if ctx.same_dir(&set, &root) => Some(set),
        _ => Some(root),
    }
}

/// The versions pyenv selects for the workspace, as pyenv reads them.
fn selected_versions(ctx: &Ctx<'_>, root: &Path) -> Vec<String> {
    if let Some(v) = ctx.var("PYENV_VERSION") {
        return v
            .split(':')
            .filter(|s| !s.is_empty())
            .take(MAX_VERSIONS)
            .map(str::to_owned)
            .collect();
    }
    let from_file = ctx
        .workspace
        .ancestors()
        .map(|d| d.join(".python-version"))
        .chain(std::iter::once(root.join("version")))
        .filter(|f| ctx.fs.is_file(f))
        .find_map(|f| {
            let v = read_version_file(&ctx.fs.read_small(&f, SMALL_FILE)?);
            (!v.is_empty()).then_some(v)
        });
    from_file.unwrap_or_else(|| vec!["system".to_owned()])
}

/// The first word of each line, comments and blank lines skipped (pyenv-version-file-read).
fn read_version_file(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| !w.starts_with('#'))
        .take(MAX_VERSIONS)
        .map(str::to_owned)
        .collect()
}

/// The installed version directory `v` names (exactly, or as the newest `v.*`), inside
/// `root/versions` once resolved (`3.11.7/envs/x` of pyenv-virtualenv is; `../../x` is not).
fn installed(ctx: &Ctx<'_>, root: &Path, v: &str) -> Option<(String, PathBuf)> {
    let versions = root.join("versions");
    let inside = |p: &Path| match (ctx.fs.canonicalize(p), ctx.fs.canonicalize(&versions)) {
        (Some(real), Some(base)) => real.starts_with(&base) && real != base,
        _ => false,
    };
    let safe = v.split('/').all(plain_name);
    if safe && ctx.fs.is_dir(&versions.join(v)) && inside(&versions.join(v)) {
        return Some((v.to_owned(), versions.join(v)));
    }
    if !plain_name(v) {
        return None;
    }
    let prefix = format!("{v}.");
    let mut names: Vec<String> = ctx
        .fs
        .list(&versions, 1024)
        .into_iter()
        .filter(|n| n.starts_with(&prefix) && plain_name(n))
        .collect();
    names.sort_by(|a, b| version_cmp(a, b));
    let name = names.pop()?;
    let path = versions.join(&name);
    (ctx.fs.is_dir(&path) && inside(&path)).then_some((name, path))
}

/// `dir` is a virtualenv's `bin` (beside a `pyvenv.cfg`).
pub(super) fn venv(ctx: &Ctx<'_>, dir: &Path, refused: &mut Vec<Refused>) -> Option<Toolchain> {
    if dir.file_name()? != "bin" {
        return None;
    }
    let root = dir.parent()?;
    let cfg = ctx.fs.read_small(&root.join("pyvenv.cfg"), SMALL_FILE)?;
    let mut read = ctx.with_real(root);
    let mut bases: Vec<PathBuf> = Vec::new();
    if let Some(home) = cfg_value(&cfg, "home").map(PathBuf::from) {
        if let Some(p) = ctx
            .fs
            .canonicalize(&home)
            .and_then(|h| h.parent().map(Path::to_path_buf))
        {
            bases.push(p);
        }
    }
    for exe in ["python", "python3"] {
        if let Some(p) = ctx
            .fs
            .canonicalize(&dir.join(exe))
            .and_then(|r| r.parent()?.parent().map(Path::to_path_buf))
        {
            if !bases.contains(&p) {
                bases.push(p);
            }
        }
    }
    for b in bases {
        if is_python_prefix(ctx, &b) {
            read.push(b);
        } else {
            refused.push(Refused {
                path: b,
                why: format!(
                    "the base interpreter of the virtualenv `{}` does not look like a Python installation (no lib/python*/os.py)",
                    root.display()
                ),
            });
        }
    }
    let mut vars = Vec::new();
    if ctx
        .abs_var("VIRTUAL_ENV")
        .is_some_and(|v| ctx.same_dir(&v, root))
    {
        vars.push((
            "VIRTUAL_ENV".to_owned(),
            Value::Host(root.display().to_string()),
        ));
    }
    Some(Toolchain {
        kind: Kind::Venv,
        detail: cfg_value(&cfg, "version")
            .or_else(|| cfg_value(&cfg, "version_info"))
            .map(|v| format!("python {}", crate::util::text::bounded(v, 32)))
            .unwrap_or_default(),
        found_at: dir.to_path_buf(),
        read,
        vars,
    })
}

/// `dir` is a Python installation's `bin` (its prefix holds `lib/python*/os.py`).
pub(super) fn prefix(ctx: &Ctx<'_>, dir: &Path, _: &mut Vec<Refused>) -> Option<Toolchain> {
    if dir.file_name()? != "bin" {
        return None;
    }
    // `/bin -> usr/bin`: the prefix is where the directory really is.
    let real = ctx.fs.canonicalize(dir)?;
    let prefix = real.parent().filter(|p| *p != Path::new("/"))?;
    let has_python = ["python3", "python"]
        .iter()
        .any(|n| ctx.fs.is_executable(&dir.join(n)));
    if !has_python || !is_python_prefix(ctx, prefix) {
        return None;
    }
    Some(Toolchain {
        kind: Kind::Python,
        detail: String::new(),
        found_at: dir.to_path_buf(),
        read: [dir.to_path_buf(), prefix.to_path_buf()].into(),
        vars: Vec::new(),
    })
}

/// A `key = value` line of `pyvenv.cfg`.
fn cfg_value<'c>(cfg: &'c str, key: &str) -> Option<&'c str> {
    cfg.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == key)
            .then(|| v.trim())
            .filter(|v| !v.is_empty())
    })
}

/// A prefix holding a Python standard library (`lib/python3.11/os.py`).
fn is_python_prefix(ctx: &Ctx<'_>, prefix: &Path) -> bool {
    let lib = prefix.join("lib");
    ctx.fs
        .list(&lib, 256)
        .iter()
        .filter(|n| n.starts_with("python"))
        .any(|n| ctx.fs.is_file(&lib.join(n).join("os.py")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_file_is_read_as_pyenv_reads_it() {
        assert_eq!(
            read_version_file("# pinned\n\n3.11.7 extra\r\n  3.12.1\n"),
            vec!["3.11.7", "3.12.1"]
        );
        assert!(read_version_file("").is_empty());
    }
}
