//! The network between servers: a link per server, each way, with a bandwidth, and a
//! round trip. A message holds the sender's transmit side and the receiver's receive
//! side for its transfer time, after the ones before it, then flies half a round trip.

use somnus_types::{VirtualDuration, VirtualInstant};

use crate::topology::NetworkParams;

#[derive(Clone, Copy, Debug, Default)]
struct Link {
    transmit_free: VirtualInstant,
    receive_free: VirtualInstant,
}

pub(crate) struct Network {
    params: NetworkParams,
    links: Vec<Link>,
}

impl Network {
    pub(crate) fn new(params: NetworkParams, servers: usize) -> Network {
        Network { params, links: vec![Link::default(); servers] }
    }

    /// Puts `bytes` on the wire from one server to another at `now`; returns the
    /// arrival time.
    pub(crate) fn send(
        &mut self,
        now: VirtualInstant,
        source: u32,
        target: u32,
        bytes: u64,
    ) -> VirtualInstant {
        assert_ne!(source, target, "a message to its own server needs no network");
        let transfer = VirtualDuration::from_nanos(
            (bytes as f64 / self.params.link_bytes_per_second * 1e9) as u64,
        );
        let start = now
            .max(self.links[source as usize].transmit_free)
            .max(self.links[target as usize].receive_free);
        let end = start + transfer;
        self.links[source as usize].transmit_free = end;
        self.links[target as usize].receive_free = end;
        end + VirtualDuration::from_nanos(self.params.round_trip.as_nanos() / 2)
    }
}
