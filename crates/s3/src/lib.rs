//! somnus's S3-compatible gateway: the S3 REST API (buckets, objects, listings, signed
//! requests) over the cluster's client library, so the tools people already use (the
//! AWS CLI, boto3, rclone) store objects in a cluster that sleeps. s3s parses the
//! requests and checks their signatures; [`store`] keeps buckets and objects as
//! cluster objects ([`layout`]); [`gateway`] gives each S3 operation its meaning.
//! docs/s3-compat.md lists what is supported.

pub mod bench;
pub mod client;
mod compat;
pub mod connections;
pub mod gateway;
pub mod https;
pub mod keys;
mod layout;
pub mod legacy;
pub mod multipart;
pub mod observe;
pub mod record;
pub mod serve;
pub mod sigv4;
pub mod store;

pub use connections::Limits;
pub use serve::{Credentials, serve, serve_logged, service, sweep_abandoned_uploads};
pub use store::{EtagMatch, Store, StoreError, WriteConditions};
