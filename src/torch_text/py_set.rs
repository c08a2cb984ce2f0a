//! Just enough of CPython's `set` (Objects/setobject.c, 3.8 to 3.13) to reproduce the order in
//! which `compare` lists the addresses of `before_segs - after_segs`.
//!
//! A set's iteration order is its hash table's slot order, which follows from the hashes, the
//! table size and the insertion order. torch builds each set with a set comprehension
//! (one-by-one adds, resizing as the table fills) and subtracts with `set.__sub__`, which either
//! adds the survivors to a fresh set or, when the left set is over four times the size of the
//! right one, copies the left set and deletes the common keys. Both paths are modelled here.

/// A `(address, total_size)` tuple of Python ints.
pub(super) type Key = (u64, u64);

const MIN_SIZE: usize = 8;
const LINEAR_PROBES: usize = 9;
const PERTURB_SHIFT: u32 = 5;

/// `_PyHASH_MODULUS`: Python hashes a non-negative int as its value modulo 2^61 - 1.
const HASH_MODULUS: u64 = (1 << 61) - 1;
const XXPRIME_1: u64 = 11_400_714_785_074_694_791;
const XXPRIME_2: u64 = 14_029_467_366_897_019_727;
const XXPRIME_5: u64 = 2_870_177_450_012_600_261;

/// `hash((a, b))` for non-negative ints, as the unsigned bits of `Py_hash_t` (the xxHash-based
/// `tuplehash` of Python >= 3.8).
pub(super) fn hash(key: Key) -> u64 {
    let mut acc = XXPRIME_5;
    for lane in [key.0 % HASH_MODULUS, key.1 % HASH_MODULUS] {
        acc = acc.wrapping_add(lane.wrapping_mul(XXPRIME_2));
        acc = acc.rotate_left(31);
        acc = acc.wrapping_mul(XXPRIME_1);
    }
    acc = acc.wrapping_add(2 ^ (XXPRIME_5 ^ 3_527_539));
    if acc == u64::MAX { 1_546_275_796 } else { acc }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Empty,
    /// A deleted entry: still occupies its slot for probing, skipped by iteration.
    Dummy,
    Active(u64, Key),
}

/// A set of keys laid out as CPython would lay them out.
#[derive(Debug, Clone)]
pub(super) struct PySet {
    slots: Vec<Slot>,
    /// Active plus dummy slots.
    fill: usize,
    /// Active slots.
    used: usize,
}

/// The slots CPython visits for `hash` in a table of `mask + 1` slots: at each stop, the
/// slot itself and (when they fit before the end) the next `LINEAR_PROBES` ones; then the
/// perturbed jump `i = i * 5 + 1 + perturb`.
fn probe(hash: u64, mask: usize, mut visit: impl FnMut(usize) -> bool) -> usize {
    let mut perturb = hash;
    let mut i = (hash as usize) & mask;
    loop {
        let run = if i + LINEAR_PROBES <= mask {
            LINEAR_PROBES
        } else {
            0
        };
        for slot in i..=i + run {
            if visit(slot) {
                return slot;
            }
        }
        perturb >>= PERTURB_SHIFT;
        i = (i
            .wrapping_mul(5)
            .wrapping_add(1)
            .wrapping_add(perturb as usize))
            & mask;
    }
}

impl PySet {
    /// `set()`: an empty table of `PySet_MINSIZE` slots.
    pub(super) fn new() -> Self {
        Self {
            slots: vec![Slot::Empty; MIN_SIZE],
            fill: 0,
            used: 0,
        }
    }

    /// `{k for k in keys}`.
    pub(super) fn from_keys(keys: &[Key]) -> Self {
        let mut set = Self::new();
        for &key in keys {
            set.add(key);
        }
        set
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// Keys in iteration order.
    pub(super) fn keys(&self) -> impl Iterator<Item = Key> + '_ {
        self.slots.iter().filter_map(|slot| match slot {
            Slot::Active(_, key) => Some(*key),
            _ => None,
        })
    }

