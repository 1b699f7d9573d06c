//! Bounds-checked access to a guest's linear memory during a system call.
//!
//! Every pointer a guest passes is checked here; one that falls outside
//! linear memory is `EFAULT` for the guest, never a host fault.

use atoll_abi::Errno;

/// A guest's linear memory, borrowed for the length of one system call.
pub struct GuestMemory<'a> {
    bytes: &'a mut [u8],
}

impl<'a> GuestMemory<'a> {
    pub fn new(bytes: &'a mut [u8]) -> Self {
        GuestMemory { bytes }
    }

    fn range(&self, ptr: u32, len: u32) -> Result<std::ops::Range<usize>, Errno> {
        let start = ptr as usize;
        let end = start.checked_add(len as usize).ok_or(Errno::Fault)?;
        if end > self.bytes.len() {
            return Err(Errno::Fault);
        }
        Ok(start..end)
    }

    /// All of linear memory.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.bytes
    }

    pub fn slice(&self, ptr: u32, len: u32) -> Result<&[u8], Errno> {
        let r = self.range(ptr, len)?;
        Ok(&self.bytes[r])
    }

    /// A range the caller will write. Each host page of it is first written
    /// once from here, so that a page write-protected for migration's dirty
    /// tracking is recorded and unprotected by a fault in user code; a
    /// system call (`read`, `getrandom`) writing into it would otherwise
    /// fail with `EFAULT`.
    pub fn slice_mut(&mut self, ptr: u32, len: u32) -> Result<&mut [u8], Errno> {
        let r = self.range(ptr, len)?;
        let out = &mut self.bytes[r];
        for i in (0..out.len()).step_by(atoll_migration::BLOCK) {
            // SAFETY: `i` is inside `out`; volatile so the store of the
            // unchanged value is not elided.
            unsafe {
                let p = out.as_mut_ptr().add(i);
                p.write_volatile(p.read_volatile());
            }
        }
        if let Some(last) = out.len().checked_sub(1) {
            // SAFETY: as above; the last byte may lie on a page the loop
            // did not touch.
            unsafe {
                let p = out.as_mut_ptr().add(last);
                p.write_volatile(p.read_volatile());
            }
        }
        Ok(out)
    }

    /// Reads UTF-8 text; invalid text is `EILSEQ`.
    pub fn str(&self, ptr: u32, len: u32) -> Result<&str, Errno> {
        std::str::from_utf8(self.slice(ptr, len)?).map_err(|_| Errno::Ilseq)
    }

    pub fn read<const N: usize>(&self, ptr: u32) -> Result<[u8; N], Errno> {
        Ok(self
            .slice(ptr, N as u32)?
            .try_into()
            .expect("length checked"))
    }

    pub fn u8(&self, ptr: u32) -> Result<u8, Errno> {
        Ok(self.read::<1>(ptr)?[0])
    }

    pub fn u16(&self, ptr: u32) -> Result<u16, Errno> {
        self.read(ptr).map(u16::from_le_bytes)
    }

    pub fn u32(&self, ptr: u32) -> Result<u32, Errno> {
        self.read(ptr).map(u32::from_le_bytes)
    }

    pub fn u64(&self, ptr: u32) -> Result<u64, Errno> {
        self.read(ptr).map(u64::from_le_bytes)
    }

    pub fn write(&mut self, ptr: u32, data: &[u8]) -> Result<(), Errno> {
        self.slice_mut(ptr, data.len() as u32)?
            .copy_from_slice(data);
        Ok(())
    }

    pub fn write_u8(&mut self, ptr: u32, v: u8) -> Result<(), Errno> {
        self.write(ptr, &[v])
    }

    pub fn write_u16(&mut self, ptr: u32, v: u16) -> Result<(), Errno> {
        self.write(ptr, &v.to_le_bytes())
    }

    pub fn write_u32(&mut self, ptr: u32, v: u32) -> Result<(), Errno> {
        self.write(ptr, &v.to_le_bytes())
    }

    pub fn write_u64(&mut self, ptr: u32, v: u64) -> Result<(), Errno> {
        self.write(ptr, &v.to_le_bytes())
    }

    /// Decodes a WASI iovec array (`{u32 buf, u32 len}` each) and checks
    /// that every buffer lies inside memory.
    pub fn iovecs(&self, ptr: u32, count: u32) -> Result<Vec<(u32, u32)>, Errno> {
        let table = self.slice(ptr, count.checked_mul(8).ok_or(Errno::Fault)?)?;
        let iovs: Vec<(u32, u32)> = table
            .chunks_exact(8)
            .map(|c| {
                let buf = u32::from_le_bytes(c[..4].try_into().expect("4 bytes"));
                let len = u32::from_le_bytes(c[4..].try_into().expect("4 bytes"));
                (buf, len)
            })
            .collect();
        for &(buf, len) in &iovs {
            self.range(buf, len)?;
        }
        Ok(iovs)
    }

    /// Gathers the bytes of an iovec array.
    pub fn gather(&self, iovs: &[(u32, u32)]) -> Result<Vec<u8>, Errno> {
        let mut out = Vec::with_capacity(iovs.iter().map(|i| i.1 as usize).sum());
        for &(buf, len) in iovs {
            out.extend_from_slice(self.slice(buf, len)?);
        }
        Ok(out)
    }

    /// Writes a list of strings as WASI does for args and environ: a table of
    /// pointers at `ptrs` and the NUL-terminated strings from `buf` on.
    pub fn write_string_table(
        &mut self,
        ptrs: u32,
        buf: u32,
        items: &[String],
    ) -> Result<(), Errno> {
        let mut at = buf;
        for (i, s) in items.iter().enumerate() {
            self.write_u32(ptrs.checked_add(4 * i as u32).ok_or(Errno::Fault)?, at)?;
            self.write(at, s.as_bytes())?;
            let nul = at.checked_add(s.len() as u32).ok_or(Errno::Fault)?;
            self.write_u8(nul, 0)?;
            at = nul + 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_bounds_is_efault() {
        let mut buf = vec![0u8; 64];
        let mut m = GuestMemory::new(&mut buf);
        assert_eq!(m.u32(61), Err(Errno::Fault));
        assert_eq!(m.u32(u32::MAX), Err(Errno::Fault));
        assert_eq!(m.write(60, &[1; 8]), Err(Errno::Fault));
        assert_eq!(m.iovecs(0xFFFF_FFF0, 2), Err(Errno::Fault));
        m.write_u32(0, 32).unwrap();
        m.write_u32(4, 100).unwrap(); // iovec {32, 100}: past the end
        assert_eq!(m.iovecs(0, 1), Err(Errno::Fault));
        m.write_u32(4, 8).unwrap();
        assert_eq!(m.iovecs(0, 1), Ok(vec![(32, 8)]));
    }

    #[test]
    fn gather_and_string_tables() {
        let mut buf = vec![0u8; 64];
        let mut m = GuestMemory::new(&mut buf);
        m.write(10, b"abc").unwrap();
        m.write(20, b"defg").unwrap();
        assert_eq!(m.gather(&[(10, 3), (20, 5)]).unwrap(), b"abcdefg\0");
        m.write_string_table(40, 48, &["ab".into(), "c".into()])
            .unwrap();
        assert_eq!(m.u32(40).unwrap(), 48);
        assert_eq!(m.u32(44).unwrap(), 51);
        assert_eq!(m.slice(48, 5).unwrap(), b"ab\0c\0");
    }
}
