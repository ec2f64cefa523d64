//! The commands of a running cluster: `somnus up` (a whole local cluster as child
//! processes), `somnus mds` and `somnus server` (one role each, from a cluster file),
//! `somnus s3` (its gateway), `somnus status` and `somnus gear`, `somnus replay`, and
//! the client verbs `put`, `get`, `rm`, `stat` and `ls`, which find the local cluster
//! without flags (`./somnus-data/cluster.toml`, or `SOMNUS_CLUSTER`).
//!
//! Its modules depend one way: `access` (the cluster file, a client) and `children`
//! (child processes) on nothing here; the commands on them; `up` on `s3` (the
//! gateway's keys) too, and `node` on `status` (a server's removal).

pub(crate) mod access;
pub(crate) mod children;
pub(crate) mod node;
pub(crate) mod objects;
pub(crate) mod replay;
pub(crate) mod s3;
pub(crate) mod status;
pub(crate) mod up;
