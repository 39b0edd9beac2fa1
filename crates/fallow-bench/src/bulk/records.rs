//! Record file formats for bulk load and export, with a streaming reader (bounded buffer, exact error
//! locations, resumable after a bad record) and a buffered writer.
//!
//! - `sort`: sort-benchmark records, 100 bytes each: a 10-byte key then a 90-byte value, no separators.
//! - `tsv`: one record per line, `key<TAB>value<LF>`. Inside key and value a backslash escapes: `\\` (a
//!   backslash), `\t` (TAB), `\n` (LF), `\r` (CR), `\0` (NUL) and `\xHH` (any byte, two hex digits). Every
//!   other byte, non-UTF-8 included, stands for itself. The writer escapes exactly backslash, TAB, LF and
//!   CR, so any bytes round-trip. A raw CR right before the LF is taken as a CRLF line end. Empty lines are
//!   not records and are passed over; the last line needs no LF.
//! - `csv`: RFC 4180 with exactly two fields, key and value, no header. A field that holds `,`, `"`, CR or
//!   LF is quoted (`"..."`, a quote inside doubled as `""`); quoted fields hold any bytes. Records end with
//!   LF or CRLF; empty lines are passed over; the last record needs no line end.
use std::fmt;
use std::io::{self, Read, Write};
use std::path::Path;

pub const SORT_KEY_BYTES: usize = 10;
pub const SORT_VALUE_BYTES: usize = 90;
pub const SORT_RECORD_BYTES: usize = SORT_KEY_BYTES + SORT_VALUE_BYTES;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// 100-byte sort-benchmark records (10-byte key, 90-byte value).
    Sort,
    /// key<TAB>value lines with backslash escapes.
    Tsv,
    /// Two-field RFC 4180 CSV.
    Csv,
}

impl Format {
    /// The format a file name implies: .sort/.dat = sort, .tsv/.txt = tsv, .csv = csv.
    pub fn from_path(path: &Path) -> Option<Format> {
        let extension = path.extension()?.to_str()?.to_ascii_lowercase();
        match extension.as_str() {
            "sort" | "dat" => Some(Format::Sort),
            "tsv" | "txt" => Some(Format::Tsv),
            "csv" => Some(Format::Csv),
            _ => None,
        }
    }

    /// The explicit `--format`, else the one the extension implies.
    pub fn resolve(explicit: Option<Format>, path: &Path) -> anyhow::Result<Format> {
        explicit.or_else(|| Format::from_path(path)).ok_or_else(|| {
            anyhow::anyhow!(
                "cannot tell the format of {} from its extension (.sort/.dat, .tsv/.txt, .csv): pass --format",
                path.display()
            )
        })
    }
}

/// Size limits on one record; a record over them is malformed.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub key_bytes_max: usize,
    pub value_bytes_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            key_bytes_max: 64 << 10,
            value_bytes_max: 512 << 20,
        }
    }
}

impl Limits {
    /// The most bytes one record may take in a text file: every byte escaped (2 bytes) plus separators.
    fn encoded_record_bytes_max(&self) -> usize {
        2 * (self.key_bytes_max + self.value_bytes_max) + 16
    }
}

/// A malformed record: where it starts and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordError {
    /// 1-based line of the record's first byte (text formats).
    pub line: Option<u64>,
    /// Byte offset of the record's first byte in the file.
    pub offset: u64,
    pub message: String,
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(
                f,
                "line {line} (byte offset {}): {}",
                self.offset, self.message
            ),
            None => write!(f, "byte offset {}: {}", self.offset, self.message),
        }
    }
}

impl std::error::Error for RecordError {}

