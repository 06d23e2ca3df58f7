//! Rust: rustup's proxies (`~/.cargo/bin/cargo` is `rustup` under another name) need
//! `RUSTUP_HOME` (toolchains, `settings.toml`), granted read-only; cargo writes its registry and
//! git checkouts into `CARGO_HOME`, redirected to the round's private HOME (`$HOME/.cargo`, where
//! a `--cache ~/.cargo/registry` lands too). `~/.cargo` itself is never shown: only its `bin`, so
//! `credentials.toml` and `config.toml` (which may hold a registry token) stay out.

use std::path::Path;

use super::detect::Ctx;
use super::grant::{Kind, Refused, Toolchain, Value};

/// rustup's own variables passed on when the runner has them.
const RUSTUP_PASSED: &[&str] = &["RUSTUP_TOOLCHAIN", "RUSTUP_AUTO_INSTALL"];

/// Where cargo writes, inside the round's private HOME.
const CARGO_HOME_IN_HOME: &str = ".cargo";

/// `dir` holds `rustup` (and its proxies).
pub(super) fn rustup(ctx: &Ctx<'_>, dir: &Path, refused: &mut Vec<Refused>) -> Option<Toolchain> {
    if !ctx.fs.is_executable(&dir.join("rustup")) {
        return None;
    }
    let mut read = ctx.with_real(dir);
    // The proxies may be links to a `rustup` elsewhere: its directory must be there too.
    if let Some(real) = ctx
        .fs
        .canonicalize(&dir.join("rustup"))
        .and_then(|r| r.parent().map(Path::to_path_buf))
    {
        if !read.contains(&real) {
            read.push(real);
        }
    }
    let mut vars = vec![("CARGO_HOME".to_owned(), Value::InHome(CARGO_HOME_IN_HOME))];
    let mut detail = String::new();
    match ctx.dir_of("RUSTUP_HOME", ".rustup") {
        Some(home) if ctx.fs.is_dir(&home) => {
            detail = default_toolchain(ctx, &home).unwrap_or_default();
            read.extend(ctx.with_real(&home));
            vars.insert(
                0,
                (
                    "RUSTUP_HOME".to_owned(),
                    Value::Host(home.display().to_string()),
                ),
            );
        }
        Some(home) => refused.push(Refused {
            path: home,
            why: "rustup's home does not exist on the runner: set RUSTUP_HOME for the runner"
                .to_owned(),
        }),
        None => {}
    }
    for name in RUSTUP_PASSED {
        if let Some(v) = ctx.var(name) {
            vars.push(((*name).to_owned(), Value::Host(v.to_owned())));
        }
    }
    Some(Toolchain {
        kind: Kind::Rustup,
        detail,
        found_at: dir.to_path_buf(),
        read,
        vars,
    })
}

/// rustup's default toolchain, from `settings.toml`.
fn default_toolchain(ctx: &Ctx<'_>, home: &Path) -> Option<String> {
    let text = ctx.fs.read_small(&home.join("settings.toml"), 64 * 1024)?;
    let table: toml::Table = text.parse().ok()?;
    table
        .get("default_toolchain")?
        .as_str()
        .filter(|s| s.len() <= 128)
        .map(str::to_owned)
}

/// `dir` holds a `cargo` that is not rustup's: a stand-alone install (its prefix, with
/// `lib/rustlib`, is granted), or the runner's `CARGO_HOME/bin` of `cargo install`ed tools.
pub(super) fn cargo(ctx: &Ctx<'_>, dir: &Path, _: &mut Vec<Refused>) -> Option<Toolchain> {
    let cargo_bin = ctx
        .dir_of("CARGO_HOME", ".cargo")
        .map(|c| c.join("bin"))
        .is_some_and(|b| ctx.same_dir(&b, dir));
    let exe = dir.join("cargo");
    let prefix = ctx
        .fs
        .is_executable(&exe)
        .then(|| ctx.fs.canonicalize(&exe))
        .flatten()
        .and_then(|real| real.parent()?.parent().map(Path::to_path_buf))
        .filter(|p| ctx.fs.is_dir(&p.join("lib/rustlib")));
    if prefix.is_none() && !cargo_bin {
        return None;
    }
    let mut read = ctx.with_real(dir);
    read.extend(prefix.iter().cloned());
    Some(Toolchain {
        kind: Kind::Cargo,
        detail: prefix.map(|p| p.display().to_string()).unwrap_or_default(),
        found_at: dir.to_path_buf(),
        read,
        vars: vec![("CARGO_HOME".to_owned(), Value::InHome(CARGO_HOME_IN_HOME))],
    })
}
