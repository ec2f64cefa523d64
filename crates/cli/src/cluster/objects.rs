//! The client verbs `put`, `get`, `rm`, `stat` and `ls`, which find the local cluster
//! without flags (`./somnus-data/cluster.toml`, or `SOMNUS_CLUSTER`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use somnus_runtime::client::object_file::ObjectError;

use super::access::{ClusterArg, with_client};

#[derive(Args)]
pub(crate) struct LsArgs {
    /// Only the objects whose names start with this.
    #[arg(default_value = "")]
    prefix: String,
    /// Also the S3 gateway's own names (`s3/...`: buckets, keys' records, uploads).
    #[arg(long)]
    all: bool,
    #[command(flatten)]
    cluster: ClusterArg,
}

#[derive(Args)]
pub(crate) struct PutArgs {
    /// The file to store (`-` for standard input).
    file: PathBuf,
    /// The object's name.
    key: String,
    #[command(flatten)]
    cluster: ClusterArg,
}

#[derive(Args)]
pub(crate) struct GetArgs {
    /// The object's name.
    key: String,
    /// Where to write it (`-` for standard output).
    file: PathBuf,
    #[command(flatten)]
    cluster: ClusterArg,
}

#[derive(Args)]
pub(crate) struct KeyArgs {
    /// The object's name.
    key: String,
    #[command(flatten)]
    cluster: ClusterArg,
}

pub(crate) fn put(args: PutArgs) -> Result<()> {
    let key = &args.key;
    let length = if args.file.as_os_str() == "-" {
        // The object's size is fixed when it is created: standard input is read whole.
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes).context("reading stdin")?;
        let length = bytes.len() as u64;
        with_client(&args.cluster, |client| async move {
            client.put(key, bytes.into()).await.with_context(|| format!("put {key:?}"))
        })?;
        length
    } else {
        let cannot_read = || format!("cannot read {}", args.file.display());
        let mut file = std::fs::File::open(&args.file).with_context(cannot_read)?;
        let length = file.metadata().with_context(cannot_read)?.len();
        with_client(&args.cluster, |client| async move {
            let stored = client.put_from(key, length, &mut file).await;
            stored.with_context(|| format!("put {key:?} from {}", args.file.display()))
        })?;
        length
    };
    noteln!("stored {:?}: {length} bytes", args.key);
    Ok(())
}

pub(crate) fn get(args: GetArgs) -> Result<()> {
    let key = &args.key;
    if args.file.as_os_str() == "-" {
        let mut out = std::io::stdout();
        let got = with_client(&args.cluster, |client| async move {
            client.get_into(key, &mut out).await.map_err(anyhow::Error::from)
        });
        return match got {
            Err(error) if stdout_closed(&error) => Err(crate::output::StdoutClosed.into()),
            Err(error) => Err(error.context(format!("get {key:?}"))),
            Ok(_) => Ok(()),
        };
    }
    // Written beside the target and renamed over it once whole and checked: a failed
    // get leaves no part of a file, and no earlier file is lost.
    let part = part_path(&args.file);
    let cannot_write = || format!("cannot write {}", part.display());
    let mut file = std::fs::File::create(&part).with_context(cannot_write)?;
    let got = with_client(&args.cluster, |client| async move {
        client.get_into(key, &mut file).await.with_context(|| format!("get {key:?}"))
    })
    .and_then(|length| {
        std::fs::rename(&part, &args.file)
            .with_context(|| format!("cannot write {}", args.file.display()))?;
        Ok(length)
    });
    match got {
        Ok(length) => {
            noteln!("wrote {}: {length} bytes", args.file.display());
            Ok(())
        }
        Err(error) => {
            let _ = std::fs::remove_file(&part);
            Err(error)
        }
    }
}

/// `FILE.somnus-part` beside `file`: where `get` writes before the rename.
fn part_path(file: &Path) -> PathBuf {
    let mut name = file.file_name().unwrap_or_default().to_owned();
    name.push(".somnus-part");
    file.with_file_name(name)
}

/// Whether `error` is standard output closed by its reader (`somnus get KEY - | head`).
fn stdout_closed(error: &anyhow::Error) -> bool {
    matches!(
        error.downcast_ref::<ObjectError>(),
        Some(ObjectError::Sink(e)) if e.kind() == std::io::ErrorKind::BrokenPipe
    )
}

pub(crate) fn rm(args: KeyArgs) -> Result<()> {
    let key = &args.key;
    with_client(&args.cluster, |client| async move {
        client.delete(key).await.with_context(|| format!("rm {key:?}"))
    })?;
    noteln!("removed {:?}", args.key);
    Ok(())
}

pub(crate) fn stat(args: KeyArgs) -> Result<()> {
    let key = &args.key;
    let info = with_client(&args.cluster, |client| async move {
        client.stat(key).await.with_context(|| format!("stat {key:?}"))
    })?;
    outln!("name        {}", info.name)?;
    outln!("object      {}", info.object.0)?;
    let stored = serde_json::from_slice::<serde_json::Value>(&info.attrs).ok();
    if let Some(size) = stored.and_then(|v| v.get("size")?.as_u64()) {
        outln!("stored      {size} bytes")?;
    }
    outln!("size        {} bytes (with the header block)", info.size_bytes)?;
    outln!("chunk size  {} bytes", info.chunk_size_bytes)?;
    let groups: Vec<String> = info.chunk_groups.iter().map(|g| g.0.to_string()).collect();
    outln!("groups      {}", groups.join(" "))?;
    Ok(())
}

pub(crate) fn ls(args: LsArgs) -> Result<()> {
    let prefix = &args.prefix;
    let objects = with_client(&args.cluster, |client| async move {
        let mut all: Vec<somnus_core::cluster::ListedObject> = Vec::new();
        loop {
            let after = all.last().map(|o| o.name.clone());
            let (page, more) = client
                .list_page_with(prefix, after.as_deref(), 1000, true)
                .await
                .with_context(|| format!("ls {prefix:?}"))?;
            let empty = page.is_empty();
            all.extend(page);
            if !more || empty {
                return anyhow::Ok(all);
            }
        }
    })?;
    let mut shown = 0;
    for object in objects.iter().filter(|o| args.all || !o.name.starts_with(INTERNAL)) {
        outln!("{:>14}  {}", stored_size(object), object.name)?;
        shown += 1;
    }
    let hidden = objects.len() - shown;
    match hidden {
        0 => noteln!("{shown} objects"),
        _ => noteln!("{shown} objects ({hidden} of the S3 gateway's own not shown: --all)"),
    }
    Ok(())
}

/// The names the S3 gateway keeps its buckets, keys and uploads under.
const INTERNAL: &str = "s3/";

/// The bytes an object holds as its writer stored them: the size its attributes name
/// (`somnus put`'s and the S3 gateway's records), else its data objects' (whole
/// blocks).
fn stored_size(object: &somnus_core::cluster::ListedObject) -> u64 {
    let named = serde_json::from_slice::<serde_json::Value>(&object.attrs).ok();
    named.and_then(|v| v.get("size")?.as_u64()).unwrap_or(object.size_bytes)
}
