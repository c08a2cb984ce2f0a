//! Pickles whose trace references memoized entries again and again: the shape of issue 18's
//! memory attack (2 bytes of pickle per event, 1 with DUP, and a device list named many times
//! in `device_traces` costs 2 bytes per whole trace), built by hand as torch never writes them.

/// How a trace shares its entries.
#[derive(Debug, Clone, Copy)]
pub struct SharedTrace {
    /// Events in the device's list.
    pub events: usize,
    /// Distinct memoized entries the list cycles through (1 to 3: alloc, free_completed,
    /// free_requested).
    pub entries: usize,
    /// Repeats each entry with DUP (1 byte per event) instead of BINGET (2).
    pub by_dup: bool,
    /// How many times `device_traces` names the device's list (each a device of its own).
    pub devices: usize,
    /// The address every entry names (pickles that differ by it have different ids).
    pub addr: i32,
}

impl SharedTrace {
    /// `events` events cycling through an alloc and a free of one address, by BINGET.
    pub fn new(events: usize, addr: i32) -> Self {
        Self {
            events,
            entries: 2,
            by_dup: false,
            devices: 1,
            addr,
        }
    }

    pub fn pickle(&self) -> Vec<u8> {
        let entries = self.entries.clamp(1, 3);
        let mut out = b"\x80\x02}(".to_vec();
        text(&mut out, "segments");
        out.push(b']');
        text(&mut out, "device_traces");
        // The device_traces list, then the device's list (memo 0) on top of it.
        out.extend_from_slice(b"]]r\x00\x00\x00\x00(");
        let actions = ["alloc", "free_completed", "free_requested"];
        let first = self.events.min(entries);
        for (memo, action) in (1u8..).zip(&actions[..first]) {
            entry(&mut out, action, self.addr, 512);
            out.extend_from_slice(&[b'r', memo, 0, 0, 0]);
        }
        out.push(b'e');
        let mut left = self.events - first;
        let mut next = 0;
        while left > 0 {
            let batch = left.min(1000);
            out.push(b'(');
            if self.by_dup {
                // One entry per batch, duplicated on the stack.
                out.extend_from_slice(&[b'h', 1 + (next % entries) as u8]);
                out.extend(std::iter::repeat_n(b'2', batch - 1));
                next += 1;
            } else {
                for _ in 0..batch {
                    out.extend_from_slice(&[b'h', 1 + (next % entries) as u8]);
                    next += 1;
                }
            }
            out.push(b'e');
            left -= batch;
        }
        // The device's list into device_traces, and again as further devices.
        out.push(b'a');
        if self.devices > 1 {
            out.push(b'(');
            out.extend(std::iter::repeat_n(*b"h\x00", self.devices - 1).flatten());
            out.push(b'e');
        }
        // The top dict's items, STOP.
        out.extend_from_slice(b"u.");
        out
    }
}

/// A pickle string (BINUNICODE).
fn text(out: &mut Vec<u8>, value: &str) {
    out.push(b'X');
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(value.as_bytes());
}

/// A trace entry dict: `action` at `addr` of `size` bytes.
fn entry(out: &mut Vec<u8>, action: &str, addr: i32, size: i32) {
    out.extend_from_slice(b"}(");
    text(out, "action");
    text(out, action);
    for (key, value) in [("addr", addr), ("size", size), ("time_us", 1000)] {
        text(out, key);
        out.push(b'J');
        out.extend_from_slice(&value.to_le_bytes());
    }
    text(out, "stream");
    out.extend_from_slice(b"K\x00");
    text(out, "frames");
    out.extend_from_slice(b"]u");
}
