//! Table checkpoints on disk: versioned, checksummed, written atomically.
//!
//! Layout under a checkpoint root:
//!
//! ```text
//! ROOT/replay-00000007/MANIFEST.json   {"format":"fleetrl-replay","version":1,"tables":[...]}
//! ROOT/replay-00000007/table-000.bin   one file per table
//! ```
//!
//! A checkpoint is written into a hidden `.replay-NNNNNNNN.tmp` directory, every file synced,
//! then renamed into place and the root synced, so a crash leaves either the whole checkpoint
//! or none. The manifest records each table file's length and CRC-32C. A table file is
//! (little-endian):
//!
//! ```text
//! "FLRTABLE" u32 version | u32 n, n bytes of JSON TableSpec | u32 n, n bytes of JSON state
//! then per item: u64 key, f64 priority, u32 times_sampled, each signature field's bytes in order
//! "FLRT-END"
//! ```
//!
//! [`read_latest`] refuses a checkpoint whose manifest, length, checksum or contents are wrong,
//! says why, and falls back to the previous one.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::{Counters, SnapshotItem, TableSnapshot};
use fleetrl_proto::table::TableSpec;

/// The format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

const FORMAT_NAME: &str = "fleetrl-replay";
const MAGIC: &[u8; 8] = b"FLRTABLE";
const END: &[u8; 8] = b"FLRT-END";
const MANIFEST: &str = "MANIFEST.json";
const PREFIX: &str = "replay-";

#[derive(Debug, Serialize, Deserialize)]
struct Manifest {
    format: String,
    version: u32,
    created_unix_ms: u128,
    tables: Vec<ManifestTable>,
}

