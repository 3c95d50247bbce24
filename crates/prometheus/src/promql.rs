//! The queries bursar sends and the reading of Prometheus's answers, both pure.
//!
//! One instant query per metric, at the evaluation time:
//!
//! ```text
//! M{hpc_job!=""} or label_replace(timestamp(M{hpc_job!=""}), "bursar_sample_time", "1", "", "")
//! ```
//!
//! The left side gives each series' value. An instant query stamps every result with the evaluation
//! time, not with the time of the sample it found (which may be up to the lookback delta, 5 minutes,
//! old), so the right side asks for the sample's own time with `timestamp()`, applied directly to the
//! selector (on any other expression it returns the evaluation time). `timestamp()` drops the metric
//! name, and `or` matches label sets without the name, so the constant `bursar_sample_time` label keeps
//! the timestamp series from being dropped as duplicates. Both halves come from one evaluation.

use std::collections::BTreeMap;

use bursar_model::Timestamp;
use serde::Deserialize;
use serde_json::value::RawValue;

/// The label that marks the timestamp half of an answer.
pub const SAMPLE_TIME_LABEL: &str = "bursar_sample_time";

/// A series' labels without `__name__`, sorted by name: what identifies one GPU (or MIG instance)
/// across the metrics, since dcgm-exporter writes the same labels on every metric of a GPU.
pub type Labels = Vec<(String, String)>;

/// One series of an answer: its value and the time of the sample it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    /// Labels without the metric name.
    pub labels: Labels,
    /// The value as Prometheus holds it (may be NaN or infinite).
    pub value: f64,
    /// The sample's own time, when the answer had it.
    pub sample_time: Option<Timestamp>,
}

impl Reading {
    /// The value of label `name`.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// The selector of `metric`: the attribution labels must be non-empty, plus the site's matchers.
pub fn selector(metric: &str, required: &[String], matchers: &str) -> String {
    let mut parts: Vec<String> = required.iter().map(|l| format!("{l}!=\"\"")).collect();
    let extra = matchers.trim().trim_matches(',');
    if !extra.is_empty() {
        parts.push(extra.to_owned());
    }
    format!("{metric}{{{}}}", parts.join(","))
}

/// The query sent for `metric` (see the module documentation).
pub fn query(metric: &str, required: &[String], matchers: &str) -> String {
    let s = selector(metric, required, matchers);
    format!("{s} or label_replace(timestamp({s}), \"{SAMPLE_TIME_LABEL}\", \"1\", \"\", \"\")")
}

/// Why an answer holds no readings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// Prometheus answered `"status":"error"`.
    #[error("prometheus refused the query: {error_type}: {error}")]
    Api {
        /// Prometheus's `errorType` (`bad_data`, `timeout`, `execution`, …).
        error_type: String,
        /// Its message.
        error: String,
    },
    /// The body is not the query API's JSON.
    #[error("the answer is not a Prometheus query result: {0}")]
    Decode(String),
    /// The result is not an instant vector.
    #[error("the answer is a `{0}`, not an instant vector")]
    NotVector(String),
}

#[derive(Deserialize)]
struct Body<'a> {
    status: String,
    #[serde(borrow)]
    data: Option<Data<'a>>,
    #[serde(rename = "errorType")]
    error_type: Option<String>,
    error: Option<String>,
}

#[derive(Deserialize)]
struct Data<'a> {
    #[serde(rename = "resultType")]
    result_type: String,
    #[serde(borrow)]
    result: &'a RawValue,
}

#[derive(Deserialize)]
struct Element {
    metric: BTreeMap<String, String>,
    value: (f64, String),
}

fn parse_value(s: &str) -> f64 {
    // Prometheus writes `NaN`, `+Inf`, `-Inf` and Go floats; Rust reads all of them.
    s.parse::<f64>().unwrap_or(f64::NAN)
}

/// Reads the answer to [`query`] into one reading per series.
pub fn parse(body: &[u8]) -> Result<Vec<Reading>, AnswerError> {
    let b: Body<'_> = serde_json::from_slice(body).map_err(|e| AnswerError::Decode(e.to_string()))?;
    if b.status != "success" {
        return Err(AnswerError::Api {
            error_type: b.error_type.unwrap_or_else(|| "unknown".into()),
            error: b.error.unwrap_or_else(|| format!("status `{}`", b.status)),
        });
    }
    let data = b.data.ok_or_else(|| AnswerError::Decode("no `data`".into()))?;
    if data.result_type != "vector" {
        return Err(AnswerError::NotVector(data.result_type));
    }
    let elements: Vec<Element> =
        serde_json::from_str(data.result.get()).map_err(|e| AnswerError::Decode(e.to_string()))?;
    let mut by_labels: BTreeMap<Labels, (Option<f64>, Option<Timestamp>)> = BTreeMap::new();
    for mut e in elements {
        e.metric.remove("__name__");
        let is_time = e.metric.remove(SAMPLE_TIME_LABEL).is_some();
        let labels: Labels = e.metric.into_iter().collect();
        let slot = by_labels.entry(labels).or_default();
        let v = parse_value(&e.value.1);
        if is_time {
            if v.is_finite() {
                slot.1 = Some(Timestamp((v * 1000.0).round() as i64));
            }
        } else {
            slot.0 = Some(v);
        }
    }
    Ok(by_labels
        .into_iter()
        .filter_map(|(labels, (value, sample_time))| Some(Reading { labels, value: value?, sample_time }))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries() {
        let req = vec!["hpc_job".to_owned()];
        assert_eq!(selector("DCGM_FI_DEV_GPU_UTIL", &req, ""), r#"DCGM_FI_DEV_GPU_UTIL{hpc_job!=""}"#);
        assert_eq!(
            selector("M", &["namespace".into(), "pod".into()], r#"cluster="a","#),
            r#"M{namespace!="",pod!="",cluster="a"}"#
        );
        assert_eq!(
            query("M", &req, ""),
            r#"M{hpc_job!=""} or label_replace(timestamp(M{hpc_job!=""}), "bursar_sample_time", "1", "", "")"#
        );
    }

    #[test]
    fn values_joined_with_their_sample_times() {
        let body = br#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"__name__":"M","gpu":"0","hpc_job":"17"},"value":[1764581460,"0.25"]},
            {"metric":{"gpu":"0","hpc_job":"17","bursar_sample_time":"1"},"value":[1764581460,"1764581458.5"]},
            {"metric":{"__name__":"M","gpu":"1","hpc_job":"17"},"value":[1764581460,"NaN"]}
        ]}}"#;
        let r = parse(body).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].label("gpu"), Some("0"));
        assert_eq!((r[0].value, r[0].sample_time), (0.25, Some(Timestamp(1_764_581_458_500))));
        assert!(r[1].value.is_nan());
        assert_eq!(r[1].sample_time, None, "a series without its timestamp half has no sample time");
        assert!(r[0].labels.iter().all(|(k, _)| k != "__name__"));
    }

    #[test]
    fn errors_are_typed() {
        let e = parse(br#"{"status":"error","errorType":"bad_data","error":"parse error at char 3"}"#).unwrap_err();
        assert_eq!(e.to_string(), "prometheus refused the query: bad_data: parse error at char 3");
        assert!(matches!(parse(b"<html>").unwrap_err(), AnswerError::Decode(_)));
        let e = parse(br#"{"status":"success","data":{"resultType":"scalar","result":[1,"1"]}}"#).unwrap_err();
        assert_eq!(e, AnswerError::NotVector("scalar".into()));
        assert_eq!(parse(br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#).unwrap(), vec![]);
        assert!(parse(br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{}}]}}"#).is_err());
    }
}
