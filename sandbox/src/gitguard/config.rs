//! The replacement `config` of a sanitized repository: the few settings git needs to read the
//! repository's data, taken from the original by a careful reader of git's configuration
//! syntax, and nothing else.
//!
//! The reader follows git's own parser (`config.c`: `git_parse_source`, `get_base_var`,
//! `get_value`, `parse_value`) byte for byte — sections (`[core]`, `[core "sub"]`, legacy
//! `[core.sub]`), keys, quoting, escapes, `\` line continuations, `#`/`;` comments, a UTF-8 BOM,
//! a key on the header's line — so that it sees exactly the variables git would see. It never
//! follows an include (`include.path`, `includeIf.*.path`: dropped like every key not kept).
//! Kept, when their values are ones git accepts and that carry no command:
//! `core.repositoryformatversion` (0 or 1), `core.bare`, `core.filemode`,
//! `core.logallrefupdates` (booleans; the latter also `always`), `extensions.objectformat`
//! (`sha1`, `sha256`) and `extensions.refstorage` (`files`, `reftable`: without it a reftable
//! repository could not be read). A file git itself would refuse (a syntax error), one larger
//! than [`MAX_CONFIG_BYTES`] or anything but a regular file keeps nothing.

use super::quote::escape;

/// Largest original `config` that is read at all.
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// Dropped key names reported, at most.
const MAX_DROPPED: usize = 16;

/// Bytes of one reported key name, at most.
const KEY_BOUND: usize = 80;

/// The settings kept from an original `config`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SafeConfig {
    /// `core.repositoryformatversion`.
    pub format_version: Option<u8>,
    /// `core.bare`.
    pub bare: Option<bool>,
    /// `core.filemode`.
    pub filemode: Option<bool>,
    /// `core.logallrefupdates` (`Some("true" | "false" | "always")`).
    pub logallrefupdates: Option<&'static str>,
    /// `extensions.objectformat`.
    pub objectformat: Option<&'static str>,
    /// `extensions.refstorage`.
    pub refstorage: Option<&'static str>,
}

/// What the reader made of an original `config`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reading {
    /// What is kept.
    pub safe: SafeConfig,
    /// Names of the variables not kept (escaped and bounded; at most 16, then `+N more`).
    pub dropped: Vec<String>,
    /// Why nothing was kept, when the file could not be read safely.
    pub unreadable: Option<String>,
}

/// A parse error: git would refuse the file too.
#[derive(Debug, PartialEq, Eq)]
struct Bad(&'static str);

/// git's `get_next_char`: `\r\n` reads as `\n`; the end reads as `\n` with `eof` set.
struct Source<'a> {
    bytes: &'a [u8],
    at: usize,
    eof: bool,
}

impl Source<'_> {
    fn next(&mut self) -> u8 {
        match self.bytes.get(self.at) {
            None => {
                self.eof = true;
                b'\n'
            }
            Some(&b'\r') if self.bytes.get(self.at + 1) == Some(&b'\n') => {
                self.at += 2;
                b'\n'
            }
            Some(&c) => {
                self.at += 1;
                c
            }
        }
    }
}

/// git's `isspace` (its own ctype table: space, `\t`, `\n`, `\r`).
fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r')
}

/// git's `iskeychar`.
fn is_key_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-'
}

/// One variable as git sees it: its full name (`section.subsection.key`, section and key lower
/// case) and its value (`None`: a key without `=`, boolean true).
type Var = (Vec<u8>, Option<Vec<u8>>);

/// Every variable git would see, in order.
fn parse(bytes: &[u8]) -> Result<Vec<Var>, Bad> {
    const BOM: &[u8] = b"\xef\xbb\xbf";
    let bytes = match bytes.strip_prefix(BOM) {
        Some(rest) => rest,
        // git refuses a file that starts like a BOM and is not one.
        None if bytes.first() == BOM.first() => return Err(Bad("a partial byte order mark")),
        None => bytes,
    };
    let mut src = Source {
        bytes,
        at: 0,
        eof: false,
    };
    let mut out = Vec::new();
    let mut var: Vec<u8> = Vec::new();
    let mut baselen = 0;
    let mut comment = false;
    loop {
        let c = src.next();
        if c == b'\n' {
            if src.eof {
                return Ok(out);
            }
            comment = false;
            continue;
        }
        if comment || is_space(c) {
            continue;
        }
        if c == b'#' || c == b';' {
            comment = true;
            continue;
        }
        if c == b'[' {
            var.clear();
            base_var(&mut src, &mut var)?;
            if var.is_empty() {
                return Err(Bad("an empty section name"));
            }
            var.push(b'.');
            baselen = var.len();
            continue;
        }
        if !c.is_ascii_alphabetic() {
            return Err(Bad("a key must start with a letter"));
        }
        var.truncate(baselen);
        var.push(c.to_ascii_lowercase());
        let value = key_and_value(&mut src, &mut var)?;
        out.push((var.clone(), value));
    }
}

