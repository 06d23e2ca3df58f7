//! Node from nvm: `~/.nvm/versions/node/<v>/bin` on the PATH; the version's tree (node, npm and
//! the global packages under `lib/node_modules`) is granted read-only. npm's cache is already
//! the round's private `~/.npm`; `~/.npmrc` is never shown (it may hold `_authToken`): a round
//! that needs a registry gets its URL with `--env npm_config_registry`.

use std::path::Path;

use super::detect::Ctx;
use super::grant::{Kind, Refused, Toolchain, Value};

/// `dir` is `NVM_DIR/versions/node/<v>/bin`.
pub(super) fn nvm(ctx: &Ctx<'_>, dir: &Path, _: &mut Vec<Refused>) -> Option<Toolchain> {
    if dir.file_name()? != "bin" || !ctx.fs.is_executable(&dir.join("node")) {
        return None;
    }
    let version_dir = dir.parent()?;
    let flavour = version_dir.parent()?;
    let versions = flavour.parent()?;
    let nvm_dir = versions.parent()?;
    if versions.file_name()? != "versions"
        || !matches!(flavour.file_name()?.to_str()?, "node" | "io.js")
    {
        return None;
    }
    let known = ctx
        .dir_of("NVM_DIR", ".nvm")
        .is_some_and(|d| ctx.same_dir(&d, nvm_dir))
        || ctx.fs.is_file(&nvm_dir.join("nvm.sh"));
    if !known {
        return None;
    }
    let mut vars = vec![
        (
            "NVM_DIR".to_owned(),
            Value::Host(nvm_dir.display().to_string()),
        ),
        ("NVM_BIN".to_owned(), Value::Host(dir.display().to_string())),
    ];
    let inc = version_dir.join("include/node");
    if ctx.fs.is_dir(&inc) {
        vars.push(("NVM_INC".to_owned(), Value::Host(inc.display().to_string())));
    }
    Some(Toolchain {
        kind: Kind::Nvm,
        detail: version_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        found_at: dir.to_path_buf(),
        read: ctx.with_real(version_dir),
        vars,
    })
}