#[derive(Debug)]
pub enum ReadError {
    Io(io::Error),
    Record(RecordError),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(error) => write!(f, "read error: {error}"),
            ReadError::Record(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for ReadError {}

/// Records stored back to back in one buffer (no allocation per record).
#[derive(Default, Debug)]
pub struct Batch {
    data: Vec<u8>,
    spans: Vec<Span>,
}

#[derive(Clone, Copy, Debug)]
struct Span {
    start: usize,
    key_len: u32,
    value_len: u32,
}

impl Batch {
    pub fn push(&mut self, key: &[u8], value: &[u8]) {
        let start = self.data.len();
        self.data.extend_from_slice(key);
        self.data.extend_from_slice(value);
        self.spans.push(Span {
            start,
            key_len: key.len() as u32,
            value_len: value.len() as u32,
        });
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Bytes of keys and values held.
    pub fn data_bytes(&self) -> usize {
        self.data.len()
    }

    pub fn clear(&mut self) {
        self.data.clear();
        self.spans.clear();
    }

    pub fn get(&self, index: usize) -> (&[u8], &[u8]) {
        let span = self.spans[index];
        let key_end = span.start + span.key_len as usize;
        (
            &self.data[span.start..key_end],
            &self.data[key_end..key_end + span.value_len as usize],
        )
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        (0..self.len()).map(|index| self.get(index))
    }
}

/// What parsing the buffered bytes gave.
enum Parsed {
    /// A record of `consumed` bytes holding `lines` line ends, appended to the batch.
    Record { consumed: usize, lines: u64 },
    /// An empty line, passed over.
    Blank { consumed: usize, lines: u64 },
    /// The record may go on past the buffered bytes.
    NeedMore,
    /// A malformed record of known extent; the reader resumes after it.
    Bad {
        consumed: usize,
        lines: u64,
        message: String,
    },
    /// A syntax error at `at` (from the record start); the reader resumes on the next line.
    Broken { at: usize, message: String },
}

/// Reads records from a byte stream, at most one record plus one read ahead in memory.
pub struct RecordReader<R> {
    input: R,
    format: Format,
    limits: Limits,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
    /// File offset and 1-based line of `buf[start]`.
    offset: u64,
    line: u64,
    /// Parse scratch (unescaped extra CSV fields).
    scratch: Vec<u8>,
}

/// Bytes read from the input at a time.
const READ_CHUNK_BYTES: usize = 1 << 20;

impl<R: Read> RecordReader<R> {
    pub fn new(input: R, format: Format, limits: Limits) -> Self {
        RecordReader {
            input,
            format,
            limits,
            buf: vec![0; READ_CHUNK_BYTES],
            start: 0,
            end: 0,
            eof: false,
            offset: 0,
            line: 1,
            scratch: Vec::new(),
        }
    }

    /// Bytes of the input consumed so far (parsed records, skipped bytes).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Appends the next record to `batch`. Ok(false) at the end of the input. After a `ReadError::Record`
    /// the bad record has been consumed and the next call goes on with the following one.
    pub fn read_into(&mut self, batch: &mut Batch) -> Result<bool, ReadError> {
        loop {
            let rollback = (batch.data.len(), batch.spans.len());
            let parsed = self.parse(batch);
            if !matches!(parsed, Parsed::Record { .. }) {
                batch.data.truncate(rollback.0);
                batch.spans.truncate(rollback.1);
            }
            match parsed {
                Parsed::Record { consumed, lines } => {
                    self.advance(consumed, lines);
                    return Ok(true);
                }
                Parsed::Blank { consumed, lines } => self.advance(consumed, lines),
                Parsed::NeedMore => {
                    if self.eof {
                        return self.end_of_input();
                    }
                    if let Some(error) = self.fill().map_err(ReadError::Io)? {
                        return Err(ReadError::Record(error));
                    }
                }
                Parsed::Bad {
                    consumed,
                    lines,
                    message,
                } => {
                    let error = self.error_here(message);
                    self.advance(consumed, lines);
                    return Err(ReadError::Record(error));
                }
                Parsed::Broken { at, message } => {
                    let error = self.error_here(message);
                    self.skip_line_after(at).map_err(ReadError::Io)?;
                    return Err(ReadError::Record(error));
                }
            }
        }
    }

    /// At the end of the input every parser finishes what is left; anything still unparsed would be a
    /// parser bug, reported as a bad record rather than looping for more input.
    fn end_of_input(&mut self) -> Result<bool, ReadError> {
        let left = self.end - self.start;
        if left == 0 {
            return Ok(false);
        }
        let error = self.error_here(format!("{left} bytes of incomplete record at the end"));
        let lines = count_lines(&self.buf[self.start..self.end]);
        self.advance(left, lines);
        Err(ReadError::Record(error))
    }

    fn error_here(&self, message: String) -> RecordError {
        let line = (self.format != Format::Sort).then_some(self.line);
        RecordError {
            line,
            offset: self.offset,
            message,
        }
    }

    fn advance(&mut self, consumed: usize, lines: u64) {
        self.start += consumed;
        self.offset += consumed as u64;
        self.line += lines;
    }

    fn parse(&mut self, batch: &mut Batch) -> Parsed {
        let window = &self.buf[self.start..self.end];
        match self.format {
            Format::Sort => parse_sort(window, self.eof, batch),
            Format::Tsv => parse_tsv(window, self.eof, &self.limits, batch),
            Format::Csv => parse_csv(window, self.eof, &self.limits, batch, &mut self.scratch),
        }
    }

    /// Reads more input, keeping the unparsed bytes. Returns a record error when one record outgrows the
    /// largest record the limits allow (that record is then skipped up to its line end).
    fn fill(&mut self) -> io::Result<Option<RecordError>> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            let cap = self.limits.encoded_record_bytes_max().max(READ_CHUNK_BYTES);
            if self.buf.len() >= cap {
                let message = format!("record longer than the largest allowed ({cap} bytes)");
                let error = self.error_here(message);
                self.skip_line_after(self.end - self.start)?;
                return Ok(Some(error));
            }
            // Doubling keeps re-parsing a long record from its start linear overall.
            self.buf.resize((self.buf.len() * 2).min(cap), 0);
        }
        let read = read_retrying(&mut self.input, &mut self.buf[self.end..])?;
        self.end += read;
        self.eof = read == 0;
        Ok(None)
    }

    /// Discards input up to and including the first LF at or after `at` bytes from the record start (or to
    /// the end of input): where a broken record is skipped to.
    fn skip_line_after(&mut self, at: usize) -> io::Result<()> {
        let mut skip_from = at.min(self.end - self.start);
        loop {
            let window = &self.buf[self.start..self.end];
            let lines_before = count_lines(&window[..skip_from]);
            if let Some(found) = memchr::memchr(b'\n', &window[skip_from..]) {
                self.advance(skip_from + found + 1, lines_before + 1);
                return Ok(());
            }
            let whole = window.len();
            self.advance(whole, lines_before);
            if self.eof {
                return Ok(());
            }
            self.start = 0;
            self.end = 0;
            let read = read_retrying(&mut self.input, &mut self.buf[..])?;
            self.end = read;
            self.eof = read == 0;
            skip_from = 0;
        }
    }
}

fn read_retrying(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match input.read(buf) {
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            result => return result,
        }
    }
}