/// git's `get_base_var` (after `[`): the section, lower-cased, and its subsection.
fn base_var(src: &mut Source<'_>, name: &mut Vec<u8>) -> Result<(), Bad> {
    loop {
        let c = src.next();
        if src.eof {
            return Err(Bad("an unterminated section header"));
        }
        if c == b']' {
            return Ok(());
        }
        if is_space(c) {
            return extended_base_var(src, name, c);
        }
        if !is_key_char(c) && c != b'.' {
            return Err(Bad("a bad character in a section name"));
        }
        name.push(c.to_ascii_lowercase());
    }
}

/// git's `get_extended_base_var`: `[section "subsection"]` (the subsection kept as written).
fn extended_base_var(src: &mut Source<'_>, name: &mut Vec<u8>, first: u8) -> Result<(), Bad> {
    let mut c = first;
    loop {
        if c == b'\n' {
            return Err(Bad("an incomplete section header"));
        }
        c = src.next();
        if !is_space(c) {
            break;
        }
    }
    if c != b'"' {
        return Err(Bad("a subsection must be quoted"));
    }
    name.push(b'.');
    loop {
        let mut c = src.next();
        if c == b'\n' {
            return Err(Bad("an incomplete section header"));
        }
        if c == b'"' {
            break;
        }
        if c == b'\\' {
            c = src.next();
            if c == b'\n' {
                return Err(Bad("an incomplete section header"));
            }
        }
        name.push(c);
    }
    if src.next() != b']' {
        return Err(Bad("a section header must end with `]`"));
    }
    Ok(())
}

/// git's `get_value`: the rest of the key, then `= value` or nothing.
fn key_and_value(src: &mut Source<'_>, name: &mut Vec<u8>) -> Result<Option<Vec<u8>>, Bad> {
    let mut c;
    loop {
        c = src.next();
        if src.eof || !is_key_char(c) {
            break;
        }
        name.push(c.to_ascii_lowercase());
    }
    while c == b' ' || c == b'\t' {
        c = src.next();
    }
    if c == b'\n' {
        return Ok(None);
    }
    if c != b'=' {
        return Err(Bad("a key must be followed by `=` or the end of the line"));
    }
    value(src).map(Some)
}

/// git's `parse_value`: quotes, escapes, continuations, comments, trimmed whitespace.
fn value(src: &mut Source<'_>) -> Result<Vec<u8>, Bad> {
    let mut quote = false;
    let mut comment = false;
    let mut trim_len = 0;
    let mut v = Vec::new();
    loop {
        let c = src.next();
        if c == b'\n' {
            if quote {
                return Err(Bad("an unterminated quote"));
            }
            if trim_len > 0 {
                v.truncate(trim_len);
            }
            return Ok(v);
        }
        if comment {
            continue;
        }
        if is_space(c) && !quote {
            if trim_len == 0 {
                trim_len = v.len();
            }
            if !v.is_empty() {
                v.push(c);
            }
            continue;
        }
        if !quote && (c == b';' || c == b'#') {
            comment = true;
            continue;
        }
        trim_len = 0;
        if c == b'\\' {
            let e = src.next();
            let out = match e {
                b'\n' => continue,
                b't' => b'\t',
                b'b' => 0x08,
                b'n' => b'\n',
                b'\\' | b'"' => e,
                _ => return Err(Bad("an unknown escape sequence")),
            };
            v.push(out);
            continue;
        }
        if c == b'"' {
            quote = !quote;
            continue;
        }
        v.push(c);
    }
}

