//! Identifiers. Each is a newtype so that a volume index can never be passed where a
//! disk index is expected; the inner integer is the dense index into the owner's table.

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
