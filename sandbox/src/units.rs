//! Durations (`30s`, `5m`, `1h30m`, `250ms`) and sizes (`512M`, `2G`, bare bytes) as written
//! on the command line and in job files (SPEC §6).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A value that is not a valid duration or size.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} `{input}`: {expected}")]
pub struct UnitError {
    what: &'static str,
    input: String,
    expected: &'static str,
}

const DURATION_HELP: &str =
    "expected a number followed by a unit (ms, s, m, h, d), e.g. `30s`, `5m`, `1h30m`";
const SIZE_HELP: &str =
    "expected bytes, or a number with K, M, G or T (powers of 1024), e.g. `512M`";

/// A duration parsed from the human form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct HumanDuration(pub Duration);

impl FromStr for HumanDuration {
    type Err = UnitError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || UnitError {
            what: "duration",
            input: s.to_owned(),
            expected: DURATION_HELP,
        };
        let text = s.trim();
        if text.is_empty() {
            return Err(err());
        }
        let mut total: u128 = 0;
        let mut rest = text;
        while !rest.is_empty() {
            let digits = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            if digits == 0 {
                return Err(err());
            }
            let n: u128 = rest[..digits].parse().map_err(|_| err())?;
            rest = &rest[digits..];
            let unit_len = rest
                .find(|c: char| c.is_ascii_digit())
                .unwrap_or(rest.len());
            let unit = &rest[..unit_len];
            rest = &rest[unit_len..];
            let ms: u128 = match unit {
                "ms" => 1,
                "s" => 1_000,
                "m" => 60_000,
                "h" => 3_600_000,
                "d" => 86_400_000,
                _ => return Err(err()),
            };
            total = total
                .checked_add(n.checked_mul(ms).ok_or_else(err)?)
                .ok_or_else(err)?;
        }
        let ms = u64::try_from(total).map_err(|_| err())?;
        Ok(HumanDuration(Duration::from_millis(ms)))
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut ms = self.0.as_millis();
        if ms == 0 {
            return f.write_str("0s");
        }
        for (unit, size) in [("h", 3_600_000u128), ("m", 60_000), ("s", 1_000), ("ms", 1)] {
            if ms >= size {
                write!(f, "{}{unit}", ms / size)?;
                ms %= size;
            }
        }
        Ok(())
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A byte size parsed from the human form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(pub u64);

impl FromStr for ByteSize {
    type Err = UnitError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || UnitError {
            what: "size",
            input: s.to_owned(),
            expected: SIZE_HELP,
        };
        let text = s.trim();
        let digits = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        if digits == 0 {
            return Err(err());
        }
        let n: u64 = text[..digits].parse().map_err(|_| err())?;
        let shift = match &text[digits..] {
            "" | "B" => 0,
            "K" | "KB" | "KiB" | "k" => 10,
            "M" | "MB" | "MiB" => 20,
            "G" | "GB" | "GiB" => 30,
            "T" | "TB" | "TiB" => 40,
            _ => return Err(err()),
        };
        n.checked_mul(1u64 << shift).map(ByteSize).ok_or_else(err)
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (unit, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] {
            let size = 1u64 << shift;
            if self.0 >= size && self.0 % size == 0 {
                return write!(f, "{}{unit}", self.0 / size);
            }
        }
        write!(f, "{}", self.0)
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => Ok(ByteSize(n)),
            Raw::S(s) => s.parse().map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Duration {
        s.parse::<HumanDuration>().unwrap().0
    }

    #[test]
    fn durations() {
        assert_eq!(d("30s"), Duration::from_secs(30));
        assert_eq!(d("5m"), Duration::from_secs(300));
        assert_eq!(d("1h30m"), Duration::from_secs(5400));
        assert_eq!(d("250ms"), Duration::from_millis(250));
        assert_eq!(d("0s"), Duration::ZERO);
        for bad in [
            "",
            "30",
            "s",
            "1x",
            "1h30",
            "-1s",
            "1.5s",
            "99999999999999999999d",
        ] {
            let e = bad.parse::<HumanDuration>().unwrap_err().to_string();
            assert!(
                e.contains("expected a number followed by a unit"),
                "{bad}: {e}"
            );
        }
        assert_eq!(
            HumanDuration(Duration::from_secs(5400)).to_string(),
            "1h30m"
        );
        assert_eq!(
            HumanDuration(Duration::from_millis(1500)).to_string(),
            "1s500ms"
        );
    }

    #[test]
    fn sizes() {
        let s = |x: &str| x.parse::<ByteSize>().unwrap().0;
        assert_eq!(s("16384"), 16384);
        assert_eq!(s("512M"), 512 << 20);
        assert_eq!(s("2G"), 2 << 30);
        assert_eq!(s("16K"), 16384);
        assert_eq!(s("1GiB"), 1 << 30);
        for bad in ["", "M", "1.5G", "12Q", "-1", "99999999999T"] {
            assert!(bad.parse::<ByteSize>().is_err(), "{bad}");
        }
        assert_eq!(ByteSize(512 << 20).to_string(), "512M");
        assert_eq!(ByteSize(1000).to_string(), "1000");
    }
}
