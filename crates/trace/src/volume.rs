//! The volume table: interned volume names and their dense [`VolumeId`]s.

use std::collections::BTreeMap;

use somnus_types::VolumeId;

/// The most volumes one trace set may name. MSR Cambridge has 36; a bound keeps a
/// garbage file (say, random device numbers) from growing the table without limit.
pub const VOLUMES_MAX: usize = 1 << 20;

/// The longest volume name, in bytes (the binary format stores it with a `u16` length).
pub const VOLUME_NAME_BYTES_MAX: usize = 255;

/// Volume names and their ids, in order of first appearance: the first name interned
/// is `VolumeId(0)`. Deterministic: the same files in the same order give the same ids.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumeTable {
    names: Vec<Box<str>>,
    ids: BTreeMap<Box<str>, VolumeId>,
}

/// Why a name could not be added to a [`VolumeTable`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VolumeTableError {
    #[error("volume name is empty")]
    EmptyName,
    #[error("volume table is full ({VOLUMES_MAX} volumes)")]
    Full,
    #[error("volume name is longer than {VOLUME_NAME_BYTES_MAX} bytes")]
    NameTooLong,
}

impl VolumeTable {
    /// An empty table.
    pub fn new() -> VolumeTable {
        VolumeTable::default()
    }

    /// The id of `name`, adding it with the next dense id if it is new.
    pub fn intern(&mut self, name: &str) -> Result<VolumeId, VolumeTableError> {
        if let Some(&id) = self.ids.get(name) {
            return Ok(id);
        }
        if name.is_empty() {
            return Err(VolumeTableError::EmptyName);
        }
        if name.len() > VOLUME_NAME_BYTES_MAX {
            return Err(VolumeTableError::NameTooLong);
        }
        if self.names.len() >= VOLUMES_MAX {
            return Err(VolumeTableError::Full);
        }
        // The length is below VOLUMES_MAX (2^20), so it fits in u32.
        let id = VolumeId(self.names.len() as u32);
        self.names.push(name.into());
        self.ids.insert(name.into(), id);
        assert_eq!(self.names.len(), self.ids.len(), "volume table maps disagree");
        Ok(id)
    }

    /// The id of `name`, if it is in the table.
    pub fn id(&self, name: &str) -> Option<VolumeId> {
        self.ids.get(name).copied()
    }

    /// The name of `id`, if the table has that many volumes.
    pub fn name(&self, id: VolumeId) -> Option<&str> {
        self.names.get(id.index()).map(|name| &**name)
    }

    /// The number of volumes.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether the table has no volumes.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Every volume in id order.
    pub fn iter(&self) -> impl Iterator<Item = (VolumeId, &str)> {
        self.names.iter().enumerate().map(|(index, name)| (VolumeId(index as u32), &**name))
    }
}

impl serde::Serialize for VolumeTable {
    /// A table serializes as the list of names in id order: the id is the position.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.names.iter())
    }
}

/// Resolves a volume name to an id while a file is read: the pre-scan interns names
/// into the set's table, the replay pass only looks them up in the finished table.
pub(crate) trait VolumeResolver {
    fn resolve(&mut self, name: &str) -> Result<VolumeId, String>;
}

impl VolumeResolver for VolumeTable {
    fn resolve(&mut self, name: &str) -> Result<VolumeId, String> {
        self.intern(name).map_err(|error| format!("volume {name:?}: {error}"))
    }
}

/// A finished table: resolving a name it does not hold means the file changed
/// between the pre-scan and the replay.
pub(crate) struct FrozenVolumes<'a>(pub(crate) &'a VolumeTable);

impl VolumeResolver for FrozenVolumes<'_> {
    fn resolve(&mut self, name: &str) -> Result<VolumeId, String> {
        self.0.id(name).ok_or_else(|| {
            format!("volume {name:?} was not in the file when the trace set was opened")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_dense_in_order_of_first_appearance() {
        // Goal: interning is deterministic and idempotent. Method: intern names with
        // repeats and check the ids and the reverse map.
        let mut table = VolumeTable::new();
        assert_eq!(table.intern("hm_0"), Ok(VolumeId(0)));
        assert_eq!(table.intern("rsrch_1"), Ok(VolumeId(1)));
        assert_eq!(table.intern("hm_0"), Ok(VolumeId(0)));
        assert_eq!(table.len(), 2);
        assert_eq!(table.name(VolumeId(1)), Some("rsrch_1"));
        assert_eq!(table.id("nope"), None);
        assert_eq!(table.intern(""), Err(VolumeTableError::EmptyName));
        assert_eq!(table.intern(&"x".repeat(256)), Err(VolumeTableError::NameTooLong));
    }
}