fn count_lines(bytes: &[u8]) -> u64 {
    memchr::memchr_iter(b'\n', bytes).count() as u64
}

// ----- sort ------------------------------------------------------------------------------------------

fn parse_sort(window: &[u8], eof: bool, batch: &mut Batch) -> Parsed {
    if window.len() >= SORT_RECORD_BYTES {
        let (key, value) = window[..SORT_RECORD_BYTES].split_at(SORT_KEY_BYTES);
        batch.push(key, value);
        return Parsed::Record {
            consumed: SORT_RECORD_BYTES,
            lines: 0,
        };
    }
    if !eof || window.is_empty() {
        return Parsed::NeedMore;
    }
    Parsed::Bad {
        consumed: window.len(),
        lines: 0,
        message: format!(
            "truncated record: {} of {SORT_RECORD_BYTES} bytes at the end of the file",
            window.len()
        ),
    }
}

// ----- tsv -------------------------------------------------------------------------------------------

fn parse_tsv(window: &[u8], eof: bool, limits: &Limits, batch: &mut Batch) -> Parsed {
    let (line, consumed, lines) = match memchr::memchr(b'\n', window) {
        Some(end) => (&window[..end], end + 1, 1),
        None if eof && !window.is_empty() => (window, window.len(), 0),
        None => return Parsed::NeedMore,
    };
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.is_empty() {
        return Parsed::Blank { consumed, lines };
    }
    let bad = |message: String| Parsed::Bad {
        consumed,
        lines,
        message,
    };
    let Some(tab) = memchr::memchr(b'\t', line) else {
        return bad("expected key<TAB>value, found no TAB".into());
    };
    let (key, value) = (&line[..tab], &line[tab + 1..]);
    let extra_tabs = memchr::memchr_iter(b'\t', value).count();
    if extra_tabs > 0 {
        return bad(format!(
            "expected 2 fields separated by one TAB, found {} (escape TABs in data as \\t)",
            extra_tabs + 2
        ));
    }
    let start = batch.data.len();
    if let Err(message) = unescape_into(key, &mut batch.data) {
        return bad(format!("key: {message}"));
    }
    let key_len = batch.data.len() - start;
    if let Err(message) = unescape_into(value, &mut batch.data) {
        return bad(format!("value: {message}"));
    }
    let value_len = batch.data.len() - start - key_len;
    if let Err(message) = check_sizes(limits, key_len, value_len) {
        return bad(message);
    }
    batch.spans.push(Span {
        start,
        key_len: key_len as u32,
        value_len: value_len as u32,
    });
    Parsed::Record { consumed, lines }
}

