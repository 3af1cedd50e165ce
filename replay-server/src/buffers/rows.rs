//! Where a table's items live: every item of a table has the same fields with fixed shapes, so
//! an item is one row of `item_bytes` bytes (its fields' bytes in signature order) in a page of
//! rows. A table of a million CartPole transitions is then 45 MB of rows plus a few words of
//! bookkeeping per item, where a map of small tensors per item took over 1 KB each (and an
//! item kept its whole insert request's buffer alive).
//!
//! Pages are `Arc`s so a checkpoint can hold the table's rows without copying them: a write
//! into a page a snapshot still holds copies that page first (copy on write), so a snapshot
//! never sees a later write.

use std::sync::Arc;

use bytes::Bytes;
use fleetrl_proto::table::{ReplayError, Signature};
use fleetrl_proto::{Tensor, TensorMap};

/// Bytes a page aims for; a page holds at least one row.
const PAGE_BYTES: usize = 1 << 20;

/// One signature field's place in a row.
#[derive(Debug, Clone)]
struct Column {
    name: String,
    dtype: i32,
    shape: Vec<i64>,
    offset: usize,
    len: usize,
}

/// Fixed-size rows in pages, addressed by slot. Freed slots are reused before new ones.
#[derive(Debug)]
pub struct Rows {
    columns: Vec<Column>,
    row_bytes: usize,
    per_page: usize,
    pages: Vec<Arc<Vec<u8>>>,
    /// Slots below this were handed out at least once.
    high_water: u32,
    free: Vec<u32>,
}

impl Rows {
    /// An empty store for items of `signature`.
    pub fn new(signature: &Signature) -> Rows {
        let mut offset = 0;
        let columns = signature
            .fields
            .iter()
            .map(|field| {
                let len = field.bytes() as usize;
                let column = Column {
                    name: field.name.clone(),
                    dtype: field.dtype as i32,
                    shape: field.shape.clone(),
                    offset,
                    len,
                };
                offset += len;
                column
            })
            .collect();
        Rows {
            columns,
            row_bytes: offset,
            per_page: (PAGE_BYTES / offset.max(1)).max(1),
            pages: Vec::new(),
            high_water: 0,
            free: Vec::new(),
        }
    }

    /// Bytes one row takes.
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// Copies a validated item into a free slot and returns the slot.
    pub fn put(&mut self, item: &TensorMap) -> u32 {
        let slot = self.claim();
        let (page, at) = self.place(slot);
        let row = &mut Arc::make_mut(&mut self.pages[page])[at..at + self.row_bytes];
        for column in &self.columns {
            let data = &item.tensors[&column.name].data;
            row[column.offset..column.offset + column.len].copy_from_slice(data);
        }
        slot
    }

    /// Copies a row (a checkpoint's bytes, fields in signature order) into a free slot.
    pub fn put_row(&mut self, bytes: &[u8]) -> Result<u32, ReplayError> {
        if bytes.len() != self.row_bytes {
            return Err(ReplayError::InvalidRequest(format!(
                "a stored item has {} bytes, the signature needs {}",
                bytes.len(),
                self.row_bytes
            )));
        }
        let slot = self.claim();
        let (page, at) = self.place(slot);
        Arc::make_mut(&mut self.pages[page])[at..at + self.row_bytes].copy_from_slice(bytes);
        Ok(slot)
    }

    /// Gives a slot back; its bytes are overwritten by a later put.
    pub fn release(&mut self, slot: u32) {
        self.free.push(slot);
    }

    /// Frees every slot and returns the pages' memory.
    pub fn clear(&mut self) {
        self.pages.clear();
        self.free.clear();
        self.high_water = 0;
    }

    /// A row's bytes.
    pub fn row(&self, slot: u32) -> &[u8] {
        let (page, at) = self.place(slot);
        &self.pages[page][at..at + self.row_bytes]
    }

    /// Stacks the rows at `slots` field by field into a batch (`[slots.len(), shape...]`).
    pub fn stack(&self, slots: &[u32]) -> TensorMap {
        let mut batch = TensorMap::default();
        for column in &self.columns {
            let mut data = Vec::with_capacity(column.len * slots.len());
            for &slot in slots {
                let row = self.row(slot);
                data.extend_from_slice(&row[column.offset..column.offset + column.len]);
            }
            let mut shape = Vec::with_capacity(column.shape.len() + 1);
            shape.push(slots.len() as i64);
            shape.extend_from_slice(&column.shape);
            batch.tensors.insert(
                column.name.clone(),
                Tensor {
                    dtype: column.dtype,
                    shape,
                    data: Bytes::from(data),
                },
            );
        }
        batch
    }

    /// Views of the rows at `slots` that share the pages (no copy): what a checkpoint writes.
    /// Later writes copy a shared page first, so these views never change.
    pub fn shared(&self, slots: impl Iterator<Item = u32>) -> Vec<Bytes> {
        let mut pages: Vec<Option<Bytes>> = vec![None; self.pages.len()];
        slots
            .map(|slot| {
                let (page, at) = self.place(slot);
                let whole = pages[page]
                    .get_or_insert_with(|| Bytes::from_owner(SharedPage(self.pages[page].clone())));
                whole.slice(at..at + self.row_bytes)
            })
            .collect()
    }

