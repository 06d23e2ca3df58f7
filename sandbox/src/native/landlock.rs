//! Applying the Landlock ruleset of a plan. Every access right of the running ABI is handled
//! (so anything not granted is denied), rules are built path by path — a path that cannot be
//! opened fails the setup instead of being dropped — and anything short of full enforcement
//! is a failure: the plan already decided what this kernel must enforce.

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope,
};

use super::step::{StepFailure, restriction};
use crate::plan::LandlockPlan;

fn fail(step: &str, what: &str, err: impl std::fmt::Display) -> StepFailure {
    StepFailure::new(
        restriction::LANDLOCK,
        step,
        format!("failed to {what}: {err}"),
    )
}

fn rights_for(path: &std::path::Path, rights: BitFlags<AccessFs>, abi: ABI) -> BitFlags<AccessFs> {
    // Rules on a non-directory may only carry file rights.
    if path.is_dir() {
        rights
    } else {
        rights & AccessFs::from_file(abi)
    }
}

fn add(
    mut ruleset: RulesetCreated,
    paths: &[std::path::PathBuf],
    rights: BitFlags<AccessFs>,
    abi: ABI,
) -> Result<RulesetCreated, StepFailure> {
    for p in paths {
        let fd = PathFd::new(p).map_err(|e| {
            fail(
                "open(O_PATH)",
                &format!("open `{}` for a rule", p.display()),
                e,
            )
        })?;
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, rights_for(p, rights, abi)))
            .map_err(|e| fail("landlock_add_rule", &format!("allow `{}`", p.display()), e))?;
    }
    Ok(ruleset)
}

/// A plan's ruleset, built ahead of the command: every rule's path opened and added, so that
/// what remains for the command's process is one `landlock_restrict_self` (issue 30: the ~85
/// syscalls of a workspace-write plan's rules ran between the run's go-ahead and the command's
/// `execve`). Rules name inodes, not paths: built after the view is in place, they are the
/// rules the command would have built itself, and grant nothing the files' own permissions
/// refuse (the init that builds them may open a path the agent user could not reach; the
/// agent still cannot). The descriptor is close-on-exec.
#[derive(Debug)]
pub struct Prepared {
    ruleset: RulesetCreated,
    abi: i32,
}

/// Builds `plan`'s ruleset without enforcing it ([`Prepared::enforce`]).
pub fn prepare(plan: &LandlockPlan) -> Result<Prepared, StepFailure> {
    let abi = ABI::from(plan.abi);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))
        .map_err(|e| fail("landlock_create_ruleset", "handle filesystem access", e))?;
    if plan.deny_tcp {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi))
            .map_err(|e| fail("landlock_create_ruleset", "handle network access", e))?;
    }
    if plan.scope {
        ruleset = ruleset.scope(Scope::from_all(abi)).map_err(|e| {
            fail(
                "landlock_create_ruleset",
                "scope signals and abstract sockets",
                e,
            )
        })?;
    }
    let created = ruleset
        .create()
        .map_err(|e| fail("landlock_create_ruleset", "create the ruleset", e))?;
    let created = add(created, &plan.read, AccessFs::from_read(abi), abi)?;
    let created = add(created, &plan.write, AccessFs::from_all(abi), abi)?;
    let device_rights =
        AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev;
    let created = add(
        created,
        &plan.devices,
        device_rights & AccessFs::from_all(abi),
        abi,
    )?;
    // The sandbox's own `/` and `/dev` may be listed (they hold only what the plan put there).
    let ruleset = add(created, &plan.list, BitFlags::from(AccessFs::ReadDir), abi)?;
    Ok(Prepared {
        ruleset,
        abi: plan.abi,
    })
}

impl Prepared {
    /// Restricts the calling thread (and its future children) to the ruleset. A duplicate of
    /// its descriptor is what is consumed, so that a vfork child enforcing it leaves the
    /// parent's copy as it was.
    pub fn enforce(&self) -> Result<(), StepFailure> {
        let ruleset = self
            .ruleset
            .try_clone()
            .map_err(|e| fail("fcntl(F_DUPFD_CLOEXEC)", "take the prepared ruleset", e))?;
        let status = ruleset
            .restrict_self()
            .map_err(|e| fail("landlock_restrict_self", "enforce the ruleset", e))?;
        match status.ruleset {
            RulesetStatus::FullyEnforced => Ok(()),
            RulesetStatus::PartiallyEnforced | RulesetStatus::NotEnforced => Err(StepFailure::new(
                restriction::LANDLOCK,
                "landlock_restrict_self",
                format!(
                    "the kernel enforced the ruleset only as {:?} for landlock abi {}",
                    status.ruleset, self.abi
                ),
            )),
        }
    }
}

/// Restricts the calling thread (and its future children) to the plan's rules.
pub fn restrict(plan: &LandlockPlan) -> Result<(), StepFailure> {
    prepare(plan)?.enforce()
}