/// git's boolean: no value, `true`/`yes`/`on`, `false`/`no`/`off`/empty, or a decimal number.
fn boolean(v: Option<&[u8]>) -> Option<bool> {
    let Some(v) = v else {
        return Some(true);
    };
    let lower = v.to_ascii_lowercase();
    match lower.as_slice() {
        b"true" | b"yes" | b"on" => Some(true),
        b"false" | b"no" | b"off" | b"" => Some(false),
        digits if !digits.is_empty() && digits.iter().all(u8::is_ascii_digit) => {
            Some(digits.iter().any(|&d| d != b'0'))
        }
        _ => None,
    }
}

/// Reads an original `config` (its first [`MAX_CONFIG_BYTES`]; `complete` is false when the
/// file is larger).
pub fn read(bytes: &[u8], complete: bool) -> Reading {
    let mut r = Reading::default();
    if !complete {
        r.unreadable = Some(format!(
            "the original is larger than {MAX_CONFIG_BYTES} bytes: nothing of it was kept"
        ));
        return r;
    }
    let vars = match parse(bytes) {
        Ok(v) => v,
        Err(Bad(why)) => {
            r.unreadable = Some(format!(
                "the original is not valid git configuration ({why}): nothing of it was kept"
            ));
            return r;
        }
    };
    let mut dropped_names: Vec<Vec<u8>> = Vec::new();
    for (name, value) in vars {
        let v = value.as_deref();
        let kept = match name.as_slice() {
            b"core.repositoryformatversion" => match v {
                Some(b"0") => set(&mut r.safe.format_version, 0),
                Some(b"1") => set(&mut r.safe.format_version, 1),
                _ => false,
            },
            b"core.bare" => boolean(v).is_some_and(|b| set(&mut r.safe.bare, b)),
            b"core.filemode" => boolean(v).is_some_and(|b| set(&mut r.safe.filemode, b)),
            b"core.logallrefupdates" => {
                let word = match v.map(<[u8]>::to_ascii_lowercase).as_deref() {
                    Some(b"always") => Some("always"),
                    _ => boolean(v).map(|b| if b { "true" } else { "false" }),
                };
                word.is_some_and(|w| set(&mut r.safe.logallrefupdates, w))
            }
            b"extensions.objectformat" => match v {
                Some(b"sha1") => set(&mut r.safe.objectformat, "sha1"),
                Some(b"sha256") => set(&mut r.safe.objectformat, "sha256"),
                _ => false,
            },
            b"extensions.refstorage" => match v {
                Some(b"files") => set(&mut r.safe.refstorage, "files"),
                Some(b"reftable") => set(&mut r.safe.refstorage, "reftable"),
                _ => false,
            },
            _ => false,
        };
        if !kept && !dropped_names.contains(&name) {
            dropped_names.push(name);
        }
    }
    let more = dropped_names.len().saturating_sub(MAX_DROPPED);
    r.dropped = dropped_names
        .iter()
        .take(MAX_DROPPED)
        .map(|n| escape(n, KEY_BOUND))
        .collect();
    if more > 0 {
        r.dropped.push(format!("+{more} more"));
    }
    r
}

/// Sets a single-valued setting (the last one wins, as in git).
fn set<T>(slot: &mut Option<T>, v: T) -> bool {
    *slot = Some(v);
    true
}

/// The replacement file.
pub fn render(safe: &SafeConfig) -> String {
    let mut out = String::from(
        "# Written by ralph after a sandboxed run that created or changed this repository: its\n\
         # configuration, hooks and pointers were replaced so that git on the host cannot run\n\
         # anything the run wrote. The originals are in the run's artifacts (sanitized/).\n",
    );
    let mut core = Vec::new();
    if let Some(v) = safe.format_version {
        core.push(format!("\trepositoryformatversion = {v}\n"));
    }
    if let Some(v) = safe.filemode {
        core.push(format!("\tfilemode = {v}\n"));
    }
    if let Some(v) = safe.bare {
        core.push(format!("\tbare = {v}\n"));
    }
    if let Some(v) = safe.logallrefupdates {
        core.push(format!("\tlogallrefupdates = {v}\n"));
    }
    if !core.is_empty() {
        out.push_str("[core]\n");
        out.extend(core);
    }
    let mut ext = Vec::new();
    if let Some(v) = safe.objectformat {
        ext.push(format!("\tobjectformat = {v}\n"));
    }
    if let Some(v) = safe.refstorage {
        ext.push(format!("\trefstorage = {v}\n"));
    }
    if !ext.is_empty() {
        out.push_str("[extensions]\n");
        out.extend(ext);
    }
    out
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
