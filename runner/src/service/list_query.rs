//! The query of `GET /v1/jobs`: its single-valued keys into a struct, and its repeatable
//! `label=KEY=VALUE` filters (which a struct of the query cannot hold) into a map.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;

use crate::job::labels::parse_label;

/// A query that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct QueryError {
    /// What is wrong.
    pub message: String,
    /// The offending key, when one is to blame.
    pub field: Option<String>,
}

/// Splits `raw` (the query string, undecoded) into `T` and the `label` filters.
pub fn parse<T: DeserializeOwned>(raw: &str) -> Result<(T, BTreeMap<String, String>), QueryError> {
    let mut rest = Vec::new();
    let mut labels = BTreeMap::new();
    for piece in raw.split('&').filter(|p| !p.is_empty()) {
        let pairs: Vec<(String, String)> =
            serde_urlencoded::from_str(piece).map_err(|e| QueryError {
                message: format!("failed to decode the query: {e}"),
                field: None,
            })?;
        match pairs.into_iter().next() {
            Some((key, value)) if key == "label" => {
                let (k, v) = parse_label(&value).map_err(|message| QueryError {
                    message: format!("failed to read the label filter: {message}"),
                    field: Some("label".into()),
                })?;
                labels.insert(k, v);
            }
            _ => rest.push(piece),
        }
    }
    let q = serde_urlencoded::from_str(&rest.join("&")).map_err(|e| QueryError {
        message: format!("failed to deserialize query string: {e}"),
        field: None,
    })?;
    Ok((q, labels))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    struct Q {
        limit: Option<usize>,
    }

    #[test]
    fn labels_repeat_and_other_keys_stay_strict() {
        let (q, labels) = parse::<Q>("limit=3&label=team%3Dinfra&label=t=T-12").unwrap();
        assert_eq!(q.limit, Some(3));
        assert_eq!(labels["team"], "infra");
        assert_eq!(labels["t"], "T-12");
        assert!(parse::<Q>("bogus=1").is_err());
        assert_eq!(
            parse::<Q>("label=Bad=1").unwrap_err().field.as_deref(),
            Some("label")
        );
    }
}
