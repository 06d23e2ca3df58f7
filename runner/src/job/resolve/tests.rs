//! The resolver on real temporary trees: what it follows, what it refuses, and that it agrees
//! with `canonicalize` wherever it follows.
//!
//! Links the tests make belong to the user running them, who is not root in CI's unprivileged
//! pass: where a test is about following, its trees trust that user too ([`World::trusted`]), so
//! the links stand for root's own system links; the rule itself (root alone) is tested with
//! [`WritableTrees::none`] and links made to belong to someone else.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use super::*;

/// A temporary world: `ws/` (a writable tree in most tests), `host/` (outside any tree, with a
/// file in it), `out/` (outside, where user links live).
struct World {
    _dir: tempfile::TempDir,
    root: PathBuf,
    ws: PathBuf,
    host: PathBuf,
    out: PathBuf,
}

impl World {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let (ws, host, out) = (root.join("ws"), root.join("host"), root.join("out"));
        for d in [&ws, &host, &out] {
            std::fs::create_dir(d).unwrap();
        }
        std::fs::write(host.join("secret"), "s").unwrap();
        Self {
            _dir: dir,
            root,
            ws,
            host,
            out,
        }
    }

    /// `ws/` writable; links of the test's user followed elsewhere (as root's would be).
    fn trees(&self) -> WritableTrees {
        WritableTrees::new([self.ws.clone()]).trusting(&owners())
    }

    /// No tree known; links of the test's user followed (as root's would be).
    fn trusted(&self) -> WritableTrees {
        WritableTrees::none().trusting(&owners())
    }
}

/// Root and the test's own user.
fn owners() -> Vec<u32> {
    vec![0, nix::unistd::geteuid().as_raw()]
}

/// A uid that is not the test's (to make a link or directory someone else's, as root).
const SOMEONE_ELSE: u32 = 65534;

/// Makes `path` (not followed) belong to [`SOMEONE_ELSE`] when the test runs as root; otherwise it
/// belongs to the test's user already, who is not root.
fn not_roots(path: &Path) -> u32 {
    if nix::unistd::geteuid().is_root() {
        std::os::unix::fs::lchown(path, Some(SOMEONE_ELSE), Some(SOMEONE_ELSE)).unwrap();
        SOMEONE_ELSE
    } else {
        nix::unistd::geteuid().as_raw()
    }
}

fn untrusted(r: Result<PathBuf, ResolveError>, link: &Path) -> (String, String) {
    match r {
        Err(e @ ResolveError::UntrustedLink { .. }) => {
            let ResolveError::UntrustedLink {
                link: l, planted, ..
            } = &e
            else {
                unreachable!()
            };
            assert_eq!(l, link, "{e}");
            (planted.why.clone(), e.to_string())
        }
        other => panic!("want a refusal of `{}`, got {other:?}", link.display()),
    }
}

fn refused_at(r: Result<PathBuf, ResolveError>, link: &Path, tree: &Path) -> String {
    match r {
        Err(e @ ResolveError::LinkInWritableTree { .. }) => {
            let ResolveError::LinkInWritableTree {
                link: l, tree: t, ..
            } = &e
            else {
                unreachable!()
            };
            assert_eq!((l.as_path(), t.as_path()), (link, tree), "{e}");
            e.to_string()
        }
        other => panic!("want a refusal at `{}`, got {other:?}", link.display()),
    }
}

#[test]
fn a_link_inside_a_writable_tree_is_refused_and_named() {
    let w = World::new();
    let link = w.ws.join("cache");
    symlink(&w.host, &link).unwrap();
    let msg = refused_at(resolve(&link, &w.root, &w.trees()), &link, &w.ws);
    assert!(
        msg.contains(&format!(
            "`{}` is a symlink (to `{}`)",
            link.display(),
            w.host.display()
        )),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("inside the writable tree `{}`", w.ws.display())),
        "{msg}"
    );
    assert!(msg.contains("give the real path"), "{msg}");
    // Relative to a base inside the tree, too.
    refused_at(resolve(Path::new("cache"), &w.ws, &w.trees()), &link, &w.ws);
}

#[test]
fn the_same_link_outside_any_writable_tree_is_followed() {
    let w = World::new();
    let link = w.ws.join("cache");
    symlink(&w.host, &link).unwrap();
    let got = resolve(&link, &w.root, &w.trusted()).unwrap();
    assert_eq!(got, w.host);
    assert_eq!(got, link.canonicalize().unwrap());
    // And a link in `out/` when only `ws/` is writable.
    let user = w.out.join("src");
    symlink(&w.host, &user).unwrap();
    assert_eq!(resolve(&user, &w.root, &w.trees()).unwrap(), w.host);
}

