//! Version managers with shims: asdf and mise. Their shims dir on the PATH grants the manager's
//! data (installs, plugins, shims) read-only with its variable (`ASDF_DATA_DIR`,
//! `MISE_DATA_DIR`), and the manager's own executable where a shim runs it; an install's `bin`
//! on the PATH (`mise activate`, asdf's `installs/<tool>/<v>/bin`) grants that install.
//!
//! A version pinned in a file the round cannot see is pinned for it on the runner where that is
//! safe: asdf's `.tool-versions` above the workspace or in the runner's home becomes
//! `ASDF_<TOOL>_VERSION` for the tools the workspace does not pin itself. mise's global
//! configuration (`~/.config/mise`) is not shown (its `[env]` may hold secrets): pin versions in
//! the workspace (`mise.toml`, `.tool-versions`) or pass `--env MISE_<TOOL>_VERSION`.

use std::path::{Path, PathBuf};

use super::detect::{Ctx, plain_name};
use super::grant::{Kind, Refused, Toolchain, Value};

/// The parts of a manager's data directory a shim needs.
const DATA_PARTS: &[&str] = &["shims", "installs", "plugins"];

/// Tools pinned from one `.tool-versions`.
const MAX_TOOLS: usize = 64;

/// `dir` is asdf's shims, or an asdf install's `bin`.
pub(super) fn asdf(ctx: &Ctx<'_>, dir: &Path, _: &mut Vec<Refused>) -> Option<Toolchain> {
    let data = ctx.dir_of("ASDF_DATA_DIR", ".asdf")?;
    if let Some(t) = install(ctx, dir, &data, Kind::Asdf) {
        return Some(t);
    }
    if !ctx.same_dir(&data.join("shims"), dir) {
        return None;
    }
    let mut read = parts(ctx, &data);
    // asdf before 0.16 runs from its clone (`ASDF_DIR`, often the data directory); later ones
    // are one executable a shim finds on the PATH.
    match ctx.abs_var("ASDF_DIR") {
        Some(d) => read.extend(ctx.with_real(&d)),
        None => {
            for p in ["bin", "lib"] {
                if ctx.fs.is_dir(&data.join(p)) {
                    read.push(data.join(p));
                }
            }
        }
    }
    if let Some(exe) = ctx.which("asdf").and_then(|e| ctx.fs.canonicalize(&e)) {
        read.push(exe);
    }
    let mut vars = vec![(
        "ASDF_DATA_DIR".to_owned(),
        Value::Host(data.display().to_string()),
    )];
    if let Some(d) = ctx.var("ASDF_DIR") {
        vars.push(("ASDF_DIR".to_owned(), Value::Host(d.to_owned())));
    }
    vars.extend(asdf_pins(ctx));
    Some(Toolchain {
        kind: Kind::Asdf,
        detail: String::new(),
        found_at: dir.to_path_buf(),
        read,
        vars,
    })
}

/// `dir` is mise's shims, or a mise install's `bin`.
pub(super) fn mise(ctx: &Ctx<'_>, dir: &Path, refused: &mut Vec<Refused>) -> Option<Toolchain> {
    let data = ctx.abs_var("MISE_DATA_DIR").or_else(|| {
        ctx.abs_var("XDG_DATA_HOME")
            .or_else(|| ctx.in_home(".local/share"))
            .map(|d| d.join("mise"))
    })?;
    if let Some(t) = install(ctx, dir, &data, Kind::Mise) {
        return Some(t);
    }
    if !ctx.same_dir(&data.join("shims"), dir) {
        return None;
    }
    let mut read = parts(ctx, &data);
    // mise's shims are links to mise itself.
    if let Some(exe) = ctx
        .fs
        .list(dir, 1)
        .first()
        .and_then(|n| ctx.fs.canonicalize(&dir.join(n)))
        .or_else(|| ctx.which("mise").and_then(|e| ctx.fs.canonicalize(&e)))
    {
        read.push(exe);
    }
    if let Some(cfg) = ctx
        .abs_var("XDG_CONFIG_HOME")
        .or_else(|| ctx.in_home(".config"))
        .map(|c| c.join("mise"))
        .filter(|c| ctx.fs.is_dir(c))
    {
        refused.push(Refused {
            path: cfg,
            why: "mise's global configuration is not shown (its [env] may hold secrets): pin versions in the workspace or pass --env MISE_<TOOL>_VERSION".to_owned(),
        });
    }
    Some(Toolchain {
        kind: Kind::Mise,
        detail: String::new(),
        found_at: dir.to_path_buf(),
        read,
        vars: vec![(
            "MISE_DATA_DIR".to_owned(),
            Value::Host(data.display().to_string()),
        )],
    })
}

/// The parts of `data` that exist.
fn parts(ctx: &Ctx<'_>, data: &Path) -> Vec<PathBuf> {
    DATA_PARTS
        .iter()
        .map(|p| data.join(p))
        .filter(|p| ctx.fs.is_dir(p))
        .collect()
}

/// `dir` is `data/installs/<tool>/<version>/bin` (or a `bin` deeper in that install).
fn install(ctx: &Ctx<'_>, dir: &Path, data: &Path, kind: Kind) -> Option<Toolchain> {
    let rel = dir.strip_prefix(data.join("installs")).ok()?;
    let mut c = rel.components();
    let tool = c.next()?.as_os_str().to_str()?;
    let version = c.next()?.as_os_str().to_str()?;
    if !plain_name(tool) || !plain_name(version) || dir.file_name()? != "bin" {
        return None;
    }
    let root = data.join("installs").join(tool).join(version);
    Some(Toolchain {
        kind,
        detail: format!("{tool} {version}"),
        found_at: dir.to_path_buf(),
        read: ctx.with_real(&root),
        vars: Vec::new(),
    })
}

/// `ASDF_<TOOL>_VERSION` for each tool pinned in a `.tool-versions` the round cannot see (above
/// the workspace, or the runner's home) and not in one inside the workspace.
fn asdf_pins(ctx: &Ctx<'_>) -> Vec<(String, Value)> {
    let mut inside: Vec<String> = Vec::new();
    let mut pins: Vec<(String, Value)> = Vec::new();
    let files = ctx
        .workspace
        .ancestors()
        .map(Path::to_path_buf)
        .chain(ctx.home.clone())
        .map(|d| d.join(".tool-versions"));
    for f in files {
        let Some(text) = ctx.fs.read_small(&f, 16 * 1024) else {
            continue;
        };
        let visible = f.starts_with(ctx.workspace);
        for line in text.lines().take(MAX_TOOLS) {
            let mut words = line.split_whitespace();
            let (Some(tool), Some(version)) = (words.next(), words.next()) else {
                continue;
            };
            let name_ok = tool
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            let version_ok = version
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || ".-_+".contains(c));
            if tool.starts_with('#') || !name_ok || !version_ok || version.len() > 64 {
                continue;
            }
            let var = format!(
                "ASDF_{}_VERSION",
                tool.to_ascii_uppercase().replace('-', "_")
            );
            if visible {
                inside.push(var);
            } else if !inside.contains(&var) && !pins.iter().any(|(n, _)| *n == var) {
                pins.push((var, Value::Host(version.to_owned())));
            }
        }
    }
    pins
}