    pub(super) fn len(&self) -> usize {
        self.used
    }

    /// `set_lookkey`: the slot holding `key`, if any.
    fn find(&self, key: Key) -> Option<usize> {
        let hash = hash(key);
        let slot = probe(hash, self.mask(), |i| match self.slots[i] {
            Slot::Empty => true,
            Slot::Active(h, k) => h == hash && k == key,
            Slot::Dummy => false,
        });
        matches!(self.slots[slot], Slot::Active(..)).then_some(slot)
    }

    pub(super) fn contains(&self, key: Key) -> bool {
        self.find(key).is_some()
    }

    /// `set_insert_clean`: place a key known to be absent in a table without dummies.
    fn insert_clean(slots: &mut [Slot], hash: u64, key: Key) {
        let mask = slots.len() - 1;
        let slot = probe(hash, mask, |i| slots[i] == Slot::Empty);
        slots[slot] = Slot::Active(hash, key);
    }

    /// `set_table_resize`: the smallest power of two above `min_used` (at least 8), the
    /// active keys re-placed in old slot order, dummies dropped.
    fn resize(&mut self, min_used: usize) {
        let mut size = MIN_SIZE;
        while size <= min_used {
            size <<= 1;
        }
        let old = std::mem::replace(&mut self.slots, vec![Slot::Empty; size]);
        for slot in old {
            if let Slot::Active(hash, key) = slot {
                Self::insert_clean(&mut self.slots, hash, key);
            }
        }
        self.fill = self.used;
    }

    /// `set_add_entry`, on a table without dummies (the only kind torch adds to here).
    pub(super) fn add(&mut self, key: Key) {
        let hash = hash(key);
        let mask = self.mask();
        let slots = &self.slots;
        let slot = probe(hash, mask, |i| match slots[i] {
            Slot::Empty => true,
            Slot::Active(h, k) => h == hash && k == key,
            Slot::Dummy => false,
        });
        if self.slots[slot] != Slot::Empty {
            return;
        }
        self.slots[slot] = Slot::Active(hash, key);
        self.fill += 1;
        self.used += 1;
        if self.fill * 5 >= mask * 3 {
            self.resize(if self.used > 50_000 {
                self.used * 2
            } else {
                self.used * 4
            });
        }
    }

    /// `set_discard_entry`: leave a dummy behind.
    fn discard(&mut self, key: Key) {
        if let Some(slot) = self.find(key) {
            self.slots[slot] = Slot::Dummy;
            self.used -= 1;
        }
    }

    /// `set.copy()` (`make_new_set` + `set_merge` into an empty set).
    fn copy(&self) -> Self {
        let mut copy = Self::new();
        if self.used == 0 {
            return copy;
        }
        if (copy.fill + self.used) * 5 >= copy.mask() * 3 {
            copy.resize((copy.used + self.used) * 2);
        }
        if copy.mask() == self.mask() && self.fill == self.used {
            // Same size and no dummies: CPython copies the table slot for slot.
            copy.slots.clone_from(&self.slots);
        } else {
            for slot in &self.slots {
                if let Slot::Active(hash, key) = *slot {
                    Self::insert_clean(&mut copy.slots, hash, key);
                }
            }
        }
        copy.fill = self.used;
        copy.used = self.used;
        copy
    }

    /// `self - other` (`set_difference`).
    pub(super) fn difference(&self, other: &Self) -> Self {
        if (self.len() >> 2) > other.len() {
            // `set_copy_and_difference` + `set_difference_update_internal`. (Its swap of a
            // much larger `other` for the intersection cannot happen on this path.)
            let mut result = self.copy();
            for key in other.keys() {
                result.discard(key);
            }
            if result.fill - result.used > result.mask() / 4 {
                result.resize(if result.used > 50_000 {
                    result.used * 2
                } else {
                    result.used * 4
                });
            }
            return result;
        }
        let mut result = Self::new();
        for key in self.keys() {
            if !other.contains(key) {
                result.add(key);
            }
        }
        result
    }
}