#[test]
fn a_link_in_the_middle_of_the_path_is_refused() {
    let w = World::new();
    let link = w.ws.join("sub");
    symlink(&w.host, &link).unwrap();
    let deep = link.join("secret");
    refused_at(resolve(&deep, &w.root, &w.trees()), &link, &w.ws);
    // A real directory in the tree, then the link below it.
    std::fs::create_dir(w.ws.join("a")).unwrap();
    let inner = w.ws.join("a/b");
    symlink("../../host", &inner).unwrap();
    refused_at(
        resolve(&inner.join("secret"), &w.root, &w.trees()),
        &inner,
        &w.ws,
    );
}

#[test]
fn the_location_of_a_link_is_judged_by_its_parents_real_path() {
    let w = World::new();
    // `out/ws -> ../ws` is the user's (outside the tree) and followed; `ws/cache` behind it is
    // inside the tree once the walk is there, and refused.
    let user = w.out.join("ws");
    symlink("../ws", &user).unwrap();
    let planted = w.ws.join("cache");
    symlink(&w.host, &planted).unwrap();
    refused_at(
        resolve(&user.join("cache"), &w.root, &w.trees()),
        &planted,
        &w.ws,
    );
    // The tree's root reached through the user's link is fine.
    assert_eq!(resolve(&user, &w.root, &w.trees()).unwrap(), w.ws);
    // A link outside the tree pointing at a link inside it: the inner one is refused.
    let hop = w.out.join("hop");
    symlink(&planted, &hop).unwrap();
    refused_at(resolve(&hop, &w.root, &w.trees()), &planted, &w.ws);
}

#[test]
fn dotdot_after_a_link_is_taken_against_the_real_path() {
    let w = World::new();
    std::fs::create_dir_all(w.host.join("a/b")).unwrap();
    let link = w.out.join("l");
    symlink(w.host.join("a/b"), &link).unwrap();
    let given = link.join("..");
    assert_eq!(
        resolve(&given, &w.root, &w.trees()).unwrap(),
        w.host.join("a")
    );
    assert_eq!(given.canonicalize().unwrap(), w.host.join("a"));
    // `..` above `/` stays at `/`; `.` is dropped.
    assert_eq!(
        resolve(Path::new("/../.././"), &w.root, &w.trees()).unwrap(),
        Path::new("/")
    );
    // Lexical `..` is not what happens: `out/l/../secret` is not `out/secret`.
    std::fs::write(w.host.join("a/x"), "x").unwrap();
    assert_eq!(
        resolve(&link.join("../x"), &w.root, &w.trees()).unwrap(),
        w.host.join("a/x")
    );
}

#[test]
fn relative_link_targets_are_taken_from_the_links_directory() {
    let w = World::new();
    std::fs::create_dir(w.out.join("d")).unwrap();
    let link = w.out.join("d/up");
    symlink("../../host/./secret", &link).unwrap();
    assert_eq!(
        resolve(&link, &w.root, &w.trees()).unwrap(),
        w.host.join("secret")
    );
    assert_eq!(link.canonicalize().unwrap(), w.host.join("secret"));
    // A chain of relative links.
    let a = w.out.join("a");
    symlink("d/up", &a).unwrap();
    assert_eq!(
        resolve(&a, &w.root, &w.trees()).unwrap(),
        w.host.join("secret")
    );
}

#[test]
fn loops_are_refused_not_followed_forever() {
    let w = World::new();
    let (a, b) = (w.out.join("a"), w.out.join("b"));
    symlink("b", &a).unwrap();
    symlink("a", &b).unwrap();
    let e = resolve(&a, &w.root, &w.trees()).unwrap_err();
    assert!(matches!(e, ResolveError::TooManyLinks { .. }), "{e}");
    assert!(e.to_string().contains("more than 40 symlinks"), "{e}");
    let me = w.out.join("me");
    symlink("me/x", &me).unwrap();
    let e = resolve(&me, &w.root, &w.trees()).unwrap_err();
    assert!(matches!(e, ResolveError::TooManyLinks { .. }), "{e}");
}

