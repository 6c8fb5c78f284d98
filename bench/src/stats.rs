//! Medians, ranges and percentiles over repetitions.

use serde::{Deserialize, Serialize};

/// Median and range of one figure over the repetitions of a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Spread {
    #[serde(deserialize_with = "nan_if_null")]
    pub median: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub min: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub max: f64,
    #[serde(deserialize_with = "nans_if_null")]
    pub samples: Vec<f64>,
}

/// JSON has no NaN: serde_json writes it as null; read null back as NaN.
fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

fn nans_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    Ok(Vec::<Option<f64>>::deserialize(d)?
        .into_iter()
        .map(|x| x.unwrap_or(f64::NAN))
        .collect())
}

impl Spread {
    pub fn of(samples: &[f64]) -> Spread {
        let mut sorted: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        sorted.sort_by(f64::total_cmp);
        let median = median_sorted(&sorted);
        Spread {
            median,
            min: sorted.first().copied().unwrap_or(f64::NAN),
            max: sorted.last().copied().unwrap_or(f64::NAN),
            samples: samples.to_vec(),
        }
    }

    /// "1.23 (1.10–1.31)" for tables.
    pub fn show(&self, digits: usize) -> String {
        format!(
            "{:.*} ({:.*}–{:.*})",
            digits, self.median, digits, self.min, digits, self.max
        )
    }
}

fn median_sorted(sorted: &[f64]) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

pub fn median(samples: &[f64]) -> f64 {
    Spread::of(samples).median
}

/// Nearest-rank percentile (q in 0..=100) of unsorted samples.
pub fn percentile(samples: &[f64], q: f64) -> f64 {
    let mut sorted: Vec<f64> = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The tail of a set of latency samples, in ms (`None` without samples).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub p999_ms: Option<f64>,
    pub max_ms: Option<f64>,
}

impl Latency {
    pub fn of(samples: &[f64]) -> Latency {
        if samples.is_empty() {
            return Latency::default();
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        Latency {
            p50_ms: Some(percentile(&sorted, 50.0)),
            p99_ms: Some(percentile(&sorted, 99.0)),
            p999_ms: Some(percentile(&sorted, 99.9)),
            max_ms: sorted.last().copied(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        let s = Spread::of(&[5.0, 1.0, 3.0]);
        assert_eq!((s.min, s.max), (1.0, 5.0));
    }

    #[test]
    fn nearest_rank_percentiles() {
        let xs: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&xs, 50.0), 50.0);
        assert_eq!(percentile(&xs, 99.0), 99.0);
        assert_eq!(percentile(&xs, 100.0), 100.0);
    }
}
