//! The Prometheus text exposition read back (the subset this crate writes: `# HELP`, `# TYPE`,
//! samples with labels, no timestamps), so `textfile` can add a new run's counts to a file's.

use std::collections::BTreeMap;
use std::path::Path;

use prometheus::proto::{Bucket, Counter, Gauge, Histogram, Metric, MetricFamily, MetricType};

use super::MetricsError;
use super::textfile::{Labels, label_pairs};

/// A histogram read back: (bucket bound, cumulative count) pairs, sum, count.
type HistParts = (Vec<(f64, u64)>, f64, u64);

/// Parses a text exposition (the subset this crate writes: HELP, TYPE, samples with labels,
/// no timestamps) back into metric families.
pub fn parse(text: &str, path: &Path) -> Result<Vec<MetricFamily>, MetricsError> {
    let err = |line: usize, message: String| MetricsError::Parse {
        path: path.to_owned(),
        line,
        message,
    };
    let mut families: Vec<MetricFamily> = Vec::new();
    // Histogram series under construction: (family index, labels without `le`) → parts.
    let mut hist: BTreeMap<(usize, Labels), HistParts> = BTreeMap::new();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            let at = family_at(&mut families, &mut index, name);
            families[at].set_help(unescape(help, false));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, t) = rest
                .split_once(' ')
                .ok_or_else(|| err(line_no, "a TYPE line without a type".into()))?;
            let t = match t.trim() {
                "counter" => MetricType::COUNTER,
                "gauge" => MetricType::GAUGE,
                "histogram" => MetricType::HISTOGRAM,
                "untyped" => MetricType::UNTYPED,
                other => return Err(err(line_no, format!("unsupported metric type `{other}`"))),
            };
            let at = family_at(&mut families, &mut index, name);
            families[at].set_field_type(t);
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let (name, labels, value) = sample(line).map_err(|m| err(line_no, m))?;
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .filter(|b| {
                index
                    .get(*b)
                    .is_some_and(|&i| families[i].get_field_type() == MetricType::HISTOGRAM)
            });
        if let Some(base) = base {
            let at = index[base];
            let mut rest: Labels = labels.iter().filter(|(k, _)| k != "le").cloned().collect();
            rest.sort();
            let entry = hist.entry((at, rest)).or_default();
            if name.ends_with("_bucket") {
                let le = labels
                    .iter()
                    .find(|(k, _)| k == "le")
                    .ok_or_else(|| err(line_no, "a bucket without `le`".into()))?;
                if le.1 == "+Inf" {
                    continue;
                }
                let bound: f64 =
                    le.1.parse()
                        .map_err(|_| err(line_no, format!("bad bucket bound `{}`", le.1)))?;
                entry.0.push((bound, value as u64));
            } else if name.ends_with("_sum") {
                entry.1 = value;
            } else {
                entry.2 = value as u64;
            }
            continue;
        }
        let at = *index
            .get(&name)
            .ok_or_else(|| err(line_no, format!("sample `{name}` has no TYPE line")))?;
        let mut m = Metric::default();
        let mut sorted = labels;
        sorted.sort();
        m.set_label(label_pairs(&sorted));
        match families[at].get_field_type() {
            MetricType::COUNTER => {
                let mut c = Counter::default();
                c.set_value(value);
                m.set_counter(c);
            }
            _ => {
                let mut g = Gauge::default();
                g.set_value(value);
                m.set_gauge(g);
            }
        }
        families[at].mut_metric().push(m);
    }
    for ((at, labels), (buckets, sum, count)) in hist {
        let mut h = Histogram::default();
        h.set_sample_sum(sum);
        h.set_sample_count(count);
        h.set_bucket(
            buckets
                .into_iter()
                .map(|(b, c)| {
                    let mut k = Bucket::default();
                    k.set_upper_bound(b);
                    k.set_cumulative_count(c);
                    k
                })
                .collect(),
        );
        let mut m = Metric::default();
        m.set_label(label_pairs(&labels));
        m.set_histogram(h);
        families[at].mut_metric().push(m);
    }
    Ok(families)
}

fn family_at(
    families: &mut Vec<MetricFamily>,
    index: &mut BTreeMap<String, usize>,
    name: &str,
) -> usize {
    *index.entry(name.to_owned()).or_insert_with(|| {
        let mut f = MetricFamily::default();
        f.set_name(name.to_owned());
        f.set_field_type(MetricType::UNTYPED);
        families.push(f);
        families.len() - 1
    })
}

fn unescape(s: &str, quotes: bool) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('\\') => out.push('\\'),
            Some('"') if quotes => out.push('"'),
            Some(o) => {
                out.push('\\');
                out.push(o);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// One sample line: `name{k="v",...} value`.
fn sample(line: &str) -> Result<(String, Labels, f64), String> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .ok_or("a sample without a value")?;
    let name = line[..name_end].to_owned();
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(body) = rest.strip_prefix('{') {
        let mut s = body;
        loop {
            s = s.trim_start_matches([',', ' ']);
            if let Some(after) = s.strip_prefix('}') {
                rest = after;
                break;
            }
            let eq = s.find('=').ok_or("a label without `=`")?;
            let key = s[..eq].trim().to_owned();
            let v = s[eq + 1..]
                .strip_prefix('"')
                .ok_or("a label value without quotes")?;
            let mut end = None;
            let mut escaped = false;
            for (i, c) in v.char_indices() {
                match (escaped, c) {
                    (true, _) => escaped = false,
                    (false, '\\') => escaped = true,
                    (false, '"') => {
                        end = Some(i);
                        break;
                    }
                    _ => {}
                }
            }
            let end = end.ok_or("an unterminated label value")?;
            labels.push((key, unescape(&v[..end], true)));
            s = &v[end + 1..];
        }
    }
    let value = rest
        .split_whitespace()
        .next()
        .ok_or("a sample without a value")?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().map_err(|_| format!("bad sample value `{v}`"))?,
    };
    Ok((name, labels, value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::registry::encode;
    use crate::metrics::test_support::one_run;

    #[test]
    fn the_encoding_parses_back_to_itself() {
        let fams = one_run("m \"quoted\" \\ back", 5);
        let text = encode(&fams).unwrap();
        let back = parse(&text, Path::new("x")).unwrap();
        assert_eq!(encode(&back).unwrap(), text);
    }
}