#[test]
fn the_hop_limit_is_forty() {
    let w = World::new();
    // l0 -> host, l1 -> l0, ..., l39 -> l38: 40 links on the way from l39.
    symlink(&w.host, w.out.join("l0")).unwrap();
    for i in 1..=40 {
        symlink(format!("l{}", i - 1), w.out.join(format!("l{i}"))).unwrap();
    }
    let forty = w.out.join("l39");
    assert_eq!(resolve(&forty, &w.root, &w.trees()).unwrap(), w.host);
    let one_more = w.out.join("l40");
    let e = resolve(&one_more, &w.root, &w.trees()).unwrap_err();
    assert!(matches!(e, ResolveError::TooManyLinks { .. }), "{e}");
}

#[test]
fn the_result_must_exist_and_files_have_no_children() {
    let w = World::new();
    let e = resolve(&w.host.join("nope/x"), &w.root, &w.trees()).unwrap_err();
    assert!(
        matches!(&e, ResolveError::Missing { at } if *at == w.host.join("nope")),
        "{e}"
    );
    let e = resolve(&w.host.join("secret/x"), &w.root, &w.trees()).unwrap_err();
    assert!(matches!(&e, ResolveError::NotDirectory { .. }), "{e}");
    let e = resolve(&w.host.join("secret/.."), &w.root, &w.trees()).unwrap_err();
    assert!(matches!(&e, ResolveError::NotDirectory { .. }), "{e}");
    // A dangling link outside the trees: missing at its target.
    let dangling = w.out.join("dangling");
    symlink(w.host.join("gone"), &dangling).unwrap();
    let e = resolve(&dangling, &w.root, &w.trees()).unwrap_err();
    assert!(
        matches!(&e, ResolveError::Missing { at } if *at == w.host.join("gone")),
        "{e}"
    );
}

#[test]
fn relative_paths_need_an_absolute_base() {
    let w = World::new();
    assert_eq!(
        resolve(Path::new("host/secret"), &w.root, &w.trees()).unwrap(),
        w.host.join("secret")
    );
    let e = resolve(Path::new("x"), Path::new("rel"), &w.trees()).unwrap_err();
    assert!(matches!(e, ResolveError::RelativeBase { .. }), "{e}");
}

#[test]
fn real_paths_inside_a_tree_and_nested_tree_roots_are_fine() {
    let w = World::new();
    std::fs::create_dir(w.ws.join("sub")).unwrap();
    let trees = w.trees().with([w.ws.join("sub")]);
    assert_eq!(resolve(&w.ws, &w.root, &trees).unwrap(), w.ws);
    assert_eq!(
        resolve(&w.ws.join("sub"), &w.root, &trees).unwrap(),
        w.ws.join("sub")
    );
    // The innermost tree is the one named.
    assert_eq!(
        trees.containing(&w.ws.join("sub/x")).unwrap(),
        Some(w.ws.join("sub"))
    );
    assert_eq!(
        trees.containing(&w.ws.join("x")).unwrap(),
        Some(w.ws.clone())
    );
    assert_eq!(trees.containing(&w.root).unwrap(), None);
}

#[test]
fn a_long_or_odd_target_is_escaped_and_bounded_in_the_message() {
    let w = World::new();
    let link = w.ws.join("odd");
    let target = format!("/{}\n`x", "a".repeat(300));
    symlink(&target, &link).unwrap();
    let msg = refused_at(resolve(&link, &w.root, &w.trees()), &link, &w.ws);
    assert!(!msg.contains('\n'), "{msg}");
    assert!(msg.contains('…'), "{msg}");
}

#[test]
fn system_style_links_are_followed() {
    let w = World::new();
    // `run/` and `var/run -> ../run`, as on a Debian host.
    std::fs::create_dir_all(w.root.join("run/app")).unwrap();
    std::fs::create_dir(w.root.join("var")).unwrap();
    symlink("../run", w.root.join("var/run")).unwrap();
    let trees = WritableTrees::new([w.ws.clone(), w.out.clone()]).trusting(&owners());
    assert_eq!(
        resolve(&w.root.join("var/run/app"), &w.root, &trees).unwrap(),
        w.root.join("run/app")
    );
}

