//! `ralph run --metrics-textfile PATH`: the node exporter's textfile collector format, written
//! atomically (a temporary file in the same directory, then `rename`), under a lock so that
//! concurrent runs on one host do not lose each other's counts.
//!
//! A one-shot run must not reset what earlier runs counted: counters and histograms already in
//! the file are **added** to this run's (series this run did not touch are kept), gauges take
//! this run's value. So the file behaves like one long-lived exporter per host, and `rate()`
//! over it is right. A file that is not a metrics exposition is never overwritten.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use prometheus::proto::{Bucket, Counter, Histogram, LabelPair, Metric, MetricFamily, MetricType};

use super::MetricsError;
use super::exposition::parse;
use super::registry::encode;

/// The lock file next to `path` (not `*.prom`, so the collector ignores it).
fn lock_path(path: &Path) -> PathBuf {
    sibling(path, ".lock")
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}{suffix}"))
}

/// Checks, before a job runs, that `path` can be written: its directory exists.
pub fn check_path(path: &Path) -> Result<(), String> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if path.file_name().is_none() {
        return Err(format!("`{}` names no file", path.display()));
    }
    if !dir.is_dir() {
        return Err(format!("the directory `{}` does not exist", dir.display()));
    }
    if path.is_dir() {
        return Err(format!("`{}` is a directory", path.display()));
    }
    Ok(())
}

