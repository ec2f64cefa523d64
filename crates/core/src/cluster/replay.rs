//! When a trace's request may go to the cluster: the one rule both shells replay a
//! block trace by (`somnus sim cluster --trace` in virtual time, `somnus replay` on
//! real processes), so the two agree on what was in flight.
//!
//! A trace records requests a device took in its own order; a request that overlaps
//! one still in flight on its device waits for it (a device answers them in order,
//! a cluster need not), and at most `in_flight_max` requests are arrived and not done
//! at once (later arrivals queue, in order, for a place; their latency still counts
//! from their arrival). Requests are named by the shell's numbers (the trace's
//! index); the shell says when each arrives and when each is done, and issues what
//! this answers ready.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use somnus_types::ByteRange;

/// Requests in flight at most by default: enough for any trace's bursts on a cluster
/// keeping up, and a bound on what a stalled one holds.
pub const IN_FLIGHT_MAX: usize = 4096;

/// The requests of a replay arrived and not done (docs at the module's head).
#[derive(Debug)]
pub struct ReplayAdmission {
    in_flight_max: usize,
    /// Per device, the requests admitted and not done: number and range.
    open: Vec<Vec<(u64, ByteRange)>>,
    /// Each admitted request's device.
    device_of: BTreeMap<u64, u32>,
    /// A waiting request: how many earlier ones it still waits for.
    awaiting: BTreeMap<u64, usize>,
    /// A request in flight: the later ones waiting for it.
    waiters: BTreeMap<u64, Vec<u64>>,
    /// Arrivals beyond the bound, in order: number, device, range.
    queued: VecDeque<(u64, u32, ByteRange)>,
    /// The numbers of the queued arrivals: under a stall the queue holds millions.
    queued_numbers: BTreeSet<u64>,
}

/// A replay's request the shell named wrongly: a bug in the shell, reported, never
/// acted on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AdmissionError {
    #[error("request {request} is on device {device} of a replay of {devices}")]
    NoSuchDevice { request: u64, device: u32, devices: usize },
    #[error("request {0} arrived twice")]
    ArrivedTwice(u64),
    #[error("request {0} is done but was never issued")]
    NotIssued(u64),
}

impl ReplayAdmission {
    /// A replay of `devices` devices with at most `in_flight_max` requests (at least
    /// one) arrived and not done.
    pub fn new(devices: usize, in_flight_max: usize) -> ReplayAdmission {
        ReplayAdmission {
            in_flight_max: in_flight_max.max(1),
            open: vec![Vec::new(); devices],
            device_of: BTreeMap::new(),
            awaiting: BTreeMap::new(),
            waiters: BTreeMap::new(),
            queued: VecDeque::new(),
            queued_numbers: BTreeSet::new(),
        }
    }

    /// Request `request` arrives, on `device` over `range`: the requests to issue
    /// now (it, or none if it waits or queues).
    pub fn arrive(
        &mut self,
        request: u64,
        device: u32,
        range: ByteRange,
    ) -> Result<Vec<u64>, AdmissionError> {
        let devices = self.open.len();
        if device as usize >= devices {
            return Err(AdmissionError::NoSuchDevice { request, device, devices });
        }
        if self.device_of.contains_key(&request) || self.queued_numbers.contains(&request) {
            return Err(AdmissionError::ArrivedTwice(request));
        }
        let mut ready = Vec::new();
        if self.queued.is_empty() && self.device_of.len() < self.in_flight_max {
            self.admit(request, device, range, &mut ready);
        } else {
            self.queued.push_back((request, device, range));
            self.queued_numbers.insert(request);
        }
        Ok(ready)
    }

    /// Request `request` is done (answered, well or not): the requests to issue now,
    /// those that waited for it first, in their order, then those the place it
    /// leaves admits.
    pub fn done(&mut self, request: u64) -> Result<Vec<u64>, AdmissionError> {
        if self.awaiting.contains_key(&request) {
            return Err(AdmissionError::NotIssued(request));
        }
        let Some(device) = self.device_of.remove(&request) else {
            return Err(AdmissionError::NotIssued(request));
        };
        self.open[device as usize].retain(|(open, _)| *open != request);
        let mut ready = Vec::new();
        for waiter in self.waiters.remove(&request).unwrap_or_default() {
            let Some(left) = self.awaiting.get_mut(&waiter) else { continue };
            *left -= 1;
            if *left == 0 {
                self.awaiting.remove(&waiter);
                ready.push(waiter);
            }
        }
        while self.device_of.len() < self.in_flight_max {
            let Some((next, device, range)) = self.queued.pop_front() else { break };
            self.queued_numbers.remove(&next);
            self.admit(next, device, range, &mut ready);
        }
        Ok(ready)
    }

