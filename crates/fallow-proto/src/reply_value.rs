//! RESP2/RESP3 replies parsed back into values: what a script's `redis.call` sees of the reply its
//! command wrote. The input is the server's own output, but the parser still checks every frame and
//! bounds its nesting, so a bad frame is an error, never a panic.

/// One reply, with RESP3's types kept apart (RESP2 writers never produce the RESP3-only variants).
#[derive(Clone, Debug, PartialEq)]
pub enum ReplyValue {
    Status(Vec<u8>),
    Error(Vec<u8>),
    Int(i64),
    Bulk(Vec<u8>),
    /// `$-1`, `*-1` or RESP3's `_`.
    Null,
    Array(Vec<ReplyValue>),
    Map(Vec<(ReplyValue, ReplyValue)>),
    Set(Vec<ReplyValue>),
    Push(Vec<ReplyValue>),
    Double(f64),
    Bool(bool),
    BigNumber(Vec<u8>),
    /// A verbatim string: its three-letter format and its text.
    Verbatim([u8; 3], Vec<u8>),
}

/// Nesting deeper than this is refused (the server's own replies nest a few levels).
pub const REPLY_DEPTH_MAX: usize = 1_000;

#[derive(Debug, PartialEq, Eq)]
pub enum ReplyParseError {
    /// The input ends inside a frame.
    Incomplete,
    /// Not a valid frame, at this byte offset.
    Invalid(usize),
    TooDeep,
}

/// Parses the first reply in `input`: the value and the bytes it took.
pub fn parse_reply(input: &[u8]) -> Result<(ReplyValue, usize), ReplyParseError> {
    let mut parser = Parser { input, at: 0 };
    let value = parser.value(0)?;
    Ok((value, parser.at))
}

struct Parser<'a> {
    input: &'a [u8],
    at: usize,
}

impl<'a> Parser<'a> {
    fn value(&mut self, depth: usize) -> Result<ReplyValue, ReplyParseError> {
        if depth > REPLY_DEPTH_MAX {
            return Err(ReplyParseError::TooDeep);
        }
        let start = self.at;
        let kind = *self.input.get(self.at).ok_or(ReplyParseError::Incomplete)?;
        self.at += 1;
        let line = self.line()?;
        Ok(match kind {
            b'+' => ReplyValue::Status(line.to_vec()),
            b'-' => ReplyValue::Error(line.to_vec()),
            b':' => ReplyValue::Int(number(line, start)?),
            b'(' => ReplyValue::BigNumber(line.to_vec()),
            b',' => ReplyValue::Double(double(line, start)?),
            b'#' => match line {
                b"t" => ReplyValue::Bool(true),
                b"f" => ReplyValue::Bool(false),
                _ => return Err(ReplyParseError::Invalid(start)),
            },
            b'_' => ReplyValue::Null,
            b'$' | b'=' => return self.blob(kind, number(line, start)?, start),
            b'*' | b'~' | b'>' => {
                let len = number(line, start)?;
                if len < 0 {
                    return Ok(ReplyValue::Null);
                }
                let items = self.values(len as usize, depth)?;
                match kind {
                    b'*' => ReplyValue::Array(items),
                    b'~' => ReplyValue::Set(items),
                    _ => ReplyValue::Push(items),
                }
            }
            b'%' => {
                let len = number(line, start)?;
                let flat = self.values((len.max(0) as usize).saturating_mul(2), depth)?;
                let mut pairs = Vec::with_capacity(flat.len() / 2);
                let mut flat = flat.into_iter();
                while let (Some(key), Some(value)) = (flat.next(), flat.next()) {
                    pairs.push((key, value));
                }
                ReplyValue::Map(pairs)
            }
            _ => return Err(ReplyParseError::Invalid(start)),
        })
    }

    fn values(&mut self, count: usize, depth: usize) -> Result<Vec<ReplyValue>, ReplyParseError> {
        // Each element takes at least 3 bytes, so a count the input cannot hold is not preallocated.
        let mut items = Vec::with_capacity(count.min((self.input.len() - self.at) / 3));
        for _ in 0..count {
            items.push(self.value(depth + 1)?);
        }
        Ok(items)
    }

