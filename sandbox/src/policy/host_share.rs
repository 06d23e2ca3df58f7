//! Limit defaults that scale with the host: a policy's `[limits] memory` and `cpus` may be a
//! share of the host (`"50%"`) as well as a fixed amount, so one policy file fits a laptop and a
//! 64-core runner. The share is resolved against [`HostSize`] when a round is planned.

use serde::Deserialize;

use super::Cpus;
use crate::units::ByteSize;

/// The host's size, as the plans see it: total memory and online CPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HostSize {
    /// Total memory in bytes (`sysinfo(2)`: the `MemTotal` of `/proc/meminfo`, without making
    /// and parsing that file at every start); `None` when unreadable.
    pub memory: Option<u64>,
    /// CPUs this process may run on.
    pub cpus: u64,
}

impl HostSize {
    /// This host.
    pub fn probe() -> Self {
        Self {
            memory: nix::sys::sysinfo::sysinfo().ok().map(|i| i.ram_total()),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
        }
    }
}

/// `MemTotal:  24576000 kB` → bytes.
#[cfg(test)]
fn mem_total(meminfo: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| {
        let kib = l.strip_prefix("MemTotal:")?.trim().strip_suffix("kB")?;
        kib.trim().parse::<u64>().ok()?.checked_mul(1024)
    })
}

/// A percentage from `"N%"`, 1..=100.
fn percent(s: &str) -> Option<Result<u8, String>> {
    let n = s.trim().strip_suffix('%')?;
    Some(match n.trim().parse::<u8>() {
        Ok(p @ 1..=100) => Ok(p),
        _ => Err(format!(
            "expected a share of the host from 1% to 100%, not `{s}`"
        )),
    })
}

/// `[limits] memory`: a size (`"4G"`) or a share of the host's memory (`"50%"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryDefault {
    /// A fixed size.
    Bytes(ByteSize),
    /// This percentage of the host's memory.
    Share(u8),
}

impl MemoryDefault {
    /// The limit in bytes on a host of `size`; `None` for a share of an unknown total.
    pub fn bytes(self, size: &HostSize) -> Option<u64> {
        match self {
            Self::Bytes(b) => Some(b.0),
            // Rounded down to a MiB: limits read as whole sizes.
            Self::Share(p) => size.memory.map(|m| {
                let share = u128::from(m) * u128::from(p) / 100;
                u64::try_from(share).unwrap_or(u64::MAX) & !((1 << 20) - 1)
            }),
        }
    }
}

impl std::fmt::Display for MemoryDefault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Bytes(b) => write!(f, "{b}"),
            Self::Share(p) => write!(f, "{p}% of the host's memory"),
        }
    }
}

impl<'de> Deserialize<'de> for MemoryDefault {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match percent(&s) {
            Some(p) => p.map(Self::Share).map_err(serde::de::Error::custom),
            None => s
                .parse::<ByteSize>()
                .map(Self::Bytes)
                .map_err(|e| serde::de::Error::custom(format!("{e}, or a share such as \"50%\""))),
        }
    }
}

/// `[limits] cpus`: a number of CPUs (`2`, `1.5`) or a share of the host's CPUs (`"75%"`,
/// never under one CPU).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpusDefault {
    /// A fixed number of CPUs.
    Cpus(Cpus),
    /// This percentage of the host's CPUs.
    Share(u8),
}

impl CpusDefault {
    /// The limit in thousandths of a CPU on a host of `size`.
    pub fn millis(self, size: &HostSize) -> u64 {
        match self {
            Self::Cpus(c) => c.0,
            Self::Share(p) => (size.cpus.saturating_mul(10 * u64::from(p))).max(1000),
        }
    }
}

impl std::fmt::Display for CpusDefault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Cpus(c) => write!(f, "{c}"),
            Self::Share(p) => write!(f, "{p}% of the host's CPUs"),
        }
    }
}

impl<'de> Deserialize<'de> for CpusDefault {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Number(f64),
        }
        match Raw::deserialize(d)? {
            Raw::Text(s) => match percent(&s) {
                Some(p) => p.map(Self::Share).map_err(serde::de::Error::custom),
                None => s
                    .parse::<Cpus>()
                    .map(Self::Cpus)
                    .map_err(serde::de::Error::custom),
            },
            Raw::Number(n) => {
                Cpus::deserialize(serde::de::value::F64Deserializer::<D::Error>::new(n))
                    .map(Self::Cpus)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct L {
        memory: MemoryDefault,
        cpus: CpusDefault,
    }

    fn parse(text: &str) -> Result<L, String> {
        toml::from_str::<L>(text).map_err(|e| e.to_string())
    }

    const HOST: HostSize = HostSize {
        memory: Some(16 << 30),
        cpus: 8,
    };

    #[test]
    fn a_share_scales_with_the_host_and_a_size_does_not() {
        let l = parse("memory = \"50%\"\ncpus = \"75%\"").unwrap();
        assert_eq!(l.memory.bytes(&HOST), Some(8 << 30));
        assert_eq!(l.cpus.millis(&HOST), 6000);
        let one = HostSize {
            memory: None,
            cpus: 1,
        };
        assert_eq!(l.memory.bytes(&one), None, "a share of an unknown total");
        assert_eq!(l.cpus.millis(&one), 1000, "never under one CPU");
        let l = parse("memory = \"2G\"\ncpus = 1.5").unwrap();
        assert_eq!(l.memory.bytes(&one), Some(2 << 30));
        assert_eq!(l.cpus.millis(&HOST), 1500);
        assert_eq!(
            parse("memory = \"1G\"\ncpus = \"2\"")
                .unwrap()
                .cpus
                .millis(&HOST),
            2000
        );
    }

    #[test]
    fn a_bad_value_names_what_is_expected() {
        for (text, says) in [
            ("memory = \"0%\"\ncpus = 1", "from 1% to 100%"),
            ("memory = \"150%\"\ncpus = 1", "from 1% to 100%"),
            ("memory = \"lots\"\ncpus = 1", "a share such as \"50%\""),
            ("memory = \"1G\"\ncpus = \"-5%\"", "from 1% to 100%"),
        ] {
            let e = parse(text).err().unwrap();
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn meminfo_is_read_in_bytes() {
        assert_eq!(
            mem_total("MemTotal:       24576000 kB\nMemFree: 1 kB\n"),
            Some(24_576_000 * 1024)
        );
        assert_eq!(mem_total("nothing"), None);
        assert!(HostSize::probe().cpus >= 1);
    }

    /// The probe's memory is exactly the `MemTotal` the host reports.
    #[test]
    fn the_probe_reads_the_same_total_as_meminfo() {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
        assert_eq!(HostSize::probe().memory, mem_total(&meminfo));
    }
}
