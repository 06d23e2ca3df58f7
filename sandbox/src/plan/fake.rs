//! A fake host filesystem for planning tests: the paths it holds, their kind and owner, and
//! what the protected-path resolution and the agent user lookup answer.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::probe::{FsProbe, Kind};
use crate::error::SandboxError;
use crate::identity::Ids;
use crate::policy::Policy;
use crate::protect::ProtectedSet;
use crate::sockets;
use crate::spec::SandboxRequest;

#[derive(Clone, Debug)]
struct Entry {
    kind: Kind,
    owner: (u32, u32),
    target: Option<PathBuf>,
}

/// What [`FsProbe::protected`] answers for a request.
pub(crate) type ProtectedFn = fn(&SandboxRequest) -> Result<ProtectedSet, SandboxError>;

/// A host that has only what the test put there.
#[derive(Debug)]
pub(crate) struct FakeFs {
    entries: BTreeMap<PathBuf, Entry>,
    /// What [`FsProbe::protected`] answers (`None`: an empty set).
    pub protected: Option<ProtectedFn>,
    /// What [`FsProbe::agent_user`] answers.
    pub agent: Ids,
}

impl Default for FakeFs {
    fn default() -> Self {
        Self {
            entries: BTreeMap::new(),
            protected: None,
            agent: Ids {
                uid: 2000,
                gid: 2000,
                name: "fake-agent".into(),
            },
        }
    }
}

impl FakeFs {
    fn put(mut self, path: &str, kind: Kind, owner: (u32, u32), target: Option<&str>) -> Self {
        self.entries.insert(
            PathBuf::from(path),
            Entry {
                kind,
                owner,
                target: target.map(PathBuf::from),
            },
        );
        self
    }

    /// A directory owned by `owner`.
    pub fn dir(self, path: &str, owner: (u32, u32)) -> Self {
        self.put(path, Kind::Dir, owner, None)
    }

    /// A plain file owned by root.
    pub fn file(self, path: &str) -> Self {
        self.put(path, Kind::Other, (0, 0), None)
    }

    /// A unix socket owned by root.
    pub fn socket(self, path: &str) -> Self {
        self.put(path, Kind::Socket, (0, 0), None)
    }

    /// A symlink to `target` (relative to its directory, or absolute).
    pub fn symlink(self, path: &str, target: &str) -> Self {
        self.put(path, Kind::Symlink, (0, 0), Some(target))
    }

    /// `path` with symlinks followed (at most a few times), if it leads somewhere.
    fn follow(&self, path: &Path) -> Option<&Entry> {
        let mut at = path.to_path_buf();
        for _ in 0..8 {
            let e = self.entries.get(&at)?;
            match (&e.kind, &e.target) {
                (Kind::Symlink, Some(t)) => {
                    at = at.parent().map_or_else(|| t.clone(), |d| d.join(t));
                }
                _ => return Some(e),
            }
        }
        None
    }
}

impl FsProbe for FakeFs {
    fn kind(&self, path: &Path) -> Option<Kind> {
        self.entries.get(path).map(|e| e.kind)
    }

    fn is_dir(&self, path: &Path) -> bool {
        self.follow(path).is_some_and(|e| e.kind == Kind::Dir)
    }

    fn read_link(&self, path: &Path) -> Option<PathBuf> {
        self.entries.get(path).and_then(|e| e.target.clone())
    }

    fn owner(&self, path: &Path) -> std::io::Result<(u32, u32)> {
        self.follow(path)
            .map(|e| e.owner)
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
    }

    fn first_symlink(&self, path: &Path) -> Result<Option<PathBuf>, String> {
        Ok(path
            .ancestors()
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .find(|p| self.kind(p) == Some(Kind::Symlink))
            .map(Path::to_path_buf))
    }

    fn scan_sockets(&self, trees: &[PathBuf]) -> sockets::Found {
        sockets::Found {
            sockets: self
                .entries
                .iter()
                .filter(|(p, e)| e.kind == Kind::Socket && trees.iter().any(|t| p.starts_with(t)))
                .map(|(p, _)| p.clone())
                .collect(),
            incomplete: Vec::new(),
        }
    }

    fn protected(
        &self,
        _policy: &Policy,
        req: &SandboxRequest,
    ) -> Result<ProtectedSet, SandboxError> {
        self.protected
            .map_or_else(|| Ok(ProtectedSet::default()), |f| f(req))
    }

    fn agent_user(&self, _spec: Option<&str>) -> Result<Ids, SandboxError> {
        Ok(self.agent.clone())
    }
}

/// A request of `mode` on the workspace `/work/ws` that reads `/opt/tool` and writes
/// `/srv/cache` (private directories under `/state`): what the visibility tests ask about.
pub(crate) fn tool_request(mode: crate::mode::Mode) -> crate::spec::SandboxRequest {
    crate::spec::SandboxRequest {
        read: vec![std::path::PathBuf::from("/opt/tool")],
        write: vec![std::path::PathBuf::from("/srv/cache")],
        ..crate::spec::SandboxRequest::minimal(
            mode,
            std::path::PathBuf::from("/work/ws"),
            std::path::PathBuf::from("/state/home"),
            std::path::PathBuf::from("/state/tmp"),
        )
    }
}
