//! Identifiers. Each is a newtype so that a volume index can never be passed where a
//! disk index is expected. The ids of the simulated cluster (`id_type!`) are dense
//! indexes into their owner's table; the ids of the logger's log (`log_id_type!`) are
//! names chosen by writers and stored on disk, so they have no `index()`.

macro_rules! id_type {
    ($(#[$meta:meta])* $name:ident, $inner:ty, $prefix:literal) => {
        $(#[$meta])*
        #[derive(
            Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash,
            serde::Serialize, serde::Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(pub $inner);

        impl $name {
            /// The dense index this id stands for, for indexing a `Vec`.
            pub fn index(self) -> usize {
                // Ids are created from `Vec` lengths, which fit in usize by construction.
                self.0 as usize
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

id_type!(
    /// A volume: the unit a trace addresses and a manager owns (a RAID array).
    VolumeId, u32, "vol"
);
id_type!(
    /// A physical disk within the simulated cluster.
    DiskId, u32, "disk"
);
id_type!(
    /// A server (a machine); loggers on the same server are reachable without the network.
    ServerId, u32, "srv"
);
id_type!(
    /// A rack: the fault and off-load domain of rack-level off-loading.
    RackId, u32, "rack"
);
id_type!(
    /// A gear group (Sierra 3.2): every server is in exactly one of r, and every chunk
    /// group has one replica in each. Gear g keeps groups 0..g on.
    GearGroupId, u32, "gg"
);
id_type!(
    /// A chunk group (Sierra 3.1): the unit of placement, leases and epochs.
    ChunkGroupId, u32, "cg"
);
id_type!(
    /// A logger: a log partition on some volume that stores off-loaded writes.
    LoggerId, u32, "log"
);
id_type!(
    /// One I/O a state machine asked its shell to perform; the completion echoes it.
    IoId, u64, "io"
);
id_type!(
    /// One client request (a trace record) as seen by a volume manager.
    RequestId, u64, "req"
);

/// An id of the logger's log: a name, stored on disk as a little-endian `u64`
/// (docs/format/log.md), so no dense `index()`.
macro_rules! log_id_type {
    ($(#[$meta:meta])* $name:ident, $prefix:literal) => {
        $(#[$meta])*
        #[derive(
            Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash,
            serde::Serialize, serde::Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(pub u64);

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

log_id_type!(
    /// A writer of a logger's log: one volume manager or DVL, whose versions are
    /// monotonic (004 section 3.1, Sierra 3.3).
    OwnerId, "owner"
);
log_id_type!(
    /// An object (a volume, a chunk) of an owner, addressed by byte ranges.
    ObjectId, "object"
);
log_id_type!(
    /// The log sequence number of a record in a logger's log, assigned at append and
    /// kept by compaction copies. It orders records only for a delete-all; versions
    /// order data. 0 is never a record's.
    Lsn, "lsn"
);

/// Identifies one logger's log (one directory): every segment header and record carries
/// it, so that a segment copied in from another log is never taken for one of this
/// log's. Shown as 16 hex digits, as operators see it in `somnus logstore inspect`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct LogId(pub u64);

impl std::fmt::Display for LogId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_ids_display_as_operators_see_them() {
        assert_eq!(LogId(0x1a2b).to_string(), "0000000000001a2b");
        assert_eq!(OwnerId(7).to_string(), "owner7");
        assert_eq!(ObjectId(9).to_string(), "object9");
        assert_eq!(Lsn(3).to_string(), "lsn3");
        assert_eq!(Lsn::default(), Lsn(0));
    }
}
