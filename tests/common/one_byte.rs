//! A reader that hands its bytes over one per call: a pipe or a slow upload, and a pickle the
//! machine decodes opcode by opcode (it never has a trace entry's bytes buffered).
#![allow(dead_code)]

pub struct OneByteAtATime<'a>(pub &'a [u8]);

impl std::io::Read for OneByteAtATime<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match (self.0.split_first(), buf.first_mut()) {
            (Some((&byte, rest)), Some(slot)) => {
                *slot = byte;
                self.0 = rest;
                Ok(1)
            }
            _ => Ok(0),
        }
    }
}