fn check_sizes(limits: &Limits, key_len: usize, value_len: usize) -> Result<(), String> {
    if key_len > limits.key_bytes_max {
        return Err(format!(
            "key of {key_len} bytes is over the limit of {} bytes",
            limits.key_bytes_max
        ));
    }
    if value_len > limits.value_bytes_max {
        return Err(format!(
            "value of {value_len} bytes is over the limit of {} bytes",
            limits.value_bytes_max
        ));
    }
    Ok(())
}

/// Decodes the TSV escapes of one field; the error names the column (1-based, in the field) of the bad escape.
pub fn unescape_into(field: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
    let mut rest = field;
    while let Some(slash) = memchr::memchr(b'\\', rest) {
        out.extend_from_slice(&rest[..slash]);
        let column = field.len() - rest.len() + slash + 1;
        let (byte, used) = match rest.get(slash + 1) {
            Some(b'\\') => (b'\\', 2),
            Some(b't') => (b'\t', 2),
            Some(b'n') => (b'\n', 2),
            Some(b'r') => (b'\r', 2),
            Some(b'0') => (0, 2),
            Some(b'x') => match rest.get(slash + 2..slash + 4).and_then(hex_byte) {
                Some(byte) => (byte, 4),
                None => {
                    return Err(format!(
                        "bad \\x escape at column {column} (need two hex digits)"
                    ))
                }
            },
            Some(&other) => {
                return Err(format!(
                    "bad escape '\\{}' at column {column}",
                    (other as char).escape_default()
                ))
            }
            None => {
                return Err(format!(
                    "lone backslash at the end of the field (column {column})"
                ))
            }
        };
        out.push(byte);
        rest = &rest[slash + used..];
    }
    out.extend_from_slice(rest);
    Ok(())
}

fn hex_byte(digits: &[u8]) -> Option<u8> {
    let text = std::str::from_utf8(digits).ok()?;
    u8::from_str_radix(text, 16).ok()
}

/// Bytes the TSV writer escapes.
fn needs_tsv_escape(byte: u8) -> bool {
    matches!(byte, b'\\' | b'\t' | b'\n' | b'\r')
}

pub fn escape_tsv_into(field: &[u8], out: &mut Vec<u8>) {
    let mut rest = field;
    while let Some(position) = rest.iter().position(|&byte| needs_tsv_escape(byte)) {
        out.extend_from_slice(&rest[..position]);
        out.extend_from_slice(match rest[position] {
            b'\\' => b"\\\\",
            b'\t' => b"\\t",
            b'\n' => b"\\n",
            _ => b"\\r",
        });
        rest = &rest[position + 1..];
    }
    out.extend_from_slice(rest);
}

// ----- csv -------------------------------------------------------------------------------------------

/// Where a CSV field ended.
enum FieldEnd {
    /// A comma: another field follows; `at` is just past it.
    Comma { at: usize },
    /// The record's line end (or the end of input); `at` is just past it.
    Record { at: usize },
}

enum FieldError {
    NeedMore,
    Broken { at: usize, message: String },
}

fn parse_csv(
    window: &[u8],
    eof: bool,
    limits: &Limits,
    batch: &mut Batch,
    scratch: &mut Vec<u8>,
) -> Parsed {
    if window.is_empty() {
        return Parsed::NeedMore;
    }
    if let Some(blank) = blank_line(window) {
        return Parsed::Blank {
            consumed: blank,
            lines: 1,
        };
    }
    let start = batch.data.len();
    let mut lengths = [0usize; 2];
    let mut fields = 0;
    let mut at = 0;
    let consumed = loop {
        let out: &mut Vec<u8> = if fields < 2 {
            &mut batch.data
        } else {
            scratch.clear();
            scratch
        };
        let before = out.len();
        let end = match csv_field(window, at, eof, out) {
            Ok(end) => end,
            Err(FieldError::NeedMore) => return Parsed::NeedMore,
            Err(FieldError::Broken { at, message }) => return Parsed::Broken { at, message },
        };
        if fields < 2 {
            lengths[fields] = out.len() - before;
        }
        fields += 1;
        match end {
            FieldEnd::Comma { at: next } => at = next,
            FieldEnd::Record { at: next } => break next,
        }
    };
    let lines = count_lines(&window[..consumed]);
    let bad = |message: String| Parsed::Bad {
        consumed,
        lines,
        message,
    };
    if fields != 2 {
        return bad(format!("expected 2 fields (key,value), found {fields}"));
    }
    if let Err(message) = check_sizes(limits, lengths[0], lengths[1]) {
        return bad(message);
    }
    batch.spans.push(Span {
        start,
        key_len: lengths[0] as u32,
        value_len: lengths[1] as u32,
    });
    Parsed::Record { consumed, lines }
}

