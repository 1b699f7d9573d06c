//! Just enough of the wasm binary format to look at sections without parsing
//! a whole module: finding and appending custom sections, dropping DWARF.

/// The 8-byte header of a core wasm module: magic and version 1.
const HEADER: [u8; 8] = *b"\0asm\x01\0\0\0";

/// Section id of custom sections.
const CUSTOM: u8 = 0;

/// One section of a module, borrowed from it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Section<'a> {
    /// The section id (0 for custom sections).
    pub id: u8,
    /// The whole section: id, size and payload.
    pub bytes: &'a [u8],
    /// The payload only.
    pub payload: &'a [u8],
}

impl<'a> Section<'a> {
    /// The name and contents of a custom section, or `None` for other
    /// sections and custom sections whose name is malformed.
    pub fn custom(&self) -> Option<(&'a str, &'a [u8])> {
        if self.id != CUSTOM {
            return None;
        }
        let (len, rest) = read_u32(self.payload)?;
        let len = usize::try_from(len).ok()?;
        if len > rest.len() {
            return None;
        }
        let (name, data) = rest.split_at(len);
        Some((std::str::from_utf8(name).ok()?, data))
    }
}

/// The sections of `module`, in order, or why its framing is broken.
///
/// Only the framing (header, section ids and sizes) is checked, not the
/// contents.
pub(crate) fn sections(module: &[u8]) -> Result<Vec<Section<'_>>, String> {
    let rest = module
        .strip_prefix(&HEADER[..4])
        .ok_or("missing the \\0asm magic number")?;
    let mut rest = rest
        .strip_prefix(&HEADER[4..])
        .ok_or("not a core wasm module of version 1 (a component, or truncated?)")?;
    let mut out = Vec::new();
    while let Some((&id, after_id)) = rest.split_first() {
        let offset = module.len() - rest.len();
        let (size, after_size) =
            read_u32(after_id).ok_or_else(|| format!("bad section size at offset {offset}"))?;
        let size = usize::try_from(size).map_err(|e| e.to_string())?;
        if size > after_size.len() {
            return Err(format!(
                "section {id} at offset {offset} claims {size} bytes but only {} remain",
                after_size.len()
            ));
        }
        let header_len = 1 + after_id.len() - after_size.len();
        let (bytes, next) = rest.split_at(header_len + size);
        out.push(Section {
            id,
            bytes,
            payload: &bytes[header_len..],
        });
        rest = next;
    }
    Ok(out)
}

/// The contents of the first custom section called `name`, if the module's
/// framing is sound and it has one.
pub(crate) fn find_custom<'a>(module: &'a [u8], name: &str) -> Option<&'a [u8]> {
    sections(module)
        .ok()?
        .iter()
        .filter_map(Section::custom)
        .find_map(|(n, data)| (n == name).then_some(data))
}

/// `module` without its DWARF (`.debug_*`) custom sections.
///
/// walrus would drop them anyway (it cannot keep them right through our
/// rewriting), but only after parsing them, which is slow on big programs and
/// trusts a second parser with untrusted input.
pub(crate) fn strip_debug(module: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(module.len());
    out.extend_from_slice(&HEADER);
    for section in sections(module)? {
        let is_dwarf = section
            .custom()
            .is_some_and(|(name, _)| name.starts_with(".debug"));
        if !is_dwarf {
            out.extend_from_slice(section.bytes);
        }
    }
    Ok(out)
}

/// Appends a custom section called `name` holding `data` to `module`.
/// (Custom sections may appear anywhere, including after the last section.)
pub(crate) fn append_custom(module: &mut Vec<u8>, name: &str, data: &[u8]) {
    let mut payload = Vec::with_capacity(5 + name.len() + data.len());
    write_u32(&mut payload, len_u32(name.len()));
    payload.extend_from_slice(name.as_bytes());
    payload.extend_from_slice(data);
    module.push(CUSTOM);
    write_u32(module, len_u32(payload.len()));
    module.extend_from_slice(&payload);
}

/// Section id of the export section.
const EXPORT: u8 = 7;

