//! TensorBoard event files: TFRecord framing around `tensorflow.Event` protos with scalar
//! summaries, readable by `tensorboard --logdir`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// `tensorflow.Summary.Value` with only the scalar variant.
#[derive(Clone, PartialEq, prost::Message)]
struct SummaryValue {
    #[prost(string, tag = "1")]
    tag: String,
    #[prost(float, tag = "2")]
    simple_value: f32,
}

/// `tensorflow.Summary`.
#[derive(Clone, PartialEq, prost::Message)]
struct Summary {
    #[prost(message, repeated, tag = "1")]
    value: Vec<SummaryValue>,
}

/// `tensorflow.Event` with the two payloads we write.
#[derive(Clone, PartialEq, prost::Message)]
struct Event {
    #[prost(double, tag = "1")]
    wall_time: f64,
    #[prost(int64, tag = "2")]
    step: i64,
    #[prost(string, optional, tag = "3")]
    file_version: Option<String>,
    #[prost(message, optional, tag = "5")]
    summary: Option<Summary>,
}

fn masked_crc(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    (crc.rotate_right(15)).wrapping_add(0xa282_ead8)
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Appends scalar summaries to one event file.
#[derive(Debug)]
pub struct EventWriter {
    out: BufWriter<File>,
    path: PathBuf,
}

impl EventWriter {
    /// Creates `dir/events.out.tfevents.<time>.fleetrl` and writes the version header.
    pub fn create(dir: &Path) -> std::io::Result<EventWriter> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("events.out.tfevents.{}.fleetrl", now() as u64));
        let mut writer = EventWriter {
            out: BufWriter::new(File::create(&path)?),
            path,
        };
        let header = Event {
            wall_time: now(),
            step: 0,
            file_version: Some("brain.Event:2".into()),
            summary: None,
        };
        writer.write_event(&header)?;
        Ok(writer)
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes one scalar per `(tag, value)` at `step`, as a single event.
    pub fn scalars(&mut self, step: i64, values: &[(&str, f64)]) -> std::io::Result<()> {
        let value = values
            .iter()
            .map(|(tag, v)| SummaryValue {
                tag: tag.to_string(),
                simple_value: *v as f32,
            })
            .collect();
        let event = Event {
            wall_time: now(),
            step,
            file_version: None,
            summary: Some(Summary { value }),
        };
        self.write_event(&event)
    }

    /// Flushes buffered events to disk.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }

    fn write_event(&mut self, event: &Event) -> std::io::Result<()> {
        let data = prost::Message::encode_to_vec(event);
        let len = (data.len() as u64).to_le_bytes();
        self.out.write_all(&len)?;
        self.out.write_all(&masked_crc(&len).to_le_bytes())?;
        self.out.write_all(&data)?;
        self.out.write_all(&masked_crc(&data).to_le_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads the records back, checking both CRCs, and decodes the scalar.
    #[test]
    fn records_are_framed_and_decodable() {
        let dir = std::env::temp_dir().join(format!("fleetrl-tb-{}", std::process::id()));
        let mut w = EventWriter::create(&dir).unwrap();
        w.scalars(42, &[("loss", 0.5)]).unwrap();
        w.flush().unwrap();
        let bytes = std::fs::read(w.path()).unwrap();
        let mut events = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let len_bytes = &bytes[at..at + 8];
            let len = u64::from_le_bytes(len_bytes.try_into().unwrap()) as usize;
            assert_eq!(
                u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()),
                masked_crc(len_bytes)
            );
            let data = &bytes[at + 12..at + 12 + len];
            assert_eq!(
                u32::from_le_bytes(bytes[at + 12 + len..at + 16 + len].try_into().unwrap()),
                masked_crc(data)
            );
            events.push(<Event as prost::Message>::decode(data).unwrap());
            at += 16 + len;
        }
        assert_eq!(events[0].file_version.as_deref(), Some("brain.Event:2"));
        let value = &events[1].summary.as_ref().unwrap().value[0];
        assert_eq!(
            (events[1].step, value.tag.as_str(), value.simple_value),
            (42, "loss", 0.5)
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