    fn blob(&mut self, kind: u8, len: i64, start: usize) -> Result<ReplyValue, ReplyParseError> {
        if len < 0 {
            return Ok(ReplyValue::Null);
        }
        let end = self
            .at
            .checked_add(len as usize + 2)
            .ok_or(ReplyParseError::Invalid(start))?;
        if end > self.input.len() {
            return Err(ReplyParseError::Incomplete);
        }
        let body = &self.input[self.at..end - 2];
        if &self.input[end - 2..end] != b"\r\n" {
            return Err(ReplyParseError::Invalid(start));
        }
        self.at = end;
        if kind == b'$' {
            return Ok(ReplyValue::Bulk(body.to_vec()));
        }
        if body.len() < 4 || body[3] != b':' {
            return Err(ReplyParseError::Invalid(start));
        }
        Ok(ReplyValue::Verbatim(
            [body[0], body[1], body[2]],
            body[4..].to_vec(),
        ))
    }

    /// The rest of the current line, without its CRLF.
    fn line(&mut self) -> Result<&'a [u8], ReplyParseError> {
        let rest: &'a [u8] = &self.input[self.at..];
        let end = memchr::memmem::find(rest, b"\r\n").ok_or(ReplyParseError::Incomplete)?;
        self.at += end + 2;
        Ok(&rest[..end])
    }
}

fn number(line: &[u8], start: usize) -> Result<i64, ReplyParseError> {
    crate::resp::parse_i64(line).ok_or(ReplyParseError::Invalid(start))
}

fn double(line: &[u8], start: usize) -> Result<f64, ReplyParseError> {
    let text = std::str::from_utf8(line).map_err(|_| ReplyParseError::Invalid(start))?;
    match text {
        "inf" => Ok(f64::INFINITY),
        "-inf" => Ok(f64::NEG_INFINITY),
        _ => text.parse().map_err(|_| ReplyParseError::Invalid(start)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ReplyWriter;

    fn round_trip(resp3: bool, write: impl FnOnce(&mut ReplyWriter)) -> ReplyValue {
        let mut out = ReplyWriter::new(resp3);
        write(&mut out);
        let (value, used) = parse_reply(&out.buf).expect("the writer's own output parses");
        assert_eq!(used, out.buf.len(), "one reply takes the whole buffer");
        value
    }

    #[test]
    fn every_writer_reply_parses_back() {
        assert_eq!(
            round_trip(false, |out| out.ok()),
            ReplyValue::Status(b"OK".to_vec())
        );
        assert_eq!(
            round_trip(false, |out| out.error("ERR x")),
            ReplyValue::Error(b"ERR x".to_vec())
        );
        assert_eq!(round_trip(false, |out| out.int(-7)), ReplyValue::Int(-7));
        assert_eq!(round_trip(false, |out| out.nil()), ReplyValue::Null);
        assert_eq!(round_trip(true, |out| out.nil_array()), ReplyValue::Null);
        assert_eq!(
            round_trip(true, |out| out.double(1.5)),
            ReplyValue::Double(1.5)
        );
        assert_eq!(
            round_trip(false, |out| out.double(1.5)),
            ReplyValue::Bulk(b"1.5".to_vec())
        );
        assert_eq!(
            round_trip(true, |out| out.bool(true)),
            ReplyValue::Bool(true)
        );
        assert_eq!(
            round_trip(true, |out| out.verbatim("txt", b"a\r\nb")),
            ReplyValue::Verbatim(*b"txt", b"a\r\nb".to_vec())
        );
        let map = round_trip(true, |out| {
            out.map_len(1);
            out.bulk(b"k");
            out.set_len(2);
            out.int(1);
            out.bulk(b"");
        });
        assert_eq!(
            map,
            ReplyValue::Map(vec![(
                ReplyValue::Bulk(b"k".to_vec()),
                ReplyValue::Set(vec![ReplyValue::Int(1), ReplyValue::Bulk(Vec::new())])
            )])
        );
    }

    #[test]
    fn bad_frames_are_errors_not_panics() {
        assert_eq!(parse_reply(b""), Err(ReplyParseError::Incomplete));
        assert_eq!(
            parse_reply(b"$5\r\nab\r\n"),
            Err(ReplyParseError::Incomplete)
        );
        assert_eq!(parse_reply(b"$2\r\nabcd"), Err(ReplyParseError::Invalid(0)));
        assert_eq!(parse_reply(b"?x\r\n"), Err(ReplyParseError::Invalid(0)));
        assert_eq!(
            parse_reply(b"*9999999999\r\n"),
            Err(ReplyParseError::Incomplete)
        );
        assert_eq!(
            parse_reply(b"=2\r\nab\r\n"),
            Err(ReplyParseError::Invalid(0))
        );
        let deep = "*1\r\n".repeat(REPLY_DEPTH_MAX + 2);
        assert_eq!(parse_reply(deep.as_bytes()), Err(ReplyParseError::TooDeep));
    }
}