#[derive(Debug, Serialize, Deserialize)]
struct ManifestTable {
    name: String,
    file: String,
    bytes: u64,
    crc32c: u32,
    items: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct TableState {
    counters: Counters,
    next_key: u64,
    items: u64,
}

/// Writes `tables` as a new checkpoint under `root` (created if missing), then deletes all but
/// the newest `keep` checkpoints. Returns the new checkpoint's directory.
pub fn write(root: &Path, tables: &[TableSnapshot], keep: usize) -> anyhow::Result<PathBuf> {
    fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
    let seq = list(root)?.last().map_or(1, |(seq, _)| seq + 1);
    let name = format!("{PREFIX}{seq:08}");
    let tmp = root.join(format!(".{name}.tmp"));
    if tmp.exists() {
        fs::remove_dir_all(&tmp).with_context(|| format!("clearing {}", tmp.display()))?;
    }
    fs::create_dir(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let mut manifest = Manifest {
        format: FORMAT_NAME.into(),
        version: FORMAT_VERSION,
        created_unix_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0),
        tables: Vec::new(),
    };
    for (index, table) in tables.iter().enumerate() {
        let file = format!("table-{index:03}.bin");
        let (bytes, crc32c) = write_table(&tmp.join(&file), table)
            .with_context(|| format!("writing table `{}`", table.spec.name))?;
        manifest.tables.push(ManifestTable {
            name: table.spec.name.clone(),
            file,
            bytes,
            crc32c,
            items: table.items.len() as u64,
        });
    }
    let manifest_path = tmp.join(MANIFEST);
    let mut out = File::create(&manifest_path)?;
    out.write_all(&serde_json::to_vec_pretty(&manifest)?)?;
    out.sync_all()?;
    sync_dir(&tmp)?;
    let dir = root.join(&name);
    fs::rename(&tmp, &dir).with_context(|| format!("renaming into {}", dir.display()))?;
    sync_dir(root)?;
    prune(root, keep.max(1))?;
    Ok(dir)
}

/// Reads the newest checkpoint under `root` that is whole and valid. A newer checkpoint that
/// is not is skipped with a warning naming the problem. `Ok(None)` when `root` holds no
/// checkpoint at all; an error when it holds some but none is valid.
pub fn read_latest(root: &Path) -> anyhow::Result<Option<(PathBuf, Vec<TableSnapshot>)>> {
    if !root.exists() {
        return Ok(None);
    }
    let found = list(root)?;
    let mut refused = Vec::new();
    for (_, dir) in found.iter().rev() {
        match read(dir) {
            Ok(tables) => return Ok(Some((dir.clone(), tables))),
            Err(error) => {
                tracing::error!(checkpoint = %dir.display(), error = format!("{error:#}"), "refusing a corrupt or partial replay checkpoint; trying the previous one");
                refused.push(format!("{}: {error:#}", dir.display()));
            }
        }
    }
    if refused.is_empty() {
        return Ok(None);
    }
    bail!(
        "no valid replay checkpoint under {} (move the bad ones aside to start empty): {}",
        root.display(),
        refused.join("; ")
    )
}

/// Reads one checkpoint directory, verifying its manifest, lengths and checksums.
pub fn read(dir: &Path) -> anyhow::Result<Vec<TableSnapshot>> {
    let manifest_path = dir.join(MANIFEST);
    let text =
        fs::read(&manifest_path).with_context(|| format!("reading {}", manifest_path.display()))?;
    let manifest: Manifest = serde_json::from_slice(&text)
        .with_context(|| format!("parsing {}", manifest_path.display()))?;
    ensure!(
        manifest.format == FORMAT_NAME,
        "{} is not a fleetrl replay checkpoint (format `{}`)",
        manifest_path.display(),
        manifest.format
    );
    ensure!(
        manifest.version == FORMAT_VERSION,
        "checkpoint format version {} is not supported by this build (it reads version {FORMAT_VERSION})",
        manifest.version
    );
    let mut tables = Vec::with_capacity(manifest.tables.len());
    for entry in &manifest.tables {
        let path = dir.join(&entry.file);
        ensure!(
            !entry.file.contains('/') && !entry.file.contains(".."),
            "manifest names a file outside the checkpoint: {}",
            entry.file
        );
        let data =
            Bytes::from(fs::read(&path).with_context(|| format!("reading {}", path.display()))?);
        ensure!(
            data.len() as u64 == entry.bytes,
            "{} has {} bytes, the manifest says {} (truncated?)",
            path.display(),
            data.len(),
            entry.bytes
        );
        let crc = crc32c::crc32c(&data);
        ensure!(
            crc == entry.crc32c,
            "{} fails its checksum (crc32c {crc:#010x}, manifest {:#010x})",
            path.display(),
            entry.crc32c
        );
        let table = parse_table(data).with_context(|| format!("decoding {}", path.display()))?;
        ensure!(
            table.spec.name == entry.name && table.items.len() as u64 == entry.items,
            "{} does not hold what the manifest lists",
            path.display()
        );
        tables.push(table);
    }
    Ok(tables)
}

/// Writes one table file; returns its length and CRC-32C.
fn write_table(path: &Path, table: &TableSnapshot) -> anyhow::Result<(u64, u32)> {
    let file = File::create(path)?;
    let mut out = Checksummed {
        inner: BufWriter::with_capacity(1 << 20, file),
        crc: 0,
        bytes: 0,
    };
    out.put(MAGIC)?;
    out.put(&FORMAT_VERSION.to_le_bytes())?;
    let spec = serde_json::to_vec(&table.spec)?;
    out.put(&(spec.len() as u32).to_le_bytes())?;
    out.put(&spec)?;
    let state = serde_json::to_vec(&TableState {
        counters: table.counters,
        next_key: table.next_key,
        items: table.items.len() as u64,
    })?;
    out.put(&(state.len() as u32).to_le_bytes())?;
    out.put(&state)?;
    for item in &table.items {
        out.put(&item.key.to_le_bytes())?;
        out.put(&item.priority.to_le_bytes())?;
        out.put(&item.times_sampled.to_le_bytes())?;
        ensure!(
            item.row.len() as u64 == table.spec.signature.item_bytes(),
            "item {} has {} bytes, the signature needs {}",
            item.key,
            item.row.len(),
            table.spec.signature.item_bytes()
        );
        out.put(&item.row)?;
    }
    out.put(END)?;
    let file = out.inner.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    Ok((out.bytes, out.crc))
}

/// A writer that keeps a running CRC-32C and length.
struct Checksummed<W: Write> {
    inner: W,
    crc: u32,
    bytes: u64,
}

impl<W: Write> Checksummed<W> {
    fn put(&mut self, data: &[u8]) -> std::io::Result<()> {
        self.crc = crc32c::crc32c_append(self.crc, data);
        self.bytes += data.len() as u64;
        self.inner.write_all(data)
    }
}

/// Reads a table file whose checksum was verified; item rows share `data`'s buffer.
fn parse_table(data: Bytes) -> anyhow::Result<TableSnapshot> {
    let mut reader = Reader { data, at: 0 };
    ensure!(
        reader.take(8)?.as_ref() == MAGIC,
        "not a fleetrl table file (bad magic)"
    );
    let version = reader.u32()?;
    ensure!(
        version == FORMAT_VERSION,
        "table file version {version} is not supported"
    );
    let len = reader.u32()? as usize;
    let spec: TableSpec = serde_json::from_slice(&reader.take(len)?).context("table spec")?;
    let len = reader.u32()? as usize;
    let state: TableState = serde_json::from_slice(&reader.take(len)?).context("table state")?;
    let row_bytes = spec.signature.item_bytes() as usize;
    let mut items = Vec::with_capacity(state.items.min(1 << 24) as usize);
    for _ in 0..state.items {
        let key = reader.u64()?;
        let priority = f64::from_le_bytes(reader.take(8)?.as_ref().try_into()?);
        let times_sampled = reader.u32()?;
        let row = reader.take(row_bytes)?;
        items.push(SnapshotItem {
            key,
            priority,
            times_sampled,
            row,
        });
    }
    ensure!(reader.take(8)?.as_ref() == END, "missing end marker");
    ensure!(
        reader.at == reader.data.len(),
        "trailing bytes after the end marker"
    );
    Ok(TableSnapshot {
        spec,
        counters: state.counters,
        next_key: state.next_key,
        items,
    })
}

struct Reader {
    data: Bytes,
    at: usize,
}

impl Reader {
    fn take(&mut self, n: usize) -> anyhow::Result<Bytes> {
        ensure!(
            self.data.len() - self.at >= n,
            "ends early: needed {n} bytes at offset {}",
            self.at
        );
        let out = self.data.slice(self.at..self.at + n);
        self.at += n;
        Ok(out)
    }