/// `module` with `globals` (name, global index) added to its export section.
///
/// # Errors
/// If the module's framing is broken or it has no export section (every
/// prepared module has one: `_start`, `memory`).
pub(crate) fn add_global_exports(
    module: &[u8],
    globals: &[(&str, u32)],
) -> Result<Vec<u8>, String> {
    const GLOBAL_KIND: u8 = 3;
    let mut out = Vec::with_capacity(module.len() + 64);
    out.extend_from_slice(&HEADER);
    let mut found = false;
    for section in sections(module)? {
        if section.id != EXPORT {
            out.extend_from_slice(section.bytes);
            continue;
        }
        found = true;
        let (count, entries) = read_u32(section.payload).ok_or("bad export count")?;
        let mut payload = Vec::with_capacity(section.payload.len() + 64);
        write_u32(&mut payload, count + len_u32(globals.len()));
        payload.extend_from_slice(entries);
        for (name, index) in globals {
            write_u32(&mut payload, len_u32(name.len()));
            payload.extend_from_slice(name.as_bytes());
            payload.push(GLOBAL_KIND);
            write_u32(&mut payload, *index);
        }
        out.push(EXPORT);
        write_u32(&mut out, len_u32(payload.len()));
        out.extend_from_slice(&payload);
    }
    if !found {
        return Err("the module has no export section".into());
    }
    Ok(out)
}

/// A length as the u32 the binary format stores. Lengths come from a module
/// that fits the format (< 4 GiB) plus a few dozen bytes of ours.
fn len_u32(len: usize) -> u32 {
    u32::try_from(len).expect("a wasm section is smaller than 4 GiB")
}

/// Reads an unsigned LEB128 u32 (at most 5 bytes), returning it and the rest.
fn read_u32(bytes: &[u8]) -> Option<(u32, &[u8])> {
    let mut value: u32 = 0;
    for (i, &byte) in bytes.iter().enumerate().take(5) {
        let bits = u32::from(byte & 0x7f);
        // The fifth byte may only carry the top 4 bits of a u32.
        if i == 4 && bits > 0x0f {
            return None;
        }
        value |= bits << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, &bytes[i + 1..]));
        }
    }
    None
}

/// Writes `value` as unsigned LEB128.
fn write_u32(out: &mut Vec<u8>, mut value: u32) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leb_round_trip() {
        for value in [0, 1, 127, 128, 300, 16_383, 16_384, u32::MAX / 3, u32::MAX] {
            let mut buf = Vec::new();
            write_u32(&mut buf, value);
            buf.push(0xaa);
            assert_eq!(read_u32(&buf), Some((value, &[0xaa][..])));
        }
        assert_eq!(read_u32(&[0x80, 0x80]), None, "truncated");
        assert_eq!(read_u32(&[0xff, 0xff, 0xff, 0xff, 0x7f]), None, "overflow");
    }

    #[test]
    fn append_then_find() {
        let mut module = HEADER.to_vec();
        append_custom(&mut module, "hello", b"world");
        append_custom(&mut module, ".debug_info", b"dwarf");
        assert_eq!(find_custom(&module, "hello"), Some(&b"world"[..]));
        assert_eq!(find_custom(&module, "absent"), None);
        let stripped = strip_debug(&module).unwrap();
        assert_eq!(find_custom(&stripped, ".debug_info"), None);
        assert_eq!(find_custom(&stripped, "hello"), Some(&b"world"[..]));
    }

    #[test]
    fn broken_framing() {
        assert!(sections(b"").is_err());
        assert!(sections(b"\0asm").is_err());
        assert!(sections(b"\0asm\x0d\0\x01\0").is_err(), "component");
        assert!(
            sections(b"\0asm\x01\0\0\0\x01\x05\0").is_err(),
            "short section"
        );
        assert!(sections(b"\0asm\x01\0\0\0\x01").is_err(), "missing size");
        assert_eq!(sections(&HEADER).unwrap().len(), 0);
    }

    #[test]
    fn globals_are_added_to_the_exports() {
        let module = wat::parse_str(
            r#"(module (global (mut i32) (i32.const 0)) (global $g (mut i32) (i32.const 7))
                 (func (export "f")))"#,
        )
        .unwrap();
        let out = add_global_exports(&module, &[("g", 1), ("h", 0)]).unwrap();
        wasmparser::Validator::new().validate_all(&out).unwrap();
        let mut exports = Vec::new();
        for payload in wasmparser::Parser::new(0).parse_all(&out) {
            if let wasmparser::Payload::ExportSection(r) = payload.unwrap() {
                for e in r {
                    let e = e.unwrap();
                    exports.push((e.name.to_owned(), e.kind, e.index));
                }
            }
        }
        use wasmparser::ExternalKind::{Func, Global};
        assert_eq!(
            exports,
            [
                ("f".into(), Func, 0),
                ("g".into(), Global, 1),
                ("h".into(), Global, 0)
            ]
        );
        let no_exports = wat::parse_str("(module)").unwrap();
        assert!(add_global_exports(&no_exports, &[("g", 0)]).is_err());
    }
}