/// Issue 25: a link a round planted is refused by the rule that needs no memory — no tree is
/// known (another state store, `ralph sandbox exec`), but the link is not root's. The message
/// names the link, its target and its owner, and suggests the resolved path.
#[test]
fn a_link_that_is_not_roots_is_refused_without_any_known_tree() {
    let w = World::new();
    std::fs::create_dir(w.ws.join("packages")).unwrap();
    let link = w.ws.join("packages/foo");
    symlink(&w.host, &link).unwrap();
    let owner = not_roots(&link);
    let (why, msg) = untrusted(resolve(&link, &w.root, &WritableTrees::none()), &link);
    assert_eq!(why, format!("it belongs to uid {owner}"));
    assert!(
        msg.contains(&format!(
            "`{}` is a symlink (to `{}`) that a round could have planted",
            link.display(),
            w.host.display()
        )),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("give the resolved path `{}`", w.host.display())),
        "{msg}"
    );
    // Below it, and relative to a base, the same.
    untrusted(
        resolve(&link.join("secret"), &w.root, &WritableTrees::none()),
        &link,
    );
    untrusted(
        resolve(Path::new("packages/foo"), &w.ws, &WritableTrees::none()),
        &link,
    );
    // A dangling one: no suggestion.
    let dangling = w.ws.join("gone");
    symlink(w.host.join("nope"), &dangling).unwrap();
    not_roots(&dangling);
    let (_, msg) = untrusted(
        resolve(&dangling, &w.root, &WritableTrees::none()),
        &dangling,
    );
    assert!(msg.contains("(it does not resolve)"), "{msg}");
}

/// A link its owner is trusted with is still refused where someone else could have put it: in a
/// directory others can write (without the sticky bit), or below a directory someone else owns.
#[test]
fn a_trusted_link_where_others_could_have_put_it_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let w = World::new();
    let shared = w.out.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let link = shared.join("l");
    symlink(&w.host, &link).unwrap();
    let (why, _) = untrusted(resolve(&link, &w.root, &w.trusted()), &link);
    assert_eq!(
        why,
        format!(
            "`{}` can be changed by other users (mode 777)",
            shared.display()
        )
    );
    // Sticky (like /tmp): only the link's owner, the directory's and root can replace it.
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    assert_eq!(resolve(&link, &w.root, &w.trusted()).unwrap(), w.host);
    // A directory on the way that belongs to someone else.
    let theirs = w.out.join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    let inner = theirs.join("l");
    symlink(&w.host, &inner).unwrap();
    let me = nix::unistd::geteuid().as_raw();
    let (trusted, other) = if me == 0 {
        std::os::unix::fs::lchown(&theirs, Some(SOMEONE_ELSE), None).unwrap();
        (vec![0], SOMEONE_ELSE)
    } else {
        // The test's user trusted alone: /tmp (root's) is someone else's then.
        (vec![me], 0)
    };
    let (why, _) = untrusted(
        resolve(&inner, &w.root, &WritableTrees::none().trusting(&trusted)),
        &inner,
    );
    assert!(why.ends_with(&format!("belongs to uid {other}")), "{why}");
}

/// The host's own system links (root's, in root's directories) are followed with the real rule.
#[test]
fn this_hosts_system_links_are_followed() {
    let mut checked = 0;
    for (link, target) in [
        ("/var/run", "/run"),
        ("/bin", "/usr/bin"),
        ("/lib", "/usr/lib"),
    ] {
        let Ok(m) = std::fs::symlink_metadata(link) else {
            continue;
        };
        if !m.file_type().is_symlink() {
            continue;
        }
        assert_eq!(
            resolve(Path::new(link), Path::new("/"), &WritableTrees::none()).unwrap(),
            Path::new(target).canonicalize().unwrap(),
            "{link}"
        );
        checked += 1;
    }
    assert!(checked > 0, "no system symlink on this host to check");
}

/// A root runner's round on a root-owned tree leaves root-owned links (the idmapped workspace,
/// docker's uid 0): the tree's mark, set before each run, refuses them whichever store a later
/// job uses. (Not root: nothing is marked, and the links are refused for not being root's.)
#[test]
fn a_link_in_a_marked_tree_is_refused_even_when_root_owns_it() {
    let w = World::new();
    std::fs::create_dir(w.ws.join("packages")).unwrap();
    let link = w.ws.join("packages/foo");
    symlink(&w.host, &link).unwrap();
    super::super::tree_mark::mark(&w.ws).unwrap();
    if !nix::unistd::geteuid().is_root() {
        assert!(!super::super::tree_mark::is_marked(&w.ws));
        return;
    }
    // Root's link, root's directories: followed until the tree is marked...
    let (why, msg) = untrusted(resolve(&link, &w.root, &WritableTrees::none()), &link);
    assert_eq!(
        why,
        format!(
            "it lies in `{}`, a tree rounds have written (marked `trusted.ralph.writable_tree`)",
            w.ws.display()
        )
    );
    assert!(
        msg.contains(&format!("give the resolved path `{}`", w.host.display())),
        "{msg}"
    );
    // ...and a link beside the tree is not in it.
    let beside = w.out.join("l");
    symlink(&w.host, &beside).unwrap();
    assert_eq!(
        resolve(&beside, &w.root, &WritableTrees::none()).unwrap(),
        w.host
    );
}

