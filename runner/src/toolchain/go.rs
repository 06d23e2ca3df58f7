//! Go: a Go installation (`GOROOT`, e.g. `~/sdk/go1.22/bin` or `~/.local/go/bin` on the PATH) is
//! granted read-only; what Go writes is redirected into the round's private HOME, where it
//! would go by default (`GOPATH=$HOME/go`, `GOMODCACHE=$HOME/go/pkg/mod`,
//! `GOCACHE=$HOME/.cache/go-build`), so a `--cache ~/go/pkg/mod` lands where Go looks.
//! `GOPATH/bin` on the PATH (tools from `go install`) is granted read-only.

use std::path::Path;

use super::detect::Ctx;
use super::grant::{Kind, Refused, Toolchain, Value};

/// Go's variables passed on when the runner has them.
const GO_PASSED: &[&str] = &["GOTOOLCHAIN"];

/// `dir` holds the `go` of an installation (its root has `src/runtime`, or `VERSION` and
/// `pkg/tool`).
pub(super) fn goroot(ctx: &Ctx<'_>, dir: &Path, _: &mut Vec<Refused>) -> Option<Toolchain> {
    let go = dir.join("go");
    if !ctx.fs.is_executable(&go) {
        return None;
    }
    let root = ctx.fs.canonicalize(&go)?.parent()?.parent()?.to_path_buf();
    let is_root = ctx.fs.is_dir(&root.join("src/runtime"))
        || (ctx.fs.is_file(&root.join("VERSION")) && ctx.fs.is_dir(&root.join("pkg/tool")));
    if !is_root {
        return None;
    }
    let mut read = ctx.with_real(dir);
    read.push(root.clone());
    let mut vars = vec![
        ("GOROOT".to_owned(), Value::Host(root.display().to_string())),
        ("GOPATH".to_owned(), Value::InHome("go")),
        ("GOMODCACHE".to_owned(), Value::InHome("go/pkg/mod")),
        ("GOCACHE".to_owned(), Value::InHome(".cache/go-build")),
    ];
    for name in GO_PASSED {
        if let Some(v) = ctx.var(name) {
            vars.push(((*name).to_owned(), Value::Host(v.to_owned())));
        }
    }
    let detail = ctx
        .fs
        .read_small(&root.join("VERSION"), 256)
        .and_then(|v| v.lines().next().map(str::to_owned))
        .filter(|v| v.starts_with("go") && v.len() <= 32)
        .unwrap_or_default();
    Some(Toolchain {
        kind: Kind::Go,
        detail,
        found_at: dir.to_path_buf(),
        read,
        vars,
    })
}

/// `dir` is the runner's `GOPATH/bin` (its first `GOPATH` entry, default `~/go`).
pub(super) fn go_bin(ctx: &Ctx<'_>, dir: &Path, _: &mut Vec<Refused>) -> Option<Toolchain> {
    let gopath = ctx
        .var("GOPATH")
        .and_then(|v| v.split(':').next())
        .map(std::path::PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| ctx.in_home("go"))?;
    if !ctx.same_dir(&gopath.join("bin"), dir) || !ctx.fs.is_dir(dir) {
        return None;
    }
    Some(Toolchain {
        kind: Kind::GoBin,
        detail: String::new(),
        found_at: dir.to_path_buf(),
        read: ctx.with_real(dir),
        vars: Vec::new(),
    })
}