    /// Requests arrived and not done, waiting or queued ones included.
    pub fn in_flight(&self) -> usize {
        self.device_of.len() + self.queued.len()
    }

    /// Arrivals waiting for a place (beyond the bound).
    pub fn queued(&self) -> usize {
        self.queued.len()
    }

    /// Requests issued and not done.
    pub fn issued(&self) -> usize {
        self.device_of.len() - self.awaiting.len()
    }

    /// Admits `request`: issued at once (onto `ready`) unless it overlaps a request
    /// open on its device, then it waits for every one it overlaps.
    fn admit(&mut self, request: u64, device: u32, range: ByteRange, ready: &mut Vec<u64>) {
        let open = &mut self.open[device as usize];
        let mut awaited = 0;
        for (earlier, open_range) in open.iter() {
            if open_range.start < range.end && range.start < open_range.end {
                self.waiters.entry(*earlier).or_default().push(request);
                awaited += 1;
            }
        }
        open.push((request, range));
        self.device_of.insert(request, device);
        if awaited == 0 {
            ready.push(request);
        } else {
            self.awaiting.insert(request, awaited);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(start: u64, end: u64) -> ByteRange {
        ByteRange { start, end }
    }

    #[test]
    fn an_overlapping_request_waits_for_every_earlier_one_it_overlaps() {
        let mut admission = ReplayAdmission::new(2, IN_FLIGHT_MAX);
        assert_eq!(admission.arrive(0, 0, range(0, 8192)), Ok(vec![0]));
        assert_eq!(admission.arrive(1, 0, range(4096, 12288)), Ok(vec![]), "overlaps 0");
        assert_eq!(admission.arrive(2, 0, range(8192, 16384)), Ok(vec![]), "overlaps 1 only");
        // Another device's same range is another disk's: no wait.
        assert_eq!(admission.arrive(3, 1, range(0, 8192)), Ok(vec![3]));
        assert_eq!(admission.arrive(4, 0, range(16384, 20480)), Ok(vec![4]), "apart");
        assert_eq!(admission.issued(), 3);
        assert_eq!(admission.done(0), Ok(vec![1]));
        assert_eq!(admission.done(1), Ok(vec![2]));
        assert_eq!(admission.done(2), Ok(vec![]));
        assert_eq!(admission.in_flight(), 2);
    }

    #[test]
    fn arrivals_beyond_the_bound_queue_in_order_and_still_wait_for_overlaps() {
        let mut admission = ReplayAdmission::new(1, 2);
        assert_eq!(admission.arrive(0, 0, range(0, 4096)), Ok(vec![0]));
        assert_eq!(admission.arrive(1, 0, range(8192, 12288)), Ok(vec![1]));
        assert_eq!(admission.arrive(2, 0, range(0, 4096)), Ok(vec![]), "queued");
        assert_eq!(admission.arrive(3, 0, range(20480, 24576)), Ok(vec![]), "queued behind 2");
        assert_eq!((admission.in_flight(), admission.queued()), (4, 2));
        assert_eq!(admission.arrive(3, 0, range(0, 4096)), Err(AdmissionError::ArrivedTwice(3)));
        // 1's place admits 2, which then waits for 0.
        assert_eq!(admission.done(1), Ok(vec![]));
        assert_eq!(admission.issued(), 1);
        // 0 done: 2 goes, and 0's place admits 3.
        assert_eq!(admission.done(0), Ok(vec![2, 3]));
        assert_eq!(admission.in_flight(), 2);
    }

    #[test]
    fn a_shell_naming_requests_wrongly_is_told_and_changes_nothing() {
        let mut admission = ReplayAdmission::new(1, 4);
        assert_eq!(admission.arrive(0, 0, range(0, 4096)), Ok(vec![0]));
        assert_eq!(admission.arrive(1, 0, range(0, 4096)), Ok(vec![]));
        assert_eq!(admission.arrive(0, 0, range(0, 4096)), Err(AdmissionError::ArrivedTwice(0)));
        let devices = 1;
        let wrong = AdmissionError::NoSuchDevice { request: 5, device: 1, devices };
        assert_eq!(admission.arrive(5, 1, range(0, 4096)), Err(wrong));
        assert_eq!(admission.done(1), Err(AdmissionError::NotIssued(1)), "still waiting");
        assert_eq!(admission.done(9), Err(AdmissionError::NotIssued(9)));
        assert_eq!(admission.done(0), Ok(vec![1]));
    }
}
