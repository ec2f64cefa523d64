//! A bounded slab: slots reused through a free list, each with a generation so that a
//! stale handle (a completion echoed twice, say) is caught instead of aliasing.

#[derive(Clone, Debug)]
enum Slot<T> {
    Occupied { generation: u32, value: T },
    Free { generation: u32, next_free: Option<u32> },
}

#[derive(Clone, Debug)]
pub struct Slab<T> {
    slots: Vec<Slot<T>>,
    free_head: Option<u32>,
    len: usize,
    capacity_max: usize,
}

/// A handle: slot index in the low 32 bits, generation in the high 32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key(pub u64);

impl Key {
    fn new(index: u32, generation: u32) -> Key {
        Key(u64::from(generation) << 32 | u64::from(index))
    }

    fn index(self) -> u32 {
        self.0 as u32
    }

    fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

impl<T> Slab<T> {
    pub fn new(capacity_max: usize) -> Slab<T> {
        assert!(capacity_max > 0 && capacity_max <= u32::MAX as usize, "slab bound out of range");
        Slab { slots: Vec::new(), free_head: None, len: 0, capacity_max }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn is_full(&self) -> bool {
        self.len >= self.capacity_max
    }

    /// Stores `value`; `None` when the slab is at its bound (backpressure).
    pub fn insert(&mut self, value: T) -> Option<Key> {
        if self.is_full() {
            return None;
        }
        self.len += 1;
        if let Some(index) = self.free_head {
            let slot = &mut self.slots[index as usize];
            let Slot::Free { generation, next_free } = *slot else {
                unreachable!("free list points at an occupied slot {index}");
            };
            self.free_head = next_free;
            let generation = generation.wrapping_add(1);
            *slot = Slot::Occupied { generation, value };
            return Some(Key::new(index, generation));
        }
        let index = self.slots.len() as u32;
        self.slots.push(Slot::Occupied { generation: 0, value });
        Some(Key::new(index, 0))
    }

    pub fn get(&self, key: Key) -> Option<&T> {
        match self.slots.get(key.index() as usize) {
            Some(Slot::Occupied { generation, value }) if *generation == key.generation() => {
                Some(value)
            }
            _ => None,
        }
    }

    pub fn get_mut(&mut self, key: Key) -> Option<&mut T> {
        match self.slots.get_mut(key.index() as usize) {
            Some(Slot::Occupied { generation, value }) if *generation == key.generation() => {
                Some(value)
            }
            _ => None,
        }
    }

    pub fn remove(&mut self, key: Key) -> Option<T> {
        let slot = self.slots.get_mut(key.index() as usize)?;
        let generation = match slot {
            Slot::Occupied { generation, .. } if *generation == key.generation() => *generation,
            _ => return None,
        };
        let old = std::mem::replace(slot, Slot::Free { generation, next_free: self.free_head });
        self.free_head = Some(key.index());
        self.len -= 1;
        match old {
            Slot::Occupied { value, .. } => Some(value),
            Slot::Free { .. } => unreachable!("checked occupied above"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_keys_miss_and_the_bound_holds() {
        // Goal: a removed key never reaches the value that reused its slot, and the
        // slab refuses inserts past its bound instead of growing.
        let mut slab = Slab::new(2);
        let a = slab.insert("a").unwrap();
        let b = slab.insert("b").unwrap();
        assert!(slab.insert("c").is_none());
        assert_eq!(slab.remove(a), Some("a"));
        let c = slab.insert("c").unwrap();
        assert_ne!(a, c);
        assert_eq!(slab.get_mut(a), None);
        assert_eq!(slab.remove(a), None);
        assert_eq!(slab.get_mut(c).copied(), Some("c"));
        assert_eq!(slab.remove(b), Some("b"));
        assert_eq!(slab.len(), 1);
    }
}