/// The length of an empty line (LF or CRLF) at the start of `window`.
fn blank_line(window: &[u8]) -> Option<usize> {
    match window {
        [b'\n', ..] => Some(1),
        [b'\r', b'\n', ..] => Some(2),
        _ => None,
    }
}

/// Parses the field starting at `at`, appending its bytes to `out`.
fn csv_field(
    window: &[u8],
    at: usize,
    eof: bool,
    out: &mut Vec<u8>,
) -> Result<FieldEnd, FieldError> {
    if window.get(at) == Some(&b'"') {
        return quoted_field(window, at, eof, out);
    }
    let rest = &window[at..];
    let Some(found) = memchr::memchr3(b',', b'\n', b'"', rest) else {
        if !eof {
            return Err(FieldError::NeedMore);
        }
        out.extend_from_slice(rest);
        return Ok(FieldEnd::Record { at: window.len() });
    };
    match rest[found] {
        b',' => {
            out.extend_from_slice(&rest[..found]);
            Ok(FieldEnd::Comma { at: at + found + 1 })
        }
        b'\n' => {
            let field = &rest[..found];
            out.extend_from_slice(field.strip_suffix(b"\r").unwrap_or(field));
            Ok(FieldEnd::Record { at: at + found + 1 })
        }
        _ => Err(FieldError::Broken {
            at: at + found,
            message: format!(
                "quote inside an unquoted field at column {} (quote the whole field)",
                column(window, at + found)
            ),
        }),
    }
}

fn quoted_field(
    window: &[u8],
    at: usize,
    eof: bool,
    out: &mut Vec<u8>,
) -> Result<FieldEnd, FieldError> {
    let mut position = at + 1;
    loop {
        let Some(found) = memchr::memchr(b'"', &window[position..]) else {
            return Err(need_more_or(eof, at, "unterminated quoted field".into()));
        };
        out.extend_from_slice(&window[position..position + found]);
        let quote = position + found;
        match window.get(quote + 1) {
            Some(b'"') => {
                out.push(b'"');
                position = quote + 2;
            }
            Some(b',') => return Ok(FieldEnd::Comma { at: quote + 2 }),
            Some(b'\n') => return Ok(FieldEnd::Record { at: quote + 2 }),
            Some(b'\r') => match window.get(quote + 2) {
                Some(b'\n') => return Ok(FieldEnd::Record { at: quote + 3 }),
                None if !eof => return Err(FieldError::NeedMore),
                _ => return Err(after_quote(window, quote + 1)),
            },
            Some(_) => return Err(after_quote(window, quote + 1)),
            None if eof => return Ok(FieldEnd::Record { at: quote + 1 }),
            None => return Err(FieldError::NeedMore),
        }
    }
}

fn need_more_or(eof: bool, at: usize, message: String) -> FieldError {
    if eof {
        FieldError::Broken { at, message }
    } else {
        FieldError::NeedMore
    }
}

fn after_quote(window: &[u8], at: usize) -> FieldError {
    FieldError::Broken {
        at,
        message: format!(
            "unexpected byte after a closing quote at column {} (expected , or a line end)",
            column(window, at)
        ),
    }
}

/// 1-based column of `at` on its line (within the record).
fn column(window: &[u8], at: usize) -> usize {
    match memchr::memrchr(b'\n', &window[..at]) {
        Some(line_start) => at - line_start,
        None => at + 1,
    }
}

fn csv_needs_quotes(field: &[u8]) -> bool {
    field
        .iter()
        .any(|&byte| matches!(byte, b',' | b'"' | b'\r' | b'\n'))
}