    fn u32(&mut self) -> anyhow::Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.as_ref().try_into()?))
    }

    fn u64(&mut self) -> anyhow::Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.as_ref().try_into()?))
    }
}

/// Checkpoint directories under `root`, oldest first, with their sequence numbers.
fn list(root: &Path) -> anyhow::Result<Vec<(u64, PathBuf)>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(root).with_context(|| format!("listing {}", root.display()))? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(seq) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        if entry.file_type()?.is_dir() {
            found.push((seq, entry.path()));
        }
    }
    found.sort();
    Ok(found)
}

fn prune(root: &Path, keep: usize) -> anyhow::Result<()> {
    let found = list(root)?;
    let excess = found.len().saturating_sub(keep);
    for (_, dir) in &found[..excess] {
        fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    Ok(())
}

fn sync_dir(dir: &Path) -> anyhow::Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffers::Table;
    use fleetrl_proto::table::FieldSpec;
    use fleetrl_proto::{Dtype, Tensor, TensorMap};

    fn spec() -> TableSpec {
        let mut spec = TableSpec::replay(
            "replay",
            8,
            1.0,
            1,
            fleetrl_proto::table::Signature {
                fields: vec![
                    FieldSpec::new("obs", Dtype::U8, &[2, 3]),
                    FieldSpec::new("reward", Dtype::F32, &[]),
                ],
            },
        );
        spec.sampler = fleetrl_proto::table::SelectorKind::Prioritized { exponent: 1.0 };
        spec.rate_limiter = fleetrl_proto::table::RateLimiterSpec::MinSize { min_size: 1 };
        spec
    }

    fn item(v: u8) -> TensorMap {
        TensorMap::from_pairs([
            ("obs", Tensor::from_slice(&[2, 3], &[v; 6])),
            ("reward", Tensor::scalar(v as f32)),
        ])
    }

    async fn filled() -> Table {
        let table = Table::seeded(&spec(), 1).unwrap();
        for v in 0..12u8 {
            table.insert(item(v), v as f64 + 0.5).await.unwrap();
        }
        table.update_priorities(&[(10, 99.0)]).unwrap();
        table.sample(3).await.unwrap();
        table
    }

    #[tokio::test]
    async fn round_trips_items_priorities_and_counters() {
        let dir = tempdir();
        let table = filled().await;
        let before = table.snapshot();
        let path = write(&dir, std::slice::from_ref(&before), 2).unwrap();
        assert!(path.ends_with("replay-00000001"));
        let (read_path, tables) = read_latest(&dir).unwrap().unwrap();
        assert_eq!(read_path, path);
        assert_eq!(tables, vec![before.clone()]);
        let restored = Table::restore(tables.into_iter().next().unwrap()).unwrap();
        assert_eq!(restored.snapshot(), before);
        assert_eq!(restored.info().counters, table.info().counters);
    }

    #[tokio::test]
    async fn keeps_the_newest_and_falls_back_past_a_corrupt_one() {
        let dir = tempdir();
        let table = filled().await;
        let first = write(&dir, &[table.snapshot()], 2).unwrap();
        table.insert(item(42), 1.0).await.unwrap();
        let second = write(&dir, &[table.snapshot()], 2).unwrap();
        let third = write(&dir, &[table.snapshot()], 2).unwrap();
        assert!(!first.exists(), "only the newest two are kept");
        // Flip one byte of the newest: refused, and the previous good one is used.
        let file = third.join("table-000.bin");
        let mut bytes = fs::read(&file).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0xff;
        fs::write(&file, bytes).unwrap();
        let err = read(&third).unwrap_err();
        assert!(format!("{err:#}").contains("fails its checksum"), "{err:#}");
        let (path, _) = read_latest(&dir).unwrap().unwrap();
        assert_eq!(path, second);
        // Truncate the other one too: nothing valid is left, and the error says so.
        let file = second.join("table-000.bin");
        let len = fs::metadata(&file).unwrap().len();
        File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_len(len - 10)
            .unwrap();
        let err = format!("{:#}", read_latest(&dir).unwrap_err());
        assert!(
            err.contains("no valid replay checkpoint") && err.contains("truncated"),
            "{err}"
        );
    }

    #[test]
    fn a_partial_write_is_invisible_and_an_empty_root_has_nothing() {
        let dir = tempdir();
        assert!(read_latest(&dir.join("missing")).unwrap().is_none());
        fs::create_dir_all(dir.join(".replay-00000001.tmp")).unwrap();
        assert!(read_latest(&dir).unwrap().is_none());
        fs::create_dir_all(dir.join("replay-00000002")).unwrap();
        let err = format!("{:#}", read_latest(&dir).unwrap_err());
        assert!(err.contains("MANIFEST.json"), "{err}");
    }

    fn tempdir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "fleetrl-persist-{}-{}",
            std::process::id(),
            rand::random::<u64>()
        ));
        fs::create_dir_all(&dir).unwrap();
        dir
    }
}
