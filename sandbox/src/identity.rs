//! Who a round's processes are on the host (SPEC §5 "The host boundary": they never hold host
//! uid 0). A non-root runner's rounds keep its uid (inside a user namespace). A root runner's
//! rounds in `read-only` and `workspace-write` run as the workspace's owner when that is not
//! root, and otherwise as the *agent user*: `agent_user` in the service's config or
//! `--agent-user`, by default the system user `ralph-agent` (`systemd/ralph.sysusers`) when it
//! exists, else `nobody` (65534:65534). The agent user never owns the workspace: the workspace is
//! mounted *idmapped* for it, so what it creates belongs, on the host, to the workspace's owner.
//!
//! Names are looked up in `/etc/passwd` and `/etc/group` directly (the binary is static: no NSS).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::SandboxError;

/// The default agent user's name.
pub const DEFAULT_AGENT_USER: &str = "ralph-agent";

/// The fallback when [`DEFAULT_AGENT_USER`] does not exist: `nobody`/`nogroup`.
pub const NOBODY: u32 = 65534;

/// A uid/gid pair and where it came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ids {
    /// The uid.
    pub uid: u32,
    /// The primary gid.
    pub gid: u32,
    /// A name for messages (`ralph-agent`, `uid 1000`, ...).
    pub name: String,
}

/// Looks `name` up in a passwd-format file: (uid, gid).
fn passwd_entry(passwd: &str, name: &str) -> Option<(u32, u32)> {
    passwd.lines().find_map(|line| {
        let mut f = line.split(':');
        if f.next()? != name {
            return None;
        }
        let _password = f.next()?;
        let uid = f.next()?.parse().ok()?;
        let gid = f.next()?.parse().ok()?;
        Some((uid, gid))
    })
}

/// Looks group `name` up in a group-format file.
fn group_entry(group: &str, name: &str) -> Option<u32> {
    group.lines().find_map(|line| {
        let mut f = line.split(':');
        if f.next()? != name {
            return None;
        }
        let _password = f.next()?;
        f.next()?.parse().ok()
    })
}

fn invalid(message: String) -> SandboxError {
    SandboxError::invalid("agent-user", message)
}

/// Resolves an agent user given as `NAME`, `UID` or `UID:GID` (a name's gid is its primary
/// group; a bare uid's gid is the same number), with `/etc/passwd` and `/etc/group` from `etc`.
/// `None` gives the default. uid 0 and gid 0 are refused.
pub fn agent_user(spec: Option<&str>, etc: &Path) -> Result<Ids, SandboxError> {
    let passwd = std::fs::read_to_string(etc.join("passwd")).unwrap_or_default();
    let ids = match spec.map(str::trim) {
        None | Some("") => match passwd_entry(&passwd, DEFAULT_AGENT_USER) {
            Some((uid, gid)) => Ids {
                uid,
                gid,
                name: DEFAULT_AGENT_USER.to_owned(),
            },
            None => {
                let group = std::fs::read_to_string(etc.join("group")).unwrap_or_default();
                let gid = group_entry(&group, "nogroup")
                    .or_else(|| group_entry(&group, "nobody"))
                    .unwrap_or(NOBODY);
                Ids {
                    uid: NOBODY,
                    gid,
                    name: format!("nobody (no user {DEFAULT_AGENT_USER} on this host)"),
                }
            }
        },
        Some(s) if s.chars().next().is_some_and(|c| c.is_ascii_digit()) => {
            let (u, g) = s.split_once(':').unwrap_or((s, s));
            let parse = |v: &str, what: &str| {
                v.parse::<u32>()
                    .map_err(|_| invalid(format!("`{s}`: {what} `{v}` is not a number")))
            };
            Ids {
                uid: parse(u, "uid")?,
                gid: parse(g, "gid")?,
                name: format!("uid {u}"),
            }
        }
        Some(name) => match passwd_entry(&passwd, name) {
            Some((uid, gid)) => Ids {
                uid,
                gid,
                name: name.to_owned(),
            },
            None => {
                return Err(invalid(format!(
                    "no user `{name}` in {}/passwd (create it, e.g. with systemd/ralph.sysusers, or give a uid)",
                    etc.display()
                )));
            }
        },
    };
    if ids.uid == 0 || ids.gid == 0 {
        return Err(invalid(format!(
            "`{}` is uid {} gid {}: rounds never run as root (uid or gid 0)",
            ids.name, ids.uid, ids.gid
        )));
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn etc(passwd: &str, group: &str) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("passwd"), passwd).unwrap();
        std::fs::write(d.path().join("group"), group).unwrap();
        d
    }

    #[test]
    fn the_default_is_ralph_agent_then_nobody() {
        let d = etc(
            "root:x:0:0::/root:/bin/sh\nralph-agent:x:990:985::/:/usr/sbin/nologin\n",
            "",
        );
        let ids = agent_user(None, d.path()).unwrap();
        assert_eq!(
            (ids.uid, ids.gid, ids.name.as_str()),
            (990, 985, "ralph-agent")
        );
        let d = etc("root:x:0:0::/root:/bin/sh\n", "nogroup:x:65534:\n");
        let ids = agent_user(None, d.path()).unwrap();
        assert_eq!((ids.uid, ids.gid), (65534, 65534));
        assert!(ids.name.contains("nobody"), "{}", ids.name);
    }

    #[test]
    fn names_and_numbers_resolve_and_root_is_refused() {
        let d = etc(
            "ci:x:1001:1002::/home/ci:/bin/sh\nroot:x:0:0::/root:/bin/sh\n",
            "",
        );
        assert_eq!(agent_user(Some("ci"), d.path()).unwrap().uid, 1001);
        let ids = agent_user(Some("2000:3000"), d.path()).unwrap();
        assert_eq!((ids.uid, ids.gid), (2000, 3000));
        assert_eq!(agent_user(Some("2000"), d.path()).unwrap().gid, 2000);
        for bad in ["root", "0", "1000:0", "nosuch", "12x"] {
            let e = agent_user(Some(bad), d.path()).unwrap_err();
            assert!(
                matches!(&e, SandboxError::InvalidRequest { field, .. } if field == "agent-user"),
                "{bad}: {e}"
            );
        }
    }
}