pub fn escape_csv_into(field: &[u8], out: &mut Vec<u8>) {
    if !csv_needs_quotes(field) {
        return out.extend_from_slice(field);
    }
    out.push(b'"');
    let mut rest = field;
    while let Some(quote) = memchr::memchr(b'"', rest) {
        out.extend_from_slice(&rest[..=quote]);
        out.push(b'"');
        rest = &rest[quote + 1..];
    }
    out.extend_from_slice(rest);
    out.push(b'"');
}

// ----- writer ----------------------------------------------------------------------------------------

#[derive(Debug)]
pub enum WriteError {
    Io(io::Error),
    /// The record cannot be written in this format (a sort record needs a 10-byte key and 90-byte value).
    Unrepresentable(String),
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteError::Io(error) => write!(f, "write error: {error}"),
            WriteError::Unrepresentable(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for WriteError {}

/// Encodes records into an output, through a buffer it flushes when full.
pub struct RecordWriter<W: Write> {
    output: W,
    format: Format,
    buf: Vec<u8>,
    bytes_written: u64,
}

/// Encoded bytes gathered before one write to the output.
const WRITE_CHUNK_BYTES: usize = 4 << 20;

impl<W: Write> RecordWriter<W> {
    pub fn new(output: W, format: Format) -> Self {
        RecordWriter {
            output,
            format,
            buf: Vec::with_capacity(WRITE_CHUNK_BYTES),
            bytes_written: 0,
        }
    }

    /// Bytes encoded so far (flushed or not).
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written + self.buf.len() as u64
    }

    pub fn write(&mut self, key: &[u8], value: &[u8]) -> Result<(), WriteError> {
        match self.format {
            Format::Sort => {
                if key.len() != SORT_KEY_BYTES || value.len() != SORT_VALUE_BYTES {
                    return Err(WriteError::Unrepresentable(format!(
                        "key of {} bytes / value of {} bytes does not fit a sort record \
                         ({SORT_KEY_BYTES} + {SORT_VALUE_BYTES} bytes): use --format tsv or csv",
                        key.len(),
                        value.len()
                    )));
                }
                self.buf.extend_from_slice(key);
                self.buf.extend_from_slice(value);
            }
            Format::Tsv => {
                escape_tsv_into(key, &mut self.buf);
                self.buf.push(b'\t');
                escape_tsv_into(value, &mut self.buf);
                self.buf.push(b'\n');
            }
            Format::Csv => {
                escape_csv_into(key, &mut self.buf);
                self.buf.push(b',');
                escape_csv_into(value, &mut self.buf);
                self.buf.push(b'\n');
            }
        }
        if self.buf.len() >= WRITE_CHUNK_BYTES {
            self.flush_buffer().map_err(WriteError::Io)?;
        }
        Ok(())
    }

    fn flush_buffer(&mut self) -> io::Result<()> {
        self.output.write_all(&self.buf)?;
        self.bytes_written += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Writes out what is buffered and hands back the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.flush_buffer()?;
        self.output.flush()?;
        Ok(self.output)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

    /// Reads everything, collecting records and record errors (the skip policy).
    fn read_all(bytes: &[u8], format: Format) -> (Pairs, Vec<RecordError>) {
        read_all_with(bytes, format, Limits::default())
    }

    fn read_all_with(bytes: &[u8], format: Format, limits: Limits) -> (Pairs, Vec<RecordError>) {
        let mut reader = RecordReader::new(bytes, format, limits);
        let (mut batch, mut errors) = (Batch::default(), Vec::new());
        loop {
            match reader.read_into(&mut batch) {
                Ok(true) => {}
                Ok(false) => break,
                Err(ReadError::Record(error)) => errors.push(error),
                Err(ReadError::Io(error)) => panic!("{error}"),
            }
        }
        assert_eq!(reader.offset(), bytes.len() as u64, "all input consumed");
        let pairs = batch
            .iter()
            .map(|(key, value)| (key.to_vec(), value.to_vec()))
            .collect();
        (pairs, errors)
    }

    fn write_all(pairs: &Pairs, format: Format) -> Vec<u8> {
        let mut writer = RecordWriter::new(Vec::new(), format);
        for (key, value) in pairs {
            writer.write(key, value).unwrap();
        }
        writer.finish().unwrap()
    }

    fn pair(key: &str, value: &str) -> (Vec<u8>, Vec<u8>) {
        (key.as_bytes().to_vec(), value.as_bytes().to_vec())
    }

    fn error_at(line: Option<u64>, offset: u64) -> impl Fn(&RecordError) -> bool {
        move |error| error.line == line && error.offset == offset
    }

    #[test]
    fn formats_follow_extensions() {
        assert_eq!(Format::from_path(Path::new("a.sort")), Some(Format::Sort));
        assert_eq!(Format::from_path(Path::new("a.DAT")), Some(Format::Sort));
        assert_eq!(Format::from_path(Path::new("a.tsv")), Some(Format::Tsv));
        assert_eq!(Format::from_path(Path::new("a.txt")), Some(Format::Tsv));
        assert_eq!(Format::from_path(Path::new("a.csv")), Some(Format::Csv));
        assert_eq!(Format::from_path(Path::new("a.bin")), None);
        assert!(Format::resolve(None, Path::new("a")).is_err());
        assert_eq!(
            Format::resolve(Some(Format::Csv), Path::new("a.tsv")).unwrap(),
            Format::Csv
        );
    }

    #[test]
    fn sort_records_and_a_truncated_tail() {
        let mut bytes: Vec<u8> = (0..250u32).map(|index| index as u8).collect();
        let (pairs, errors) = read_all(&bytes, Format::Sort);
        assert_eq!(pairs.len(), 2);
        assert_eq!(
            pairs[1].0,
            (100..110u32).map(|i| i as u8).collect::<Vec<_>>()
        );
        assert_eq!(pairs[1].1.len(), 90);
        assert_eq!(errors.len(), 1);
        assert!(error_at(None, 200)(&errors[0]), "{:?}", errors[0]);
        assert!(errors[0].message.contains("50 of 100"), "{}", errors[0]);
        bytes.truncate(200);
        assert_eq!(read_all(&bytes, Format::Sort).1, vec![]);
    }

    #[test]
    fn tsv_escapes_decode() {
        let input = b"a\\tb\tx\\ny\\\\z\\r\\0\\x41\\xff\r\n\nk2\t\n";
        let (pairs, errors) = read_all(input, Format::Tsv);
        assert_eq!(errors, vec![]);
        assert_eq!(
            pairs,
            vec![
                (b"a\tb".to_vec(), b"x\ny\\z\r\0A\xff".to_vec()),
                (b"k2".to_vec(), b"".to_vec())
            ]
        );
    }

    #[test]
    fn tsv_errors_name_line_and_offset_and_reading_goes_on() {
        let input = b"k1\tv1\nnotab\nk3\tv\\q\nk4\ta\tb\nk5\tv5\n\\\tv\nk7\tv7";
        let (pairs, errors) = read_all(input, Format::Tsv);
        assert_eq!(
            pairs,
            vec![pair("k1", "v1"), pair("k5", "v5"), pair("k7", "v7")]
        );
        let locations: Vec<(Option<u64>, u64)> = errors
            .iter()
            .map(|error| (error.line, error.offset))
            .collect();
        assert_eq!(
            locations,
            vec![(Some(2), 6), (Some(3), 12), (Some(4), 19), (Some(6), 32)]
        );
        assert!(errors[0].message.contains("no TAB"));
        assert!(
            errors[1].message.contains("bad escape '\\q' at column 2"),
            "{}",
            errors[1]
        );
        assert!(errors[2].message.contains("found 3"));
        assert!(errors[3].message.contains("lone backslash"));
        assert_eq!(
            errors[1].to_string(),
            "line 3 (byte offset 12): value: bad escape '\\q' at column 2"
        );
    }

    #[test]
    fn csv_quoting_decodes() {
        let input =
            b"plain,value\r\n\"a,b\",\"say \"\"hi\"\"\nthere\"\n\n\"\",\xff\xfe\nlast,\"x\"";
        let (pairs, errors) = read_all(input, Format::Csv);
        assert_eq!(errors, vec![]);
        assert_eq!(
            pairs,
            vec![
                pair("plain", "value"),
                pair("a,b", "say \"hi\"\nthere"),
                (b"".to_vec(), b"\xff\xfe".to_vec()),
                pair("last", "x"),
            ]
        );
    }

    #[test]
    fn csv_errors_name_line_and_offset_and_reading_goes_on() {
        let input = b"k1,v1\nonly\nk3,v3,extra\n\"multi\nline\",\"v\"x\nk5,v\"5\nk6,v6\n\"open,v";
        let (pairs, errors) = read_all(input, Format::Csv);
        assert_eq!(pairs, vec![pair("k1", "v1"), pair("k6", "v6")]);
        let locations: Vec<(Option<u64>, u64)> = errors
            .iter()
            .map(|error| (error.line, error.offset))
            .collect();
        assert_eq!(
            locations,
            vec![
                (Some(2), 6),
                (Some(3), 11),
                (Some(4), 23),
                (Some(6), 41),
                (Some(8), 54)
            ]
        );
        assert!(errors[0].message.contains("found 1"));
        assert!(errors[1].message.contains("found 3"));
        assert!(
            errors[2]
                .message
                .contains("after a closing quote at column 10"),
            "{}",
            errors[2]
        );
        assert!(errors[3]
            .message
            .contains("quote inside an unquoted field at column 5"));
        assert!(errors[4].message.contains("unterminated"));
    }

    #[test]
    fn limits_apply_to_decoded_sizes() {
        let limits = Limits {
            key_bytes_max: 4,
            value_bytes_max: 8,
        };
        let input = b"abcd\t12345678\nabcde\tv\nk\t123456789\n";
        let (pairs, errors) = read_all_with(input, Format::Tsv, limits);
        assert_eq!(pairs, vec![pair("abcd", "12345678")]);
        assert_eq!(errors.len(), 2);
        assert!(errors[0].message.contains("key of 5 bytes"));
        assert!(errors[1].message.contains("value of 9 bytes"));
        let (pairs, errors) = read_all_with(b"abcde,v\nk,v\n", Format::Csv, limits);
        assert_eq!((pairs.len(), errors.len()), (1, 1));
    }

    #[test]
    fn an_overlong_line_is_skipped_without_buffering_it() {
        let limits = Limits {
            key_bytes_max: 16,
            value_bytes_max: 16,
        };
        let mut input = b"k\tv\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 3 * READ_CHUNK_BYTES));
        input.extend_from_slice(b"\nk2\tv2\n");
        let (pairs, errors) = read_all_with(&input, Format::Tsv, limits);
        assert_eq!(pairs, vec![pair("k", "v"), pair("k2", "v2")]);
        assert_eq!(errors.len(), 1);
        assert!(error_at(Some(2), 4)(&errors[0]), "{:?}", errors[0]);
    }

    #[test]
    fn long_records_cross_buffer_refills() {
        let value = vec![b','; 3 * READ_CHUNK_BYTES];
        let pairs = vec![(b"big".to_vec(), value), pair("small", "v")];
        for format in [Format::Tsv, Format::Csv] {
            let (read, errors) = read_all(&write_all(&pairs, format), format);
            assert_eq!(errors, vec![]);
            assert_eq!(read, pairs, "{format:?}");
        }
    }

    #[test]
    fn sort_writer_refuses_other_sizes() {
        let mut writer = RecordWriter::new(Vec::new(), Format::Sort);
        assert!(matches!(
            writer.write(b"short", &[0; 90]),
            Err(WriteError::Unrepresentable(_))
        ));
        writer.write(&[1; 10], &[2; 90]).unwrap();
        assert_eq!(writer.finish().unwrap().len(), 100);
    }

    fn any_pairs() -> impl Strategy<Value = Pairs> {
        let bytes = proptest::collection::vec(
            prop_oneof![
                Just(b'\t'),
                Just(b'\n'),
                Just(b'\r'),
                Just(b'\\'),
                Just(b'"'),
                Just(b','),
                any::<u8>()
            ],
            0..40,
        );
        proptest::collection::vec((bytes.clone(), bytes), 0..20)
    }

    proptest! {
        #[test]
        fn text_formats_round_trip_any_bytes(pairs in any_pairs()) {
            for format in [Format::Tsv, Format::Csv] {
                let (read, errors) = read_all(&write_all(&pairs, format), format);
                prop_assert_eq!(errors, vec![]);
                prop_assert_eq!(&read, &pairs);
            }
        }

        #[test]
        fn sort_format_round_trips(records in proptest::collection::vec(
            (proptest::collection::vec(any::<u8>(), 10), proptest::collection::vec(any::<u8>(), 90)),
            0..20,
        )) {
            let (read, errors) = read_all(&write_all(&records, Format::Sort), Format::Sort);
            prop_assert_eq!(errors, vec![]);
            prop_assert_eq!(read, records);
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            for format in [Format::Sort, Format::Tsv, Format::Csv] {
                read_all(&bytes, format);
            }
        }
    }
}
