//! The records of a cluster an earlier build's gateway wrote (before issue 46): each
//! record in an object of its own (`SOMNUSR1`, [`record::decode`]) naming its data
//! objects by name (`s3/d/...`), and replaced data listed in `s3/t/` records for a
//! sweep. At start the gateway moves them into the names' attributes, each key or part
//! taking its data objects in one bind, and deletes what no record names any more: the
//! cluster then frees their space like any other, a grace later.

use somnus_core::cluster::{BindCondition, ObjectInfo};
use somnus_runtime::client::Bind;
use somnus_types::ByteRange;

use crate::record::{self, BucketRecord, ObjectRecord, RECORD_BYTES, UploadClaim, UploadRecord};
use crate::store::{Store, StoreError};

type Result<T> = std::result::Result<T, StoreError>;

/// Prefixes of an earlier build's names that only it made.
const LEGACY_DATA: &str = "s3/d/";
const LEGACY_RETIRED: &str = "s3/t/";

/// What a move did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Moved {
    /// Records moved into attributes.
    pub records: usize,
    /// Names deleted: retired records and data no record names.
    pub deleted: usize,
}

impl Store {
    /// Moves every record an earlier build wrote into its name's attributes, and
    /// deletes the retired data and the data objects no record names. Idempotent: a
    /// move cut short goes on at the next start.
    pub async fn move_legacy_records(&self) -> Result<Moved> {
        let mut moved = Moved::default();
        for prefix in ["s3/b/", "s3/u/", "s3/c/", "s3/k/", "s3/p/"] {
            for object in self.list_all(prefix).await? {
                if !object.attrs.is_empty() {
                    continue;
                }
                let Some(info) = self.stat(&object.name).await? else { continue };
                if info.attrs.is_empty() && !info.data.is_empty() {
                    self.move_record(prefix, info).await?;
                    moved.records += 1;
                }
            }
        }
        for prefix in [LEGACY_RETIRED, LEGACY_DATA] {
            let names: Vec<String> =
                self.list_all(prefix).await?.into_iter().map(|o| o.name).collect();
            for batch in names.chunks(somnus_core::cluster::mds::BIND_OBJECTS_MAX) {
                self.client().delete_many(batch.to_vec()).await?;
            }
            moved.deleted += names.len();
        }
        Ok(moved)
    }

    /// Moves the record `info`'s data holds into its attributes: a key's or a part's
    /// with the data objects it names taken into the name.
    async fn move_record(&self, prefix: &str, info: ObjectInfo) -> Result<()> {
        let bytes = self.legacy_bytes(&info).await?;
        let name = info.name.clone();
        let damaged = |error| StoreError::Record { name: name.clone(), error };
        let (attrs, taking) = match prefix {
            "s3/b/" => (
                record::to_attrs(&record::decode::<BucketRecord>(&bytes).map_err(damaged)?),
                Vec::new(),
            ),
            "s3/u/" => (
                record::to_attrs(&record::decode::<UploadRecord>(&bytes).map_err(damaged)?),
                Vec::new(),
            ),
            "s3/c/" => (
                record::to_attrs(&record::decode::<UploadClaim>(&bytes).map_err(damaged)?),
                Vec::new(),
            ),
            _ => {
                let mut object: ObjectRecord = record::decode(&bytes).map_err(damaged)?;
                let taking: Vec<String> = object.extents.iter().map(|e| e.object.clone()).collect();
                let sizes: Vec<u64> = object.extents.iter().map(|e| e.size).collect();
                object.parts = if sizes.len() > 1 { sizes } else { Vec::new() };
                object.extents.clear();
                (record::to_attrs(&object), taking)
            }
        };
        let mut data = Vec::with_capacity(taking.len());
        for extent in &taking {
            let Some(held) = self.stat(extent).await? else {
                return Err(StoreError::Record {
                    name: info.name.clone(),
                    error: record::RecordError::Truncated(0),
                });
            };
            data.extend(held.data.iter().map(|d| d.object));
        }
        let bind = Bind {
            name: info.name.clone(),
            data,
            attrs,
            taking,
            condition: BindCondition::Generation(info.generation),
            ..Bind::default()
        };
        self.bind(bind, || StoreError::NoSuchKey { bucket: String::new(), key: name.clone() })
            .await
            .map(drop)
    }

    /// The bytes of the record object `info` names (whole blocks).
    async fn legacy_bytes(&self, info: &ObjectInfo) -> Result<Vec<u8>> {
        let Some(first) = info.first() else { return Ok(Vec::new()) };
        let head_bytes = RECORD_BYTES.min(first.size_bytes);
        let head = self.client().read_from(first, ByteRange::new(0, head_bytes)).await?;
        Ok(match record::needs(&head) {
            None => head.to_vec(),
            Some(length) => {
                let length = length.min(first.size_bytes);
                self.client().read_from(first, ByteRange::new(0, length)).await?.to_vec()
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout;

    #[test]
    fn the_legacy_prefixes_are_none_of_the_gateways_own() {
        for own in [
            layout::bucket_marker("b"),
            layout::key_record("b", "k"),
            layout::upload_record("b", "u"),
            layout::part_record("b", "u", 1),
            layout::upload_claim("b", "u"),
        ] {
            assert!(!own.starts_with(LEGACY_DATA) && !own.starts_with(LEGACY_RETIRED), "{own}");
        }
    }
}
