//! Sierra's "hour of day" predictor (3.5, 4.1): the load of an interval is the mean of
//! the same interval of the day over every past day, with equal weights.

/// Sums and counts per interval of the day, over the days seen so far.
#[derive(Clone, Debug, PartialEq)]
pub struct HourOfDay {
    sums: Vec<f64>,
    counts: Vec<u32>,
}

impl HourOfDay {
    /// A predictor for days of `slots` intervals (24 for hours, 48 for half hours).
    pub fn new(slots: u32) -> HourOfDay {
        let slots = slots.max(1) as usize;
        HourOfDay { sums: vec![0.0; slots], counts: vec![0; slots] }
    }

    pub fn slots(&self) -> u64 {
        self.sums.len() as u64
    }

    /// The load measured in interval `index` (counted from the first interval of day 0).
    /// Each interval is observed once, after it ended, so a prediction of it or of a
    /// later interval of the same day sees only past days.
    pub fn observe(&mut self, index: u64, load: f64) {
        if !load.is_finite() {
            return;
        }
        let slot = (index % self.slots()) as usize;
        self.sums[slot] += load.max(0.0);
        self.counts[slot] += 1;
    }

    /// The predicted load of interval `index`; none before a day of that slot was seen.
    pub fn predict(&self, index: u64) -> Option<f64> {
        let slot = (index % self.slots()) as usize;
        (self.counts[slot] > 0).then(|| self.sums[slot] / f64::from(self.counts[slot]))
    }

    /// The days of history behind a prediction of interval `index`.
    pub fn days_seen(&self, index: u64) -> u32 {
        self.counts[(index % self.slots()) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prediction_is_the_mean_of_past_days_at_that_hour() {
        // Goal: equal weights over all past days, per slot; nothing before one day.
        let mut p = HourOfDay::new(4);
        assert_eq!(p.predict(0), None);
        for (index, load) in
            [10.0, 20.0, 30.0, 40.0, 20.0, 20.0, 50.0, 40.0].into_iter().enumerate()
        {
            p.observe(index as u64, load);
        }
        assert_eq!(p.predict(8), Some(15.0));
        assert_eq!(p.predict(9), Some(20.0));
        assert_eq!(p.predict(10), Some(40.0));
        assert_eq!(p.predict(11), Some(40.0));
        assert_eq!(p.days_seen(11), 2);
        p.observe(8, f64::NAN);
        assert_eq!(p.predict(12), Some(15.0), "a bad sample is ignored");
    }
}