/// Merges `families` into the file at `path` and replaces it atomically.
pub fn write(path: &Path, families: Vec<MetricFamily>) -> Result<(), MetricsError> {
    let io = |action: &'static str, p: &Path| {
        let p = p.to_owned();
        move |source| MetricsError::Io {
            action,
            path: p,
            source,
        }
    };
    let lock_file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_path(path))
        .map_err(io("open", &lock_path(path)))?;
    let _lock = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusive).map_err(
        |(_, e)| MetricsError::Io {
            action: "lock",
            path: lock_path(path),
            source: e.into(),
        },
    )?;
    let merged = match std::fs::read_to_string(path) {
        Ok(old) => merge(parse(&old, path)?, families),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => families,
        Err(e) => return Err(io("read", path)(e)),
    };
    let text = encode(&merged)?;
    let tmp = sibling(path, &format!(".tmp.{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp).map_err(io("create", &tmp))?;
        f.write_all(text.as_bytes()).map_err(io("write", &tmp))?;
        f.sync_all().map_err(io("sync", &tmp))?;
        std::fs::rename(&tmp, path).map_err(io("replace", path))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Label pairs of one series, sorted by name.
pub(super) type Labels = Vec<(String, String)>;

fn labels_of(m: &Metric) -> Labels {
    let mut l: Labels = m
        .get_label()
        .iter()
        .map(|p| (p.name().to_owned(), p.value().to_owned()))
        .collect();
    l.sort();
    l
}

pub(super) fn label_pairs(labels: &Labels) -> Vec<LabelPair> {
    labels
        .iter()
        .map(|(k, v)| {
            let mut p = LabelPair::default();
            p.set_name(k.clone());
            p.set_value(v.clone());
            p
        })
        .collect()
}

/// Adds the counters and histograms of `old` to those of `new` (by name and labels); series
/// and families only in `old` are kept, but for counters at zero; gauges and everything else
/// take `new`'s values.
pub fn merge(old: Vec<MetricFamily>, mut new: Vec<MetricFamily>) -> Vec<MetricFamily> {
    let mut old_by_name: BTreeMap<String, MetricFamily> =
        old.into_iter().map(|f| (f.name().to_owned(), f)).collect();
    for fam in &mut new {
        let Some(mut prev) = old_by_name.remove(fam.name()) else {
            continue;
        };
        let t = fam.get_field_type();
        if prev.get_field_type() != t || !matches!(t, MetricType::COUNTER | MetricType::HISTOGRAM) {
            continue;
        }
        let mut prev_series: BTreeMap<Labels, Metric> = prev
            .take_metric()
            .into_iter()
            .map(|m| (labels_of(&m), m))
            .collect();
        for m in fam.mut_metric().iter_mut() {
            if let Some(p) = prev_series.remove(&labels_of(m)) {
                add_into(m, &p, t);
            }
        }
        // A zero counter this run does not have says nothing: an earlier version's
        // pre-initialised series (`model="unknown"`) goes away instead of staying forever.
        prev_series.retain(|_, m| t != MetricType::COUNTER || m.get_counter().get_value() != 0.0);
        fam.mut_metric().extend(prev_series.into_values());
        fam.mut_metric().sort_by_key(labels_of);
    }
    // Counters and histograms this run did not touch at all (no usage: no `ralph_tokens_total`)
    // keep what earlier runs counted.
    for (_, mut prev) in old_by_name {
        let t = prev.get_field_type();
        if !matches!(t, MetricType::COUNTER | MetricType::HISTOGRAM) {
            continue;
        }
        let kept: Vec<Metric> = prev
            .take_metric()
            .into_iter()
            .filter(|m| t != MetricType::COUNTER || m.get_counter().get_value() != 0.0)
            .collect();
        if !kept.is_empty() {
            prev.set_metric(kept);
            new.push(prev);
        }
    }
    new.sort_by(|a, b| a.name().cmp(b.name()));
    new
}

fn add_into(m: &mut Metric, prev: &Metric, t: MetricType) {
    match t {
        MetricType::COUNTER => {
            let mut c = Counter::default();
            c.set_value(m.get_counter().get_value() + prev.get_counter().get_value());
            m.set_counter(c);
        }
        MetricType::HISTOGRAM => {
            let (a, b) = (m.get_histogram(), prev.get_histogram());
            let same_buckets = a.get_bucket().len() == b.get_bucket().len()
                && a.get_bucket()
                    .iter()
                    .zip(b.get_bucket())
                    .all(|(x, y)| x.upper_bound() == y.upper_bound());
            if !same_buckets {
                // Bucket layout changed between versions: this run's histogram wins.
                return;
            }
            let mut h = Histogram::default();
            h.set_sample_count(a.get_sample_count() + b.get_sample_count());
            h.set_sample_sum(a.get_sample_sum() + b.get_sample_sum());
            h.set_bucket(
                a.get_bucket()
                    .iter()
                    .zip(b.get_bucket())
                    .map(|(x, y)| {
                        let mut k = Bucket::default();
                        k.set_upper_bound(x.upper_bound());
                        k.set_cumulative_count(x.cumulative_count() + y.cumulative_count());
                        k
                    })
                    .collect(),
            );
            m.set_histogram(h);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::test_support::one_run;

    #[test]
    fn counters_and_histograms_add_up_across_runs_and_gauges_are_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ralph.prom");
        write(&path, one_run("a", 5)).unwrap();
        write(&path, one_run("b", 7)).unwrap();
        write(&path, one_run("a", 1)).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        for line in [
            "ralph_rounds_total{outcome=\"complete\"} 3",
            "ralph_tokens_total{kind=\"input\",model=\"a\"} 6",
            "ralph_tokens_total{kind=\"input\",model=\"b\"} 7",
            "ralph_round_duration_seconds_count{backend=\"native\"} 3",
            "ralph_round_duration_seconds_sum{backend=\"native\"} 6",
            "ralph_round_duration_seconds_bucket{backend=\"native\",le=\"5\"} 3",
            "ralph_round_duration_seconds_bucket{backend=\"native\",le=\"+Inf\"} 3",
            "ralph_handoff_bytes_count 3",
            "ralph_jobs{state=\"running\"} 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing `{line}` in\n{text}"
            );
        }
        // No temporary file is left behind.
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.contains(".tmp.")), "{names:?}");
    }

    /// Issue 26: no zero `model="unknown"` series beside the real model, also in a file an
    /// earlier version wrote with one; a counted one stays.
    #[test]
    fn no_zero_unknown_model_series_is_written_or_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ralph.prom");
        std::fs::write(
            &path,
            "# HELP ralph_tokens_total Tokens.\n# TYPE ralph_tokens_total counter\n\
             ralph_tokens_total{kind=\"input\",model=\"unknown\"} 0\n\
             ralph_tokens_total{kind=\"output\",model=\"old\"} 3\n",
        )
        .unwrap();
        write(&path, one_run("gpt-x", 5)).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("model=\"unknown\""), "{text}");
        assert!(
            text.contains("ralph_tokens_total{kind=\"input\",model=\"gpt-x\"} 5"),
            "{text}"
        );
        assert!(
            text.contains("ralph_tokens_total{kind=\"output\",model=\"old\"} 3"),
            "{text}"
        );
        // Pre-initialised series of this version stay, at zero.
        assert!(
            text.contains("ralph_rounds_total{outcome=\"blocked\"} 0"),
            "{text}"
        );
        // A run without usage has no tokens family: the counted ones stay.
        let m = crate::metrics::Metrics::new(false).unwrap();
        write(&path, m.gather()).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("ralph_tokens_total{kind=\"input\",model=\"gpt-x\"} 5"),
            "{text}"
        );
        assert!(
            text.contains("ralph_tokens_total{kind=\"output\",model=\"old\"} 3"),
            "{text}"
        );
    }

    #[test]
    fn a_file_that_is_not_metrics_is_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ralph.prom");
        std::fs::write(&path, "not { metrics\n").unwrap();
        let e = write(&path, one_run("a", 1)).unwrap_err();
        assert!(e.to_string().contains("line 1"), "{e}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "not { metrics\n");
    }

    #[test]
    fn paths_are_checked_before_the_job() {
        assert!(check_path(Path::new("/nonexistent-dir/x.prom")).is_err());
        let dir = tempfile::tempdir().unwrap();
        assert!(check_path(dir.path()).is_err());
        assert!(check_path(&dir.path().join("x.prom")).is_ok());
    }
}