#[test]
fn trees_keep_their_first_order_and_drop_duplicates_and_relative_paths() {
    let mut t = WritableTrees::new(["/b", "/a", "rel", "/b", "/a//", "/c/./d"].map(PathBuf::from));
    t.extend(["/c/d", "/e", "/a"].map(PathBuf::from));
    let roots: Vec<&str> = t.roots().iter().filter_map(|r| r.to_str()).collect();
    assert_eq!(roots, ["/b", "/a", "/c/./d", "/e"]);
    assert_eq!(
        t.with([PathBuf::from("/f"), PathBuf::from("/b")])
            .roots()
            .len(),
        5
    );
    assert_eq!(t.roots().len(), 4, "`with` leaves the original as it was");
    // A store's worth of workspaces, each once (the check is by hash: this is quick).
    let many = WritableTrees::new(
        (0..50_000)
            .chain(0..50_000)
            .map(|i| PathBuf::from(format!("/w/{i}"))),
    );
    assert_eq!(many.roots().len(), 50_000);
    assert_eq!(
        many.containing(Path::new("/w/49999/x")).unwrap(),
        Some(PathBuf::from("/w/49999"))
    );
    // Held trees are found by the directory's ancestors, whatever form they were given in.
    assert_eq!(
        t.containing(Path::new("/c/d/e")).unwrap(),
        Some(PathBuf::from("/c/./d"))
    );
    assert_eq!(
        t.containing(Path::new("/a/x")).unwrap(),
        Some(PathBuf::from("/a"))
    );
    assert_eq!(t.containing(Path::new("/ab")).unwrap(), None);
}

fn store_of(trees: &[&Path], down: bool) -> Arc<crate::job::tree_lookup::FakeTrees> {
    crate::job::tree_lookup::FakeTrees::new(trees, down)
}

#[test]
fn a_link_in_a_tree_the_store_knows_is_refused_and_the_innermost_named() {
    let w = World::new();
    std::fs::create_dir(w.ws.join("sub")).unwrap();
    let link = w.ws.join("sub/cache");
    symlink(&w.host, &link).unwrap();
    let src = store_of(&[&w.ws, &w.ws.join("sub")], false);
    let trees = WritableTrees::stored(src.clone()).trusting(&owners());
    refused_at(resolve(&link, &w.root, &trees), &link, &w.ws.join("sub"));
    // Held here and in the store: the innermost of both is named.
    let held = trees.with([w.ws.clone()]);
    refused_at(resolve(&link, &w.root, &held), &link, &w.ws.join("sub"));
    // The same link is followed where the store knows no tree above it.
    let other = WritableTrees::stored(store_of(&[&w.out], false)).trusting(&owners());
    assert_eq!(resolve(&link, &w.root, &other).unwrap(), w.host);
    assert_eq!(other.lookup_failure(), None);
}

#[test]
fn the_store_is_asked_nothing_when_the_walk_meets_no_link() {
    let w = World::new();
    let src = store_of(&[&w.ws], false);
    let trees = WritableTrees::stored(src.clone()).trusting(&owners());
    assert_eq!(resolve(&w.ws, &w.root, &trees).unwrap(), w.ws);
    assert_eq!(
        resolve(&w.host.join("secret"), &w.root, &trees).unwrap(),
        w.host.join("secret")
    );
    assert_eq!(src.questions(), 0);
}

#[test]
fn a_store_that_cannot_answer_refuses_the_link_and_says_it_is_its_fault() {
    let w = World::new();
    let link = w.out.join("src");
    symlink(&w.host, &link).unwrap();
    let trees = WritableTrees::stored(store_of(&[], true)).trusting(&owners());
    // Followed by the rule without memory, had the store answered: refused now (fail closed).
    match resolve(&link, &w.root, &trees) {
        Err(e @ ResolveError::TreesUnknown { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(&link.display().to_string()), "{msg}");
            assert!(msg.contains("the store is down"), "{msg}");
        }
        other => panic!("want TreesUnknown, got {other:?}"),
    }
    assert_eq!(trees.lookup_failure().as_deref(), Some("the store is down"));
    // No link on the way: no question, and the path resolves.
    let quiet = WritableTrees::stored(store_of(&[], true));
    assert_eq!(resolve(&w.ws, &w.root, &quiet).unwrap(), w.ws);
    assert_eq!(quiet.lookup_failure(), None);
}