    fn claim(&mut self) -> u32 {
        if let Some(slot) = self.free.pop() {
            return slot;
        }
        let slot = self.high_water;
        self.high_water = slot
            .checked_add(1)
            .expect("a table holds fewer than 2^32 items (TableSpec::check caps max_size)");
        let (page, _) = self.place(slot);
        if page == self.pages.len() {
            // Zeroed memory the kernel maps lazily: a page costs what its rows use.
            self.pages
                .push(Arc::new(vec![0; self.per_page * self.row_bytes]));
        }
        slot
    }

    fn place(&self, slot: u32) -> (usize, usize) {
        let slot = slot as usize;
        (
            slot / self.per_page,
            (slot % self.per_page) * self.row_bytes,
        )
    }
}

/// A page as the owner of [`Bytes`] views.
struct SharedPage(Arc<Vec<u8>>);

impl AsRef<[u8]> for SharedPage {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// Splits a checkpoint row back into an item, its tensors sharing the row's bytes.
pub fn item_of_row(signature: &Signature, row: &Bytes) -> TensorMap {
    let mut item = TensorMap::default();
    let mut offset = 0;
    for field in &signature.fields {
        let len = field.bytes() as usize;
        item.tensors.insert(
            field.name.clone(),
            Tensor {
                dtype: field.dtype as i32,
                shape: field.shape.clone(),
                data: row.slice(offset..offset + len),
            },
        );
        offset += len;
    }
    item
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetrl_proto::table::FieldSpec;
    use fleetrl_proto::Dtype;

    fn signature() -> Signature {
        Signature {
            fields: vec![
                FieldSpec::new("x", Dtype::F32, &[2]),
                FieldSpec::new("v", Dtype::I64, &[]),
            ],
        }
    }

    fn item(i: i64) -> TensorMap {
        TensorMap::from_pairs([
            ("x", Tensor::from_slice(&[2], &[i as f32, -(i as f32)])),
            ("v", Tensor::scalar(i)),
        ])
    }

    #[test]
    fn stacks_every_field_with_a_leading_dim() {
        let mut rows = Rows::new(&signature());
        assert_eq!(rows.row_bytes(), 16);
        let slots: Vec<u32> = (1..=3).map(|i| rows.put(&item(i))).collect();
        let batch = rows.stack(&[slots[2], slots[0], slots[2]]);
        let x = batch.field("x").unwrap();
        assert_eq!(x.shape, vec![3, 2]);
        assert_eq!(
            x.to_vec::<f32>().unwrap(),
            vec![3.0, -3.0, 1.0, -1.0, 3.0, -3.0]
        );
        let v = batch.field("v").unwrap();
        assert_eq!(v.shape, vec![3]);
        assert_eq!(v.dtype, Dtype::I64 as i32);
        assert_eq!(v.to_vec::<i64>().unwrap(), vec![3, 1, 3]);
    }

    #[test]
    fn reuses_released_slots_and_spans_pages() {
        let mut rows = Rows::new(&signature());
        let per_page = PAGE_BYTES / 16;
        let slots: Vec<u32> = (0..per_page as i64 + 5)
            .map(|i| rows.put(&item(i)))
            .collect();
        assert_eq!(rows.pages.len(), 2);
        rows.release(slots[7]);
        let again = rows.put(&item(-1));
        assert_eq!(again, slots[7], "a freed slot is reused first");
        let last = *slots.last().unwrap();
        let batch = rows.stack(&[again, last]);
        assert_eq!(
            batch.field("v").unwrap().to_vec::<i64>().unwrap(),
            vec![-1, per_page as i64 + 4]
        );
        rows.clear();
        assert!(rows.pages.is_empty());
        assert_eq!(rows.put(&item(9)), 0);
    }

    #[test]
    fn a_shared_view_never_sees_a_later_write() {
        let mut rows = Rows::new(&signature());
        let a = rows.put(&item(1));
        let b = rows.put(&item(2));
        let views = rows.shared([a, b].into_iter());
        rows.release(a);
        let reused = rows.put(&item(7));
        assert_eq!(reused, a);
        // The snapshot still holds item 1's bytes; the table holds item 7's.
        let seen = item_of_row(&signature(), &views[0]);
        assert_eq!(seen.field("v").unwrap().to_vec::<i64>().unwrap(), vec![1]);
        assert_eq!(
            rows.stack(&[a])
                .field("v")
                .unwrap()
                .to_vec::<i64>()
                .unwrap(),
            vec![7]
        );
        assert_eq!(views[1].len(), 16);
        assert!(
            rows.put_row(&[0; 3]).is_err(),
            "a row of the wrong length is refused"
        );
    }
}
